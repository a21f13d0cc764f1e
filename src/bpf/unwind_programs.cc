#include "bpf/unwind_programs.h"

#include <algorithm>
#include <cstring>
#include <vector>

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

StatusOr<std::string> PackUnwindMappings(std::span<const UnwindMapping> mappings) {
  if (mappings.size() > kMaxUnwindMappings) {
    return InvalidArgument(std::to_string(mappings.size()) + " executable mappings: at most " +
                           std::to_string(kMaxUnwindMappings) + " per process");
  }
  std::vector<UnwindMapping> sorted(mappings.begin(), mappings.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const UnwindMapping& x, const UnwindMapping& y) { return x.start < y.start; });
  constexpr uint64_t kUserTop = uint64_t{1} << 47;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const UnwindMapping& m = sorted[i];
    if (m.end <= m.start || m.end > kUserTop) {
      return InvalidArgument("mapping " + std::to_string(i) + " is not a range of user addresses");
    }
    if (i > 0 && sorted[i - 1].end > m.start) {
      return InvalidArgument("mappings " + std::to_string(i - 1) + " and " + std::to_string(i) + " overlap");
    }
  }
  std::string value(kUnwindMappingsBytes, '\0');
  const auto count = static_cast<uint32_t>(sorted.size());
  std::memcpy(value.data(), &count, 4);
  if (!sorted.empty()) std::memcpy(value.data() + 8, sorted.data(), sorted.size() * sizeof(UnwindMapping));
  return value;
}

const UnwindMapping* FindUnwindMapping(const std::string& value, uint64_t pc) {
  if (value.size() != kUnwindMappingsBytes) return nullptr;
  uint32_t count = 0;
  std::memcpy(&count, value.data(), 4);
  const auto* m = reinterpret_cast<const UnwindMapping*>(value.data() + 8);
  const UnwindMapping* end = m + std::min(count, kMaxUnwindMappings);
  const UnwindMapping* it =
      std::upper_bound(m, end, pc, [](uint64_t p, const UnwindMapping& x) { return p < x.start; });
  if (it == m) return nullptr;
  --it;
  return pc < it->end ? it : nullptr;
}

void EmitMappingSearch(Assembler* a, Label unknown) {
  static_assert((kMaxUnwindMappings & (kMaxUnwindMappings - 1)) == 0 && kMaxUnwindMappings == 256);
  // R2 = the address of entry (index & 255), less 8 (masked: within the value whatever the index).
  auto entry = [a](Reg index) {
    a->MovReg(R2, index);
    a->Alu(BPF_AND, R2, static_cast<int32_t>(kMaxUnwindMappings - 1));
    a->Alu(BPF_LSH, R2, 5);  // * sizeof(UnwindMapping)
    a->AluReg(BPF_ADD, R2, R9);
  };
  a->Load(4, R7, R9, 0);  // hi = count
  a->Jump(BPF_JEQ, R7, 0, unknown);
  a->Jump(BPF_JGT, R7, static_cast<int32_t>(kMaxUnwindMappings), unknown);
  a->Mov(R6, 0);                          // lo
  for (int step = 0; step < 8; ++step) {  // 2^8 = kMaxUnwindMappings
    a->MovReg(R1, R7);
    a->AluReg(BPF_SUB, R1, R6);
    a->Alu(BPF_RSH, R1, 1);
    a->AluReg(BPF_ADD, R1, R6);  // mid
    entry(R1);
    a->Load(8, R2, R2, 8);  // mid's start
    // left = 1 when pc < start (user addresses, below 2^47: the difference's sign).
    a->MovReg(R3, R8);
    a->AluReg(BPF_SUB, R3, R2);
    a->Alu(BPF_RSH, R3, 63);
    a->MovReg(R4, R6);
    a->AluReg(BPF_SUB, R4, R1);
    a->AluReg(BPF_MUL, R4, R3);
    a->AluReg(BPF_ADD, R4, R1);  // lo = left ? lo : mid
    a->MovReg(R5, R1);
    a->AluReg(BPF_SUB, R5, R7);
    a->AluReg(BPF_MUL, R5, R3);
    a->AluReg(BPF_ADD, R7, R5);  // hi = left ? mid : hi
    a->MovReg(R6, R4);
  }
  entry(R6);
  a->Load(8, R3, R2, 8);  // start
  a->JumpReg(BPF_JGT, R3, R8, unknown);
  a->Load(8, R3, R2, 16);  // end
  a->JumpReg(BPF_JGE, R8, R3, unknown);
  a->Load(8, R3, R2, 24);  // bias
  a->AluReg(BPF_SUB, R8, R3);
  a->Load(4, R6, R2, 32);  // first_row
  a->Load(4, R7, R2, 36);  // row_count
}

