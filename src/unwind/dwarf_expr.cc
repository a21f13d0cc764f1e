#include "unwind/dwarf_expr.h"

#include <dwarf.h>

#include <vector>

namespace tpe::unwind {

std::optional<ExprResult> Evaluate(std::span<const Dwarf_Op> ops, const Registers& regs, std::optional<uint64_t> cfa,
                                   const ReadMemory& read) {
  if (ops.empty() || ops.size() > 64) return std::nullopt;
  std::vector<uint64_t> st;
  st.reserve(8);
  bool is_value = false;
  auto pop = [&](uint64_t* v) {
    if (st.empty()) return false;
    *v = st.back();
    st.pop_back();
    return true;
  };
  auto reg = [&](uint64_t n, uint64_t* v) {
    if (n >= kDwarfRegisters || !regs.Has(static_cast<int>(n))) return false;
    *v = regs.value[n];
    return true;
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const Dwarf_Op& op = ops[i];
    const uint8_t a = op.atom;
    uint64_t x = 0, y = 0;
    if (a >= DW_OP_lit0 && a <= DW_OP_lit31) {
      st.push_back(a - DW_OP_lit0);
    } else if (a >= DW_OP_breg0 && a <= DW_OP_breg31) {
      if (!reg(a - DW_OP_breg0, &x)) return std::nullopt;
      st.push_back(x + op.number);
    } else if (a >= DW_OP_reg0 && a <= DW_OP_reg31) {
      if (!reg(a - DW_OP_reg0, &x) || ops.size() != 1) return std::nullopt;
      return ExprResult{x, true};
    } else {
      switch (a) {
        case DW_OP_regx:
          if (!reg(op.number, &x) || ops.size() != 1) return std::nullopt;
          return ExprResult{x, true};
        case DW_OP_bregx:
          if (!reg(op.number, &x)) return std::nullopt;
          st.push_back(x + op.number2);
          break;
        case DW_OP_const1u:
        case DW_OP_const1s:
        case DW_OP_const2u:
        case DW_OP_const2s:
        case DW_OP_const4u:
        case DW_OP_const4s:
        case DW_OP_const8u:
        case DW_OP_const8s:
        case DW_OP_constu:
        case DW_OP_consts:
          st.push_back(op.number);  // libdw has sign-extended the signed forms
          break;
        case DW_OP_call_frame_cfa:
          if (!cfa) return std::nullopt;
          st.push_back(*cfa);
          break;
        case DW_OP_plus_uconst:
          if (!pop(&x)) return std::nullopt;
          st.push_back(x + op.number);
          break;
        case DW_OP_deref:
          if (!pop(&x) || !read(x, &y)) return std::nullopt;
          st.push_back(y);
          break;
        case DW_OP_dup:
          if (st.empty()) return std::nullopt;
          st.push_back(st.back());
          break;
        case DW_OP_drop:
          if (!pop(&x)) return std::nullopt;
          break;
        case DW_OP_over:
          if (st.size() < 2) return std::nullopt;
          st.push_back(st[st.size() - 2]);
          break;
        case DW_OP_pick:
          if (op.number >= st.size()) return std::nullopt;
          st.push_back(st[st.size() - 1 - op.number]);
          break;
        case DW_OP_swap:
          if (st.size() < 2) return std::nullopt;
          std::swap(st[st.size() - 1], st[st.size() - 2]);
          break;
        case DW_OP_neg:
          if (!pop(&x)) return std::nullopt;
          st.push_back(0 - x);
          break;
        case DW_OP_not:
          if (!pop(&x)) return std::nullopt;
          st.push_back(~x);
          break;
        case DW_OP_nop:
          break;
        case DW_OP_stack_value:
          if (i + 1 != ops.size()) return std::nullopt;
          is_value = true;
          break;
        case DW_OP_plus:
        case DW_OP_minus:
        case DW_OP_mul:
        case DW_OP_and:
        case DW_OP_or:
        case DW_OP_xor:
        case DW_OP_shl:
        case DW_OP_shr:
        case DW_OP_shra:
        case DW_OP_eq:
        case DW_OP_ne:
        case DW_OP_lt:
        case DW_OP_le:
        case DW_OP_gt:
        case DW_OP_ge: {
          if (!pop(&y) || !pop(&x)) return std::nullopt;  // x op y: y was on top
          const int64_t sx = static_cast<int64_t>(x), sy = static_cast<int64_t>(y);
          uint64_t r = 0;
          switch (a) {
            case DW_OP_plus:
              r = x + y;
              break;
            case DW_OP_minus:
              r = x - y;
              break;
            case DW_OP_mul:
              r = x * y;
              break;
            case DW_OP_and:
              r = x & y;
              break;
            case DW_OP_or:
              r = x | y;
              break;
            case DW_OP_xor:
              r = x ^ y;
              break;
            case DW_OP_shl:
              r = y >= 64 ? 0 : x << y;
              break;
            case DW_OP_shr:
              r = y >= 64 ? 0 : x >> y;
              break;
            case DW_OP_shra:
              r = static_cast<uint64_t>(y >= 64 ? (sx < 0 ? -1 : 0) : sx >> y);
              break;
            // DWARF comparisons are signed.
            case DW_OP_eq:
              r = sx == sy;
              break;
            case DW_OP_ne:
              r = sx != sy;
              break;
            case DW_OP_lt:
              r = sx < sy;
              break;
            case DW_OP_le:
              r = sx <= sy;
              break;
            case DW_OP_gt:
              r = sx > sy;
              break;
            default:
              r = sx >= sy;
              break;
          }
          st.push_back(r);
          break;
        }
        default:
          return std::nullopt;
      }
    }
    if (st.size() > 64) return std::nullopt;
  }
  if (st.empty()) return std::nullopt;
  return ExprResult{st.back(), is_value};
}

}  // namespace tpe::unwind
