// Fuzzes the unwinder's reading of call frame information (src/unwind/cfi_table.h) on files a user
// could craft (any process's binary is read for its .eh_frame): the input is the whole file, read
// through a memfd with CfiTable::Read. A table that reads is then asked for rows across the file
// and used to unwind a stack made of the input's own bytes (every register and every stack word
// the file's bytes), so the CFA and register rules it holds are evaluated (src/unwind/
// dwarf_expr.h), and its in-kernel unwind table is built (src/unwind/unwind_table.h). Checks:
// errors name the file; an unwind ends with a reason, within max_frames, and its frames are in
// the one file; the table is sorted, bounded and agrees with itself.
// Seeds: two static binaries of a three-function chain built -O2 (with and without
// .eh_frame_hdr), stripped (fuzz/corpus/cfi_fuzzer).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "unwind/cfi_table.h"
#include "unwind/unwind_rows.h"
#include "unwind/unwind_table.h"
#include "unwind/unwinder.h"

using namespace tpe;
using namespace tpe::unwind;

namespace {

// Every address is in the fuzzed file, at address = file offset.
class OneFile : public CodeLookup {
 public:
  OneFile(const CfiTable* t, uint64_t size) : table_(t), size_(size) {}
  CodeAt At(uint64_t address) override {
    CodeAt c;
    if (address < size_) {
      c.file = 1;
      c.offset = address;
      c.cfi = table_;
    }
    return c;
  }

 private:
  const CfiTable* table_;
  uint64_t size_;
};

uint64_t Word(const uint8_t* data, size_t size, size_t at) {
  uint64_t v = 0;
  if (size >= 8) std::memcpy(&v, data + (at % (size - 7)), 8);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("cfi_fuzzer", MFD_CLOEXEC);
  TPE_FUZZ_CHECK(fd >= 0, "memfd_create failed");
  TPE_FUZZ_CHECK(::ftruncate(fd, 0) == 0, "ftruncate");
  TPE_FUZZ_CHECK(::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size), "pwrite");
  auto t = CfiTable::Read(fd, "fuzz.elf");
  if (!t.ok()) {
    TPE_FUZZ_CHECK(t.status().message().find("fuzz.elf") != std::string::npos, "error does not name the file: %s",
                   t.status().message().c_str());
    return 0;
  }
  const CfiTable& table = **t;
  // Rows across the file: every 16th offset, at most 4096 of them.
  const uint64_t step = size / 4096 + 16;
  for (uint64_t off = 0; off < size; off += step) {
    bool signal = false;
    (void)table.RowAt(off, &signal);
  }
  // The in-kernel unwinder's table (unwind/unwind_table.h): sorted, neighbours differ, bounded,
  // and every entry's rule is what the row at its offset says.
  constexpr uint64_t kMaxRows = 100000;
  auto unwind_table = BuildUnwindTable(table, kMaxRows);
  if (unwind_table.ok()) {
    const auto& e = unwind_table->entries;
    TPE_FUZZ_CHECK(unwind_table->rows <= kMaxRows && e.size() <= unwind_table->rows, "%zu entries of %zu rows",
                   e.size(), unwind_table->rows);
    for (size_t i = 1; i < e.size(); ++i) {
      TPE_FUZZ_CHECK(e[i - 1].offset < e[i].offset && !(e[i - 1].rule == e[i].rule), "entry %zu out of order", i);
    }
    for (size_t i = 0; i < e.size() && i < 256; ++i) {
      TPE_FUZZ_CHECK(unwind_table->RuleAt(e[i].offset) == e[i].rule, "RuleAt(entry %zu) differs", i);
    }
    // Packed as the BPF program reads it: every entry's rule kept, or a stop where it does not
    // fit; never another rule.
    auto packed = PackUnwindTable(*unwind_table);
    if (packed.ok()) {
      const auto& rows = packed->rows;
      for (size_t i = 1; i < rows.size(); ++i) {
        TPE_FUZZ_CHECK(rows[i - 1].offset < rows[i].offset && rows[i - 1].rule != rows[i].rule,
                       "packed row %zu out of order", i);
      }
      for (size_t i = 0; i < e.size() && i < 256; ++i) {
        const UnwindRule r = PackedRuleAt(rows, e[i].offset);
        TPE_FUZZ_CHECK(r == e[i].rule || r.cfa == CfaRule::kStop, "packed rule of entry %zu differs", i);
      }
    }
  } else {
    TPE_FUZZ_CHECK(unwind_table.status().message().find("fuzz.elf") != std::string::npos,
                   "error does not name the file: %s", unwind_table.status().message().c_str());
  }
  // An unwind from each of a few pcs, registers and stack from the file's bytes.
  OneFile lookup(&table, size);
  std::span<const uint8_t> stack(data, size);
  for (size_t start = 0; start < 4; ++start) {
    Registers regs;
    for (int r = 0; r < kDwarfRegisters; ++r) regs.Set(r, Word(data, size, start * 131 + static_cast<size_t>(r) * 8));
    regs.Set(kDwarfRip, Word(data, size, start * 17) % (size + 1));
    regs.Set(kDwarfRsp, 0x10000);  // the stack copy is at 0x10000
    std::vector<UserFrame> frames;
    const UnwindEnd end = Unwind(regs, stack, 32, &lookup, &frames);
    TPE_FUZZ_CHECK(static_cast<int>(end) >= 0 && static_cast<int>(end) < kUnwindEnds, "unwind end %d",
                   static_cast<int>(end));
    TPE_FUZZ_CHECK(frames.size() <= 32, "%zu frames over max_frames 32", frames.size());
    for (const UserFrame& f : frames) TPE_FUZZ_CHECK(f.file == 1 || f.file == kNoFile, "a frame in file %u", f.file);
  }
  return 0;
}
