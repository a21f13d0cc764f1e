// Compiles a parsed kernel event filter (filter/filter.h) into BPF instructions.
#pragma once

#include "bpf/assembler.h"
#include "common/status.h"
#include "filter/filter.h"

namespace tpe::bpf {

struct FilterCodeContext {
  Reg ctx = R6;
  int16_t scratch_off = -48;
};

Status CompileFilter(const FilterExpr& expr, const FilterCodeContext& cx, Assembler* a, Label on_false);
Status CheckFilterCompiles(const FilterExpr& expr);

}  // namespace tpe::bpf
