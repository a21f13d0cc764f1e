#include "unwind/registers.h"

namespace tpe::unwind {

Registers FromSampleRegs(std::span<const uint64_t> regs) {
  Registers r;
  if (regs.size() < static_cast<size_t>(kSampleRegsCount)) return r;
  // kSampleRegsUser's bits in ascending order: AX BX CX DX SI DI BP SP IP, then R8..R15; their
  // DWARF numbers (psABI figure 3.36).
  static constexpr int kDwarfOf[kSampleRegsCount] = {0, 3, 2, 1, 4, 5, 6, 7, kDwarfRip, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int i = 0; i < kSampleRegsCount; ++i) r.Set(kDwarfOf[i], regs[static_cast<size_t>(i)]);
  return r;
}

}  // namespace tpe::unwind
