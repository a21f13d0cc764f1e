// Evaluation of the DWARF expressions call frame information uses: the CFA rule of a frame and
// the rules saying where a caller's register was saved (DWARF 5, section 2.5 "DWARF
// Expressions" and 6.4 "Call Frame Information"), as libdw hands them out (dwarf_frame_cfa,
// dwarf_frame_register: Dwarf_Op arrays).
//
// The subset CFI needs: literals and constants, register-relative values (DW_OP_breg*,
// DW_OP_bregx) and register values (DW_OP_reg*, DW_OP_regx), DW_OP_call_frame_cfa, arithmetic and
// logic (plus, plus_uconst, minus, mul, and, or, xor, shl, shr, shra, neg, not), comparisons,
// stack operations (dup, drop, swap, over, pick), DW_OP_deref (8 bytes, through `read`), and
// DW_OP_stack_value — enough for compilers' CFI, including the PLT's
// "rsp + 8 + ((rip & 15) >= 11) << 3" CFA. Anything else (branches, typed operations, TLS) is
// refused rather than guessed.
//
// Pure (memory comes through `read`); thread-safe.
#pragma once

#include <elfutils/libdw.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "unwind/registers.h"

namespace tpe::unwind {

// Reads the 8 bytes at `address` (false: not readable).
using ReadMemory = std::function<bool(uint64_t address, uint64_t* value)>;

struct ExprResult {
  uint64_t value = 0;
  // True when the expression ended in DW_OP_stack_value, or is a register (DW_OP_reg*): `value`
  // is the register's value itself, not where it is saved.
  bool is_value = false;
};

// Evaluates `ops` with the frame's registers `regs`, the frame's CFA `cfa` (for
// DW_OP_call_frame_cfa; nullopt when evaluating the CFA itself) and memory. nullopt for an
// unsupported operation, an unknown register, a failed read, a stack underflow or more than 64
// operations.
std::optional<ExprResult> Evaluate(std::span<const Dwarf_Op> ops, const Registers& regs, std::optional<uint64_t> cfa,
                                   const ReadMemory& read);

}  // namespace tpe::unwind
