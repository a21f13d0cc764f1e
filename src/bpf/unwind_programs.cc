#include "bpf/unwind_programs.h"

#include "unwind/unwind_table.h"

namespace tpe::bpf {
namespace {

// R9 = the u32 at byte `word` (0: offset, 4: rule) of the row whose global index is the u64 at
// R10 + idx_off. Clobbers R0-R5. The shard's key is a u32 at R10 + key_off.
void LoadRowWord(Assembler* a, int rows_fd, int16_t idx_off, int16_t key_off, int16_t word, Label fail) {
  static_assert((kRowsPerShard & (kRowsPerShard - 1)) == 0, "the row within a shard is a mask");
  a->Load(8, R9, R10, idx_off);
  a->Alu(BPF_RSH, R9, 12);  // / kRowsPerShard
  static_assert(kRowsPerShard == 1u << 12);
  a->Store(4, R10, key_off, R9);
  a->LoadMapFd(R1, rows_fd);
  a->MovReg(R2, R10);
  a->Alu(BPF_ADD, R2, key_off);
  a->Call(BPF_FUNC_map_lookup_elem);
  a->Jump(BPF_JEQ, R0, 0, fail);
  a->Load(8, R9, R10, idx_off);
  a->Alu(BPF_AND, R9, static_cast<int32_t>(kRowsPerShard - 1));
  a->Alu(BPF_LSH, R9, 3);  // * 8 bytes: at most kShardBytes - 8, within the value
  a->AluReg(BPF_ADD, R0, R9);
  a->Load(4, R9, R0, word);
}

}  // namespace

void EmitRowSearch(Assembler* a, int rows_fd, int16_t stack_off, Label fail) {
  const int16_t idx_off = stack_off, key_off = static_cast<int16_t>(stack_off + 8);
  Label before = a->NewLabel(), done = a->NewLabel();
  // lo = R6 (its row's offset <= target), hi = R7 (past the last candidate).
  a->AluReg(BPF_ADD, R7, R6);
  a->Store(8, R10, idx_off, R6);
  LoadRowWord(a, rows_fd, idx_off, key_off, 0, fail);
  a->JumpReg(BPF_JGT, R9, R8, before);
  for (int step = 0; step < kRowSearchSteps; ++step) {
    // mid = lo + (hi - lo) / 2: lo itself once hi - lo is 1, so further steps change nothing.
    a->MovReg(R9, R7);
    a->AluReg(BPF_SUB, R9, R6);
    a->Alu(BPF_RSH, R9, 1);
    a->AluReg(BPF_ADD, R9, R6);
    a->Store(8, R10, idx_off, R9);
    LoadRowWord(a, rows_fd, idx_off, key_off, 0, fail);
    // left = 1 when target < offset(mid) (both below 2^32: the 64-bit difference's sign).
    a->MovReg(R1, R8);
    a->AluReg(BPF_SUB, R1, R9);
    a->Alu(BPF_RSH, R1, 63);
    a->Load(8, R2, R10, idx_off);  // mid
    // lo = left ? lo : mid = mid + left * (lo - mid); hi = left ? mid : hi = hi + left * (mid - hi).
    a->MovReg(R3, R6);
    a->AluReg(BPF_SUB, R3, R2);
    a->AluReg(BPF_MUL, R3, R1);
    a->AluReg(BPF_ADD, R3, R2);
    a->MovReg(R4, R2);
    a->AluReg(BPF_SUB, R4, R7);
    a->AluReg(BPF_MUL, R4, R1);
    a->AluReg(BPF_ADD, R7, R4);
    a->MovReg(R6, R3);
  }
  a->Store(8, R10, idx_off, R6);
  LoadRowWord(a, rows_fd, idx_off, key_off, 4, fail);
  a->MovReg(R6, R9);
  a->Goto(done);
  a->Bind(before);
  a->Mov(R6, static_cast<int32_t>(unwind::CfaRule::kNoTable));
  a->Bind(done);
}

}  // namespace tpe::bpf
