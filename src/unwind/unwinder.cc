#include "unwind/unwinder.h"

#include <array>
#include <cstring>

#include "unwind/dwarf_expr.h"

namespace tpe::unwind {

const char* UnwindEndName(UnwindEnd end) {
  switch (end) {
    case UnwindEnd::kOutermost:
      return "outermost";
    case UnwindEnd::kMaxFrames:
      return "max_frames";
    case UnwindEnd::kNoMapping:
      return "no_mapping";
    case UnwindEnd::kNoFramePointer:
      return "no_frame_pointer";
    case UnwindEnd::kStackCopy:
      return "stack_copy";
    case UnwindEnd::kBadRule:
      return "bad_rule";
    case UnwindEnd::kNoProgress:
      return "no_progress";
    case UnwindEnd::kNoRegisters:
      return "no_registers";
  }
  return "unknown";
}

namespace {

// The registers a callee keeps for its caller (psABI): rbx, rbp, r12-r15 (and rsp, the CFA).
constexpr uint32_t kCalleeSaved = (1u << 3) | (1u << 6) | (1u << 12) | (1u << 13) | (1u << 14) | (1u << 15);

}  // namespace

UnwindEnd Unwind(const Registers& regs_in, std::span<const uint8_t> stack, size_t max_frames, CodeLookup* lookup,
                 std::vector<UserFrame>* out) {
  if (!regs_in.Has(kDwarfRip) || !regs_in.Has(kDwarfRsp)) return UnwindEnd::kNoRegisters;
  const uint64_t stack_start = regs_in.value[kDwarfRsp];
  // 8 bytes at `address` from the stack copy. A plain lambda on the common paths (compact rows,
  // frame pointers: inlined); the full rules' evaluator takes it as a ReadMemory.
  const auto read = [&](uint64_t address, uint64_t* value) {
    if (address < stack_start || address - stack_start > stack.size() || stack.size() - (address - stack_start) < 8) {
      return false;
    }
    std::memcpy(value, stack.data() + (address - stack_start), 8);
    return true;
  };
  // This frame's registers and its caller's, in turn: only `known` is cleared per frame (a
  // register not known is never read), not the 17 values.
  std::array<Registers, 2> frame_regs = {regs_in, Registers{}};
  size_t current = 0;
  bool exact_pc = true;  // the leaf's pc, or a signal frame's caller: not a return address
  for (size_t n = 0;; ++n) {
    if (n >= max_frames) return UnwindEnd::kMaxFrames;
    const Registers& regs = frame_regs[current];
    const uint64_t pc = regs.value[kDwarfRip];
    const uint64_t at = exact_pc || pc == 0 ? pc : pc - 1;
    const CodeAt code = lookup->At(at);
    if (code.file == kNoFile) {
      out->push_back(UserFrame{kNoFile, 0});
      return UnwindEnd::kNoMapping;
    }
    out->push_back(UserFrame{code.file, code.anonymous ? pc : code.offset + (pc - at)});
    Registers& caller = frame_regs[current ^ 1];
    caller.known = 0;
    bool signal = false;
    CompactRow compact;
    const RowForm form =
        code.cfi != nullptr && !code.anonymous ? code.cfi->CompactRowAt(code.offset, &compact) : RowForm::kNone;
    FramePtr row = form == RowForm::kFull ? code.cfi->RowAt(code.offset, &signal) : nullptr;
    if (form == RowForm::kCompact) {
      // The same steps as the full rules below, on the rules compilers emit.
      if (!regs.Has(compact.cfa_register)) return UnwindEnd::kBadRule;
      const uint64_t cfa = regs.value[compact.cfa_register] + static_cast<uint64_t>(int64_t{compact.cfa_offset});
      for (int slot = 0; slot < CompactRow::kSlots; ++slot) {
        const int r = CompactRow::kRegisters[static_cast<size_t>(slot)];
        const uint64_t at = cfa + static_cast<uint64_t>(int64_t{compact.offset[static_cast<size_t>(slot)]});
        uint64_t value = 0;
        switch (compact.rule[static_cast<size_t>(slot)]) {
          case CompactRow::Rule::kSame:
            if (r != kDwarfRip && regs.Has(r)) caller.Set(r, regs.value[r]);
            break;
          case CompactRow::Rule::kUndefined:
            if (r == kDwarfRip) return UnwindEnd::kOutermost;
            break;
          case CompactRow::Rule::kAtCfa:
            if (read(at, &value)) {
              caller.Set(r, value);
            } else if (r == kDwarfRip) {
              return UnwindEnd::kStackCopy;
            }
            break;
          case CompactRow::Rule::kIsCfa:
            caller.Set(r, at);
            break;
        }
      }
      caller.Set(kDwarfRsp, cfa);
    } else if (row != nullptr) {
      const ReadMemory read_memory = read;
      Dwarf_Op* ops = nullptr;
      size_t nops = 0;
      if (dwarf_frame_cfa(row.get(), &ops, &nops) != 0 || nops == 0) return UnwindEnd::kBadRule;
      auto cfa = Evaluate(std::span<const Dwarf_Op>(ops, nops), regs, std::nullopt, read_memory);
      if (!cfa) return UnwindEnd::kBadRule;
      // A caller is at a call: only the registers kept across calls (and the return address)
      // mean anything there. A signal frame's caller was interrupted anywhere: all of them.
      for (int r = 0; r < kDwarfRegisters; ++r) {
        if (!signal && r != kDwarfRip && ((kCalleeSaved >> r) & 1) == 0) continue;
        Dwarf_Op mem[3];
        ops = nullptr;
        nops = 0;
        if (dwarf_frame_register(row.get(), r, mem, &ops, &nops) != 0) {
          if (r == kDwarfRip) return UnwindEnd::kBadRule;
          continue;
        }
        if (nops == 0) {
          // ops null: the same value (or unspecified: kept for a callee-saved register);
          // ops == mem: undefined (the return address: this is the outermost frame).
          if (ops == nullptr) {
            if (r != kDwarfRip && ((kCalleeSaved >> r) & 1) != 0 && regs.Has(r)) caller.Set(r, regs.value[r]);
            continue;
          }
          if (r == kDwarfRip) return UnwindEnd::kOutermost;
          continue;
        }
        auto rule = Evaluate(std::span<const Dwarf_Op>(ops, nops), regs, cfa->value, read_memory);
        if (!rule) {
          if (r == kDwarfRip) return UnwindEnd::kBadRule;
          continue;
        }
        uint64_t value = rule->value;
        if (!rule->is_value && !read(rule->value, &value)) {
          if (r == kDwarfRip) return UnwindEnd::kStackCopy;
          continue;
        }
        caller.Set(r, value);
      }
      caller.Set(kDwarfRsp, cfa->value);
    } else {
      // No row: the frame pointer (JIT code, a file without CFI).
      uint64_t rbp = 0, saved_rbp = 0, ra = 0;
      if (!regs.Has(kDwarfRbp) || (rbp = regs.value[kDwarfRbp]) == 0) return UnwindEnd::kNoFramePointer;
      if (!read(rbp, &saved_rbp) || !read(rbp + 8, &ra)) return UnwindEnd::kNoFramePointer;
      for (int r = 0; r < kDwarfRegisters; ++r) {
        if (((kCalleeSaved >> r) & 1) != 0 && regs.Has(r)) caller.Set(r, regs.value[r]);
      }
      caller.Set(kDwarfRbp, saved_rbp);
      caller.Set(kDwarfRip, ra);
      caller.Set(kDwarfRsp, rbp + 16);
    }
    if (!caller.Has(kDwarfRip) || caller.value[kDwarfRip] == 0) return UnwindEnd::kOutermost;
    if (caller.value[kDwarfRsp] <= regs.value[kDwarfRsp] && !signal) return UnwindEnd::kNoProgress;
    current ^= 1;
    exact_pc = signal;
  }
}

}  // namespace tpe::unwind
