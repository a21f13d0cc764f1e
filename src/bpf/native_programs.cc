// Native buckets in a program (programs.h NativeShape): the cell of a value, found with integer
// operations as NativeLayout (collectors/native_buckets.h) finds it in user space.
#include "bpf/programs_internal.h"

namespace tpe::bpf::internal {
namespace {

// The classic bucket of R7 (by `t`, as EmitBucketTree) as a u32 at R10 + `off`; R1 scratch.
void EmitIndexTree(Assembler* a, const std::vector<uint64_t>& t, bool is_signed, size_t lo, size_t hi, int16_t off,
                   Label done) {
  if (lo == hi) {
    a->StoreImm(4, R10, off, static_cast<int32_t>(lo));
    a->Goto(done);
    return;
  }
  const size_t mid = (lo + hi) / 2;
  Label right = a->NewLabel();
  EmitJumpAbove(a, t[mid], is_signed, right);
  EmitIndexTree(a, t, is_signed, lo, mid, off, done);
  a->Bind(right);
  EmitIndexTree(a, t, is_signed, mid + 1, hi, off, done);
}

// R2 = the number of thresholds t[lo..hi) below the mantissa in R3 (unsigned), by binary
// search; R1 scratch.
void EmitCountBelow(Assembler* a, const std::vector<uint64_t>& t, size_t lo, size_t hi, Label done) {
  if (lo == hi) {
    a->Mov(R2, static_cast<int32_t>(lo));
    a->Goto(done);
    return;
  }
  const size_t mid = (lo + hi) / 2;  // count > mid when the mantissa is above t[mid]
  Label right = a->NewLabel();
  a->LoadImm64(R1, t[mid]);
  a->JumpReg(BPF_JGT, R3, R1, right);
  EmitCountBelow(a, t, lo, mid, done);
  a->Bind(right);
  EmitCountBelow(a, t, mid + 1, hi, done);
}

// Fills the native cell at R10 + `off` (zeroed by the caller) for the value in R7: the classic
// bucket (by `t`) at off + 4, the position (NativeLayout::Position) at off. R0-R5 scratch.
void EmitNativeCell(Assembler* a, const std::vector<uint64_t>& t, bool is_signed, const NativeShape& n, int16_t off) {
  if (!t.empty()) {
    Label classic = a->NewLabel();
    EmitIndexTree(a, t, is_signed, 0, t.size(), static_cast<int16_t>(off + 4), classic);
    a->Bind(classic);
  }
  // R3 = |R7|, R5 = whether the bucket is a negative one.
  a->MovReg(R3, R7);
  a->Mov(R5, n.negate ? 1 : 0);
  if (is_signed) {
    Label positive = a->NewLabel();
    a->Jump(BPF_JSGE, R3, 0, positive);
    a->Alu(BPF_NEG, R3, 0);
    a->Mov(R5, n.negate ? 0 : 1);
    a->Bind(positive);
  }
  Label zero = a->NewLabel(), counted = a->NewLabel(), store = a->NewLabel();
  a->LoadImm64(R1, n.zero_max);
  a->JumpReg(BPF_JLE, R3, R1, zero);  // the zero bucket: position 0, as zeroed
  // R4 = the octave, floor(log2(R3)): a 6-step bit search on a copy in R0.
  a->MovReg(R0, R3);
  a->Mov(R4, 0);
  for (int shift : {32, 16, 8, 4, 2, 1}) {
    Label skip = a->NewLabel();
    a->MovReg(R2, R0);
    a->Alu(BPF_RSH, R2, shift);
    a->Jump(BPF_JEQ, R2, 0, skip);
    a->MovReg(R0, R2);
    a->Alu(BPF_ADD, R4, shift);
    a->Bind(skip);
  }
  // R3 = the mantissa, |R7| << (63 - octave), in [2^63, 2^64).
  a->Mov(R2, 63);
  a->AluReg(BPF_SUB, R2, R4);
  a->AluReg(BPF_LSH, R3, R2);
  EmitCountBelow(a, n.mantissa_thresholds, 0, n.mantissa_thresholds.size(), counted);
  a->Bind(counted);
  // position = 1 + (octave << schema) + below, negated for a negative bucket.
  a->Alu(BPF_LSH, R4, n.schema);
  a->AluReg(BPF_ADD, R4, R2);
  a->Alu(BPF_ADD, R4, 1);
  a->Jump(BPF_JEQ, R5, 0, store);
  a->Alu(BPF_NEG, R4, 0);
  a->Bind(store);
  a->Store(4, R10, off, R4);
  a->Bind(zero);
}

}  // namespace

void EmitObserveNative(Assembler* a, const MapFds& maps, const std::vector<uint64_t>& t, bool is_signed,
                       const NativeShape& n, uint32_t cell_off, Label out, bool small) {
  EmitNativeCell(a, t, is_signed, n, static_cast<int16_t>(kKeyOff + static_cast<int>(cell_off)));
  EmitFindHistogram(a, maps, out);
  EmitPerCpuIncrement(a, R8, 0);
  EmitWideAdd(a, R8, 8, R7, is_signed, small);  // {count, wide sums}: NativeValueBytes
}

}  // namespace tpe::bpf::internal
