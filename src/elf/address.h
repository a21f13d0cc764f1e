// Virtual address -> file offset through an ELF file's loadable segments.
//
// The kernel's uprobe_events wants `PATH:0xFILE_OFFSET`, while symbols (st_value) and USDT notes
// carry link-time virtual addresses. A PT_LOAD program header maps the file bytes
// [p_offset, p_offset + p_filesz) to the virtual addresses [p_vaddr, p_vaddr + p_filesz), so an
// address inside it is at file offset `address - p_vaddr + p_offset`. This holds for ET_EXEC and
// ET_DYN (PIE, shared libraries) alike: both are described by link-time addresses.
//
// Source: ELF gABI "Program Header" (elf(5), PT_LOAD); libbpf src/usdt.c (find_elf_seg) as reference.
//
// Pure: no I/O. Thread-safety: values and free functions.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace tpe::elf {

// One PT_LOAD program header. Addresses and sizes in bytes.
struct LoadSegment {
  uint64_t vaddr = 0;       // p_vaddr: link-time virtual address of the segment's first byte
  uint64_t offset = 0;      // p_offset: file offset of that byte
  uint64_t filesz = 0;      // p_filesz: bytes backed by the file (the rest of p_memsz is zero-filled .bss)
  uint64_t memsz = 0;       // p_memsz
  bool executable = false;  // PF_X
  bool writable = false;    // PF_W
  bool operator==(const LoadSegment&) const = default;
};

// The file offset of virtual `address`: `address - vaddr + offset` of the segment whose file-backed
// bytes [vaddr, vaddr + filesz) contain it. An address in a segment's .bss tail has no file bytes.
// Errors: NotFound naming the address (hex) when no segment's file-backed bytes contain it.
StatusOr<uint64_t> FileOffsetForAddress(const std::vector<LoadSegment>& segments, uint64_t address);

// Returns the segment whose file-backed bytes contain `address`, or nullptr.
const LoadSegment* SegmentForAddress(const std::vector<LoadSegment>& segments, uint64_t address);

// The inverse: the link-time virtual address of file offset `offset` (`offset - p_offset +
// p_vaddr` of the segment whose file bytes [p_offset, p_offset + p_filesz) hold it), for naming a
// sampled instruction from the mapping it ran in (/proc/PID/maps or PERF_RECORD_MMAP2 give the
// mapping's file offset). Errors: NotFound naming the offset (hex) when no segment holds it.
StatusOr<uint64_t> AddressForFileOffset(const std::vector<LoadSegment>& segments, uint64_t offset);

}  // namespace tpe::elf
