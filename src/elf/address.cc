#include "elf/address.h"

#include <cstdio>
#include <string>

namespace tpe::elf {

const LoadSegment* SegmentForAddress(const std::vector<LoadSegment>& segments, uint64_t address) {
  for (const LoadSegment& s : segments) {
    // Written as a difference so a segment at the top of the address space cannot overflow.
    if (address >= s.vaddr && address - s.vaddr < s.filesz) return &s;
  }
  return nullptr;
}

StatusOr<uint64_t> FileOffsetForAddress(const std::vector<LoadSegment>& segments, uint64_t address) {
  const LoadSegment* s = SegmentForAddress(segments, address);
  if (s == nullptr) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(address));
    return NotFound(std::string("address ") + hex + " is in no file-backed PT_LOAD segment (" +
                    std::to_string(segments.size()) + " segments)");
  }
  return address - s->vaddr + s->offset;
}

StatusOr<uint64_t> AddressForFileOffset(const std::vector<LoadSegment>& segments, uint64_t offset) {
  for (const LoadSegment& s : segments) {
    if (offset >= s.offset && offset - s.offset < s.filesz) return offset - s.offset + s.vaddr;
  }
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(offset));
  return NotFound(std::string("file offset ") + hex + " is in no file-backed PT_LOAD segment (" +
                  std::to_string(segments.size()) + " segments)");
}

}  // namespace tpe::elf
