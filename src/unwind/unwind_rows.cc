#include "unwind/unwind_rows.h"

#include <string>

namespace tpe::unwind {
namespace {

constexpr uint64_t kMaxOffset = uint64_t{1} << 32;

// `rule` packed into `row->rule`; false when it does not fit.
bool Fits(const UnwindRule& rule, PackedRow* row) {
  if (rule.cfa != CfaRule::kRsp && rule.cfa != CfaRule::kRbp) {
    row->rule = static_cast<uint32_t>(rule.cfa);  // kStop, kNoTable: nothing else is read
    return true;
  }
  if (rule.cfa_offset < 0 || static_cast<uint32_t>(rule.cfa_offset) > kPackedMaxCfaOffset) return false;
  uint32_t rbp8 = 0;
  if (rule.rbp == RbpRule::kAtCfa) {
    if (rule.rbp_offset % 8 != 0 || rule.rbp_offset < -1024 || rule.rbp_offset > 1016) return false;
    rbp8 = static_cast<uint8_t>(static_cast<int8_t>(rule.rbp_offset / 8));
  }
  row->rule = static_cast<uint32_t>(rule.cfa) | static_cast<uint32_t>(rule.rbp) << 2 | rbp8 << 4 |
              static_cast<uint32_t>(rule.cfa_offset) << 12;
  return true;
}

}  // namespace

StatusOr<PackedTable> PackUnwindTable(const UnwindTable& table) {
  PackedTable out;
  out.rows.reserve(table.entries.size());
  for (const UnwindEntry& e : table.entries) {
    if (e.offset >= kMaxOffset) {
      return InvalidArgument("unwind table entry at file offset " + std::to_string(e.offset) +
                             " is past 4 GiB: too large for the packed table (32-bit offsets)");
    }
    PackedRow row;
    row.offset = static_cast<uint32_t>(e.offset);
    if (!Fits(e.rule, &row)) {
      ++out.narrowed;
      row.rule = static_cast<uint32_t>(CfaRule::kStop);
    }
    // Narrowing can make a row like its neighbour: the earlier one covers both.
    if (!out.rows.empty() && out.rows.back().rule == row.rule) continue;
    out.rows.push_back(row);
  }
  return out;
}

UnwindRule UnpackRule(const PackedRow& row) {
  UnwindRule r;
  r.cfa = static_cast<CfaRule>(row.rule & 3);
  r.rbp = static_cast<RbpRule>(row.rule >> 2 & 3);
  if (r.cfa == CfaRule::kStop || r.cfa == CfaRule::kNoTable) return UnwindRule{r.cfa, RbpRule::kSame, 0, 0};
  r.cfa_offset = static_cast<int32_t>(row.rule >> 12);
  r.rbp_offset = r.rbp == RbpRule::kAtCfa ? int32_t{static_cast<int8_t>(row.rule >> 4 & 0xff)} * 8 : 0;
  return r;
}

UnwindRule PackedRuleAt(std::span<const PackedRow> rows, uint64_t offset) {
  if (rows.empty() || offset < rows.front().offset) return UnwindRule{};
  if (offset >= kMaxOffset) return UnpackRule(rows.back());
  size_t lo = 0, hi = rows.size();  // rows[lo].offset <= offset < rows[hi].offset (hi: past the end)
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (rows[mid].offset <= offset) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return UnpackRule(rows[lo]);
}

}  // namespace tpe::unwind
