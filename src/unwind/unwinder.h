// Unwinding a user stack from a sample's registers and a copy of its stack
// (PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER), with the call frame information of the code it
// runs in — what `perf record --call-graph dwarf` does with libdw, done as samples are read so
// that only frames travel further, never the stack bytes.
//
// Frame by frame (System V x86-64 psABI, "Stack Unwind Algorithm"; DWARF 5 section 6.4.4): the
// code at the pc (the leaf's exact pc; a caller's return address less one, the call before it,
// unless the callee was a signal frame) is looked up (CodeLookup: the process image of the
// sample's time and the file's CfiTable); its row gives the CFA and where the caller's registers
// were saved; the caller's pc is the saved return address and its rsp the CFA. Code with no row
// (JIT code, a file without CFI) is unwound by frame pointer: the caller's rbp and return address
// at [rbp] and [rbp + 8], its rsp rbp + 16, as Parca Agent and the OpenTelemetry profiler fall
// back. Memory is read only from the stack copy.
//
// The walk ends, and says why (UnwindEnd): the outermost frame (its return address is undefined,
// as _start's and a thread's start routine's CFI say, or 0), a pc in no mapping, no row and no
// usable frame pointer, a read outside the copy (a stack deeper than the copy), a rule it cannot
// evaluate, a caller's rsp not above the callee's (a corrupt stack), or max_frames.
//
// Pure given its inputs; thread-safety: as CodeLookup's (one thread).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "process/process_images.h"
#include "unwind/cfi_table.h"
#include "unwind/registers.h"

namespace tpe::unwind {

// The code at an address of the sampled process, as the unwinder needs it.
struct CodeAt {
  FileId file = kNoFile;          // kNoFile: in no mapping known for the process
  uint64_t offset = 0;            // the address's file offset (anonymous memory: the address)
  bool anonymous = false;         // JIT code: no table, the frame pointer
  const CfiTable* cfi = nullptr;  // the file's table; null: none (frame pointer)
};

class CodeLookup {
 public:
  virtual ~CodeLookup() = default;
  virtual CodeAt At(uint64_t address) = 0;
};

enum class UnwindEnd : uint8_t {
  kOutermost,       // the whole stack: the outermost frame's return address is undefined or 0
  kMaxFrames,       // max_frames reached
  kNoMapping,       // a pc in no known mapping
  kNoFramePointer,  // no CFI row, and the frame pointer led nowhere
  kStackCopy,       // a read beyond the stack copy (the stack is deeper than the copy)
  kBadRule,         // a CFA or register rule that cannot be evaluated
  kNoProgress,      // a caller's rsp not above its callee's (a corrupt stack)
  kNoRegisters,     // the sample carried no user registers (a kernel thread)
};
inline constexpr int kUnwindEnds = 8;
const char* UnwindEndName(UnwindEnd end);  // "outermost", "max_frames", ...

// Unwinds: appends the frames (leaf first; frames after the first are return addresses, which
// the symbolizer names by the call before them) to `out`. `stack` holds the bytes from the
// sample's rsp up (stack[0] is at address regs' rsp).
UnwindEnd Unwind(const Registers& regs, std::span<const uint8_t> stack, size_t max_frames, CodeLookup* lookup,
                 std::vector<UserFrame>* out);

}  // namespace tpe::unwind
