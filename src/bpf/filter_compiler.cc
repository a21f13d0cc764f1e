#include "bpf/filter_compiler.h"

namespace tpe::bpf {

Status CompileFilter(const FilterExpr&, const FilterCodeContext&, Assembler*, Label) {
  return Unimplemented("filters are not compiled yet");
}
Status CheckFilterCompiles(const FilterExpr&) { return Unimplemented("filters are not compiled yet"); }

}  // namespace tpe::bpf
