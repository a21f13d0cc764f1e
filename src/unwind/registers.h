// The user registers an x86-64 sample carries for unwinding, in the perf and the DWARF numbering.
//
// Sources: arch/x86/include/uapi/asm/perf_regs.h (enum perf_event_x86_regs: the bit of each
// register in attr.sample_regs_user; the sample's regs[] come in ascending bit order,
// perf_event_open(2) "PERF_SAMPLE_REGS_USER"), and the System V x86-64 psABI, "DWARF Register
// Number Mapping" (figure 3.36: 0 rax, 1 rdx, 2 rcx, 3 rbx, 4 rsi, 5 rdi, 6 rbp, 7 rsp, 8-15
// r8-r15, 16 the return address, i.e. rip).
//
// Pure; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace tpe::unwind {

// DWARF register numbers (psABI).
inline constexpr int kDwarfRbx = 3, kDwarfRbp = 6, kDwarfRsp = 7, kDwarfRip = 16;
inline constexpr int kDwarfRegisters = 17;

// attr.sample_regs_user: AX, BX, CX, DX, SI, DI, BP, SP, IP (bits 0-8) and R8-R15 (bits 16-23);
// the flags and segment registers (9-15) are not needed to unwind.
inline constexpr uint64_t kSampleRegsUser = 0x1ffull | (0xffull << 16);
inline constexpr int kSampleRegsCount = 17;  // popcount(kSampleRegsUser)

// One frame's registers by DWARF number, and which are known.
struct Registers {
  std::array<uint64_t, kDwarfRegisters> value{};
  uint32_t known = 0;  // bit n: value[n] holds register n
  bool Has(int n) const { return n >= 0 && n < kDwarfRegisters && (known & (1u << n)) != 0; }
  void Set(int n, uint64_t v) {
    value[static_cast<size_t>(n)] = v;
    known |= 1u << n;
  }
  void Forget(int n) { known &= ~(1u << n); }
};

// The registers of a sample: `regs` as the kernel wrote them for kSampleRegsUser (17 values in
// ascending perf bit order). Fewer values (a kernel thread, PERF_SAMPLE_REGS_ABI_NONE) give no
// known register.
Registers FromSampleRegs(std::span<const uint64_t> regs);

}  // namespace tpe::unwind