namespace {

// R0 = the u64 of user memory at R3 (bpf_probe_read_user into R10 + tmp_off); jumps to `fail`
// when the read faults. Clobbers R1-R5.
void ReadUser64(Assembler* a, int16_t tmp_off, Label fail) {
  a->MovReg(R1, R10);
  a->Alu(BPF_ADD, R1, tmp_off);
  a->Mov(R2, 8);
  a->Call(BPF_FUNC_probe_read_user);
  a->Jump(BPF_JNE, R0, 0, fail);
  a->Load(8, R0, R10, tmp_off);
}

}  // namespace

void EmitUnwindStep(Assembler* a, int16_t regs_off, int16_t tmp_off, Label stop) {
  const int16_t rip = regs_off, rsp = static_cast<int16_t>(regs_off + 8), rbp = static_cast<int16_t>(regs_off + 16);
  Label frame_pointer = a->NewLabel(), cfa_known = a->NewLabel(), rbp_known = a->NewLabel();
  Label rbp_at_cfa = a->NewLabel();
  // R7 = the CFA.
  a->MovReg(R1, R6);
  a->Alu(BPF_AND, R1, 3);
  a->Jump(BPF_JEQ, R1, static_cast<int32_t>(unwind::CfaRule::kStop), stop);
  a->Jump(BPF_JEQ, R1, static_cast<int32_t>(unwind::CfaRule::kNoTable), frame_pointer);
  a->Load(8, R7, R10, rsp);
  a->Jump(BPF_JEQ, R1, static_cast<int32_t>(unwind::CfaRule::kRsp), cfa_known);
  a->Load(8, R7, R10, rbp);
  a->Bind(cfa_known);
  a->MovReg(R1, R6);
  a->Alu(BPF_RSH, R1, 12);
  a->AluReg(BPF_ADD, R7, R1);
  a->Goto(rbp_at_cfa);
  // The frame pointer's rule: CFA = rbp + 16; the caller's rbp saved at CFA - 16.
  a->Bind(frame_pointer);
  a->Load(8, R7, R10, rbp);
  a->Alu(BPF_ADD, R7, 16);
  a->Mov(R6,
         static_cast<int32_t>(static_cast<uint32_t>(unwind::RbpRule::kAtCfa) << 2 | 0xfeu << 4));  // rbp at CFA - 16
  a->Bind(rbp_at_cfa);
  // Progress: the caller's frame lies above this one.
  a->Load(8, R1, R10, rsp);
  a->JumpReg(BPF_JLE, R7, R1, stop);
  // The caller's rbp (read first: a fault leaves the registers as they were).
  a->MovReg(R1, R6);
  a->Alu(BPF_RSH, R1, 2);
  a->Alu(BPF_AND, R1, 3);
  Label rbp_same = a->NewLabel(), rbp_undefined = a->NewLabel();
  a->Jump(BPF_JEQ, R1, static_cast<int32_t>(unwind::RbpRule::kSame), rbp_same);
  a->Jump(BPF_JNE, R1, static_cast<int32_t>(unwind::RbpRule::kAtCfa), rbp_undefined);
  a->MovReg(R3, R6);
  a->Alu(BPF_RSH, R3, 4);
  a->Alu(BPF_AND, R3, 0xff);
  a->Alu(BPF_LSH, R3, 56);
  a->Alu(BPF_ARSH, R3, 53);  // the signed byte * 8
  a->AluReg(BPF_ADD, R3, R7);
  ReadUser64(a, tmp_off, stop);
  a->MovReg(R6, R0);
  a->Goto(rbp_known);
  a->Bind(rbp_undefined);
  a->Mov(R6, 0);
  a->Goto(rbp_known);
  a->Bind(rbp_same);
  a->Load(8, R6, R10, rbp);
  a->Bind(rbp_known);
  // The return address at CFA - 8.
  a->MovReg(R3, R7);
  a->Alu(BPF_SUB, R3, 8);
  ReadUser64(a, tmp_off, stop);
  a->Jump(BPF_JEQ, R0, 0, stop);
  a->Store(8, R10, rip, R0);
  a->Store(8, R10, rsp, R7);
  a->Store(8, R10, rbp, R6);
}

}  // namespace tpe::bpf
