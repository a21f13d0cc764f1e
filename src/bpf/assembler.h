// A small BPF instruction emitter: the instruction encodings of the kernel's BPF ISA
// (Documentation/bpf/standardization/instruction-set.rst; <linux/bpf.h> struct bpf_insn) and a
// program buffer with forward labels, so generators can write straight-line code with jumps to
// named places ("false", "exit") and have the 16-bit offsets filled in at the end.
//
// Registers: R0 return value / helper result, R1-R5 helper arguments (clobbered by calls),
// R6-R9 callee-saved, R10 the read-only frame pointer (the stack is the 512 bytes below it).
//
// Pure: builds a vector of instructions, loads nothing. Thread-safety: values.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tpe::bpf {

enum Reg : uint8_t { R0 = 0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 };

// Memory access sizes in bytes: 1, 2, 4, 8 → BPF_B, BPF_H, BPF_W, BPF_DW.
uint8_t SizeCode(uint32_t bytes);

// A jump target. Create with Assembler::NewLabel, place with Bind; jumps may refer to it before
// it is bound.
struct Label {
  int id = -1;
};

class Assembler {
 public:
  // ALU, 64-bit: dst = dst <op> imm / src. `op` is BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_OR,
  // BPF_AND, BPF_LSH, BPF_RSH, BPF_NEG, BPF_MOD, BPF_XOR, BPF_MOV, BPF_ARSH.
  void Alu(uint8_t op, Reg dst, int32_t imm);
  void AluReg(uint8_t op, Reg dst, Reg src);
  void Mov(Reg dst, int32_t imm) { Alu(BPF_MOV, dst, imm); }
  void MovReg(Reg dst, Reg src) { AluReg(BPF_MOV, dst, src); }
  // dst = a 64-bit constant (two instruction slots).
  void LoadImm64(Reg dst, uint64_t imm);
  // dst = the map whose fd is `map_fd` (BPF_PSEUDO_MAP_FD; two slots).
  void LoadMapFd(Reg dst, int map_fd);
  // dst = *(size *)(src + off), zero-extended.
  void Load(uint32_t size, Reg dst, Reg src, int16_t off);
  // Like Load, then sign-extended from `size` bytes to 64 bits when `is_signed`.
  void LoadExtended(uint32_t size, bool is_signed, Reg dst, Reg src, int16_t off);
  // *(size *)(dst + off) = src / imm.
  void Store(uint32_t size, Reg dst, int16_t off, Reg src);
  void StoreImm(uint32_t size, Reg dst, int16_t off, int32_t imm);
  // lock *(u64 *)(dst + off) += src: atomic, so tasks preempted on one CPU never lose an add.
  void AtomicAdd64(Reg dst, int16_t off, Reg src);
  // src = xchg(*(u64 *)(dst + off), src): BPF_ATOMIC BPF_XCHG (Linux 5.12; atomic on every CPU).
  void AtomicXchg64(Reg dst, int16_t off, Reg src);
  // Zeroes `bytes` (a multiple of 8) of stack at R10 + off.
  void ZeroStack(int16_t off, uint32_t bytes);

  // Conditional jumps, 64-bit compare: BPF_JEQ, BPF_JNE, BPF_JGT, BPF_JGE, BPF_JLT, BPF_JLE,
  // BPF_JSGT, BPF_JSGE, BPF_JSLT, BPF_JSLE, BPF_JSET.
  void Jump(uint8_t op, Reg dst, int32_t imm, Label target);
  void JumpReg(uint8_t op, Reg dst, Reg src, Label target);
  void Goto(Label target);
  void Call(int helper);  // BPF_FUNC_*
  void Exit();

  Label NewLabel();
  void Bind(Label l);  // the next instruction emitted is the label's target

  // Instructions emitted so far (each LoadImm64 counts two).
  size_t size() const { return insns_.size(); }
  // The finished program: every jump resolved. Errors: Internal when a label used is unbound
  // or a jump is farther than 32767 instructions.
  StatusOr<std::vector<bpf_insn>> Finish() const;

 private:
  void Emit(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm);
  struct Fixup {
    size_t insn;
    int label;
  };
  std::vector<bpf_insn> insns_;
  std::vector<int64_t> labels_;  // label id → instruction index, -1 while unbound
  std::vector<Fixup> fixups_;
};

// The instructions as text, one per line ("12: r1 = *(u32 *)(r6 + 16)"-like, bpftool style);
// for --print, test failures and verifier errors.
std::string Disassemble(const std::vector<bpf_insn>& insns);

}  // namespace tpe::bpf
