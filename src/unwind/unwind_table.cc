#include "unwind/unwind_table.h"

#include <algorithm>
#include <climits>

namespace tpe::unwind {
namespace {

constexpr size_t kRipSlot = 0;  // CompactRow::kRegisters: the return address, rbx, rbp, ...
constexpr size_t kRbpSlot = 2;
static_assert(CompactRow::kRegisters[kRipSlot] == kDwarfRip && CompactRow::kRegisters[kRbpSlot] == kDwarfRbp);

}  // namespace

UnwindRule RuleOf(RowForm form, const CompactRow& row) {
  UnwindRule r;
  if (form == RowForm::kNone) return r;  // kNoTable
  r.cfa = CfaRule::kStop;
  if (form != RowForm::kCompact) return r;
  if (row.cfa_register != kDwarfRsp && row.cfa_register != kDwarfRbp) return r;
  // The return address at CFA - 8, as every call leaves it.
  if (row.rule[kRipSlot] != CompactRow::Rule::kAtCfa || row.offset[kRipSlot] != -8) return r;
  switch (row.rule[kRbpSlot]) {
    case CompactRow::Rule::kSame:
      r.rbp = RbpRule::kSame;
      break;
    case CompactRow::Rule::kAtCfa:
      r.rbp = RbpRule::kAtCfa;
      r.rbp_offset = row.offset[kRbpSlot];
      break;
    case CompactRow::Rule::kUndefined:
      r.rbp = RbpRule::kUndefined;
      break;
    case CompactRow::Rule::kIsCfa:  // rbp = CFA + n: no compiler emits it for rbp
      return r;
  }
  r.cfa = row.cfa_register == kDwarfRsp ? CfaRule::kRsp : CfaRule::kRbp;
  r.cfa_offset = row.cfa_offset;
  return r;
}

UnwindRule UnwindTable::RuleAt(uint64_t offset) const {
  auto it = std::upper_bound(entries.begin(), entries.end(), offset,
                             [](uint64_t o, const UnwindEntry& e) { return o < e.offset; });
  if (it == entries.begin()) return UnwindRule{};
  return std::prev(it)->rule;
}

StatusOr<UnwindTable> BuildUnwindTable(const CfiTable& cfi, uint64_t max_rows) {
  UnwindTable t;
  Status st = cfi.ForEachRow(max_rows, [&](uint64_t offset, RowForm form, const CompactRow& row) {
    const UnwindRule rule = RuleOf(form, row);
    ++t.rows;
    if (rule.cfa == CfaRule::kStop) ++t.stop_rows;
    if (!t.entries.empty() && t.entries.back().rule == rule) return;  // the same rule goes on
    t.entries.push_back({offset, rule});
  });
  if (!st.ok()) return st;
  t.entries.shrink_to_fit();
  return t;
}

}  // namespace tpe::unwind
