// Filter evaluation (filter.h EvaluateFilter): a parsed filter against one record's raw payload,
// as the kernel's filter_match_preds() and its predicate functions decide (kernel/trace/
// trace_events_filter.c). Pure; the parser and printer are filter.cc.
#include <algorithm>
#include <cstring>

#include "filter/filter.h"

namespace tpe {
namespace {

// USTRING_BUF_SIZE - 1: char * strings are copied into a 1024-byte per-CPU buffer.
constexpr size_t kMaxPointedStringBytes = 1023;

uint64_t CpuCount(const std::vector<std::pair<uint32_t, uint32_t>>& cpus) {
  uint64_t n = 0;
  for (const auto& r : cpus) n += uint64_t{r.second} - r.first + 1;
  return n;
}

// A C string as the kernel's matchers see it: bytes past the end read as NUL.
struct CStr {
  const uint8_t* p = nullptr;
  size_t n = 0;
  uint8_t at(size_t i) const { return i < n ? p[i] : 0; }
};

bool MatchFull(const CStr& s, std::string_view pat, size_t len) {
  // strcmp (len == 0) or strncmp(s, pat, len).
  for (size_t i = 0; len == 0 || i < len; ++i) {
    uint8_t a = s.at(i);
    uint8_t b = i < pat.size() ? static_cast<uint8_t>(pat[i]) : 0;
    if (a != b) return false;
    if (a == 0) return true;
  }
  return true;
}

bool MatchPrefix(const CStr& s, std::string_view pat, size_t len) {
  if (len != 0 && len < pat.size()) return false;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (s.at(i) != static_cast<uint8_t>(pat[i])) return false;
  }
  return true;
}

bool BytesEqual(const CStr& s, size_t at, std::string_view pat) {
  for (size_t i = 0; i < pat.size(); ++i) {
    if (s.at(at + i) != static_cast<uint8_t>(pat[i])) return false;
  }
  return true;
}

bool MatchSubstring(const CStr& s, std::string_view pat, size_t len) {
  if (pat.empty()) return true;
  if (len == 0) {  // strstr on the NUL-terminated string
    size_t n = 0;
    while (n < s.n && s.p[n] != 0) ++n;
    for (size_t i = 0; i + pat.size() <= n; ++i) {
      if (BytesEqual(s, i, pat)) return true;
    }
    return false;
  }
  // strnstr(s, pat, len): raw bytes, NULs included.
  for (size_t i = 0; len - i >= pat.size(); ++i) {  // pat is not empty: i never passes len
    if (BytesEqual(s, i, pat)) return true;
  }
  return false;
}

bool MatchSuffix(const CStr& s, std::string_view pat, size_t len) {
  // regex_match_end: the last pat.size() bytes before byte len-1.
  if (len == 0 || len - 1 < pat.size()) return false;
  return BytesEqual(s, len - 1 - pat.size(), pat);
}

// glob(7) matching as lib/glob.c does it: ? * [a-z] [!a-z] and \ escapes; an unclosed [ is a
// literal; the whole string must match. Iterative with one backtrack point.
bool GlobMatch(std::string_view pat, const CStr& s) {
  auto pc = [&](size_t k) -> uint8_t { return k < pat.size() ? static_cast<uint8_t>(pat[k]) : 0; };
  size_t p = 0, i = 0;
  bool have_back = false;
  size_t back_p = 0, back_i = 0;
  for (;;) {
    uint8_t c = s.at(i++);
    uint8_t d = pc(p++);
    bool literal = false;
    switch (d) {
      case '?':
        if (c == 0) return false;
        continue;
      case '*':
        if (pc(p) == 0) return true;
        have_back = true;
        back_p = p;
        back_i = --i;
        continue;
      case '[': {
        // A class never matches the end of the string, not even a complemented one (checked on
        // 6.18: "gam[!a]*" did not match a task named "gam").
        if (c == 0) return false;
        bool inverted = pc(p) == '!';
        size_t k = p + (inverted ? 1 : 0);
        uint8_t a = pc(k++);
        bool match = false, malformed = false;
        do {
          uint8_t b = a;
          if (a == 0) {
            malformed = true;
            break;
          }
          if (pc(k) == '-' && pc(k + 1) != ']') {
            b = pc(k + 1);
            if (b == 0) {
              malformed = true;
              break;
            }
            k += 2;
          }
          if (a <= c && c <= b) match = true;
          a = pc(k++);
        } while (a != ']');
        if (malformed) {
          literal = true;  // compare '[' itself
          break;
        }
        if (match != inverted) {
          p = k;
          continue;
        }
        break;  // mismatch: backtrack
      }
      case '\\':
        d = pc(p++);
        literal = true;
        break;
      default:
        literal = true;
        break;
    }
    if (literal && c == d) {
      if (d == 0) return true;
      continue;
    }
    // Backtrack to the last '*', one character later in the string.
    if (c == 0 || !have_back) return false;
    p = back_p;
    i = ++back_i;
  }
}

bool MatchString(const FilterPredicate& p, const CStr& s, size_t len) {
  bool m = false;
  switch (p.match) {
    case StringMatch::kFull:
      m = MatchFull(s, p.pattern, len);
      break;
    case StringMatch::kPrefix:
      m = MatchPrefix(s, p.pattern, len);
      break;
    case StringMatch::kSuffix:
      m = MatchSuffix(s, p.pattern, len);
      break;
    case StringMatch::kSubstring:
      m = MatchSubstring(s, p.pattern, len);
      break;
    case StringMatch::kGlob:
      m = GlobMatch(p.pattern, s);
      break;
  }
  return m != p.invert;
}

uint64_t WidthMask(uint32_t size) { return size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (size * 8)) - 1; }

int64_t SignExtend(uint64_t v, uint32_t size) {
  if (size >= 8) return static_cast<int64_t>(v);
  const unsigned shift = 64 - size * 8;
  return static_cast<int64_t>(v << shift) >> shift;
}

// The kernel's filter_pred_<op>_<type>: both sides cast to the field's type.
bool CompareInteger(uint64_t field, uint64_t value, uint32_t size, bool is_signed, FilterOp op) {
  const uint64_t a = field & WidthMask(size), b = value & WidthMask(size);
  switch (op) {
    case FilterOp::kEq:
      return a == b;
    case FilterOp::kNe:
      return a != b;
    case FilterOp::kBitAnd:
      return (a & b) != 0;
    default:
      break;
  }
  if (is_signed) {
    const int64_t sa = SignExtend(a, size), sb = SignExtend(b, size);
    switch (op) {
      case FilterOp::kLt:
        return sa < sb;
      case FilterOp::kLe:
        return sa <= sb;
      case FilterOp::kGt:
        return sa > sb;
      case FilterOp::kGe:
        return sa >= sb;
      default:
        return false;
    }
  }
  switch (op) {
    case FilterOp::kLt:
      return a < b;
    case FilterOp::kLe:
      return a <= b;
    case FilterOp::kGt:
      return a > b;
    case FilterOp::kGe:
      return a >= b;
    default:
      return false;
  }
}

bool InCpus(const std::vector<std::pair<uint32_t, uint32_t>>& cpus, uint64_t cpu) {
  for (const auto& r : cpus) {
    if (cpu >= r.first && cpu <= r.second) return true;
  }
  return false;
}

// A scalar (CPU or an integer field of `size` bytes) against CPUS{...}. One CPU: the kernel turns
// the predicate into an unsigned ==/!= (& becomes ==). Several: filter_pred_<size>_cpumask reads
// the field as an unsigned int; & is membership, == never holds, != always does, and a value
// >= nr_cpu_ids is false whatever the operator.
bool ScalarVsCpus(const FilterPredicate& p, uint64_t v, uint32_t size, uint32_t nr_cpu_ids) {
  if (CpuCount(p.cpus) == 1) {
    return CompareInteger(v, p.cpus[0].first, size, false, p.op == FilterOp::kNe ? FilterOp::kNe : FilterOp::kEq);
  }
  const uint32_t cpu = static_cast<uint32_t>(v);
  if (cpu >= nr_cpu_ids) return false;
  switch (p.op) {
    case FilterOp::kBitAnd:
      return InCpus(p.cpus, cpu);
    case FilterOp::kEq:
      return false;
    case FilterOp::kNe:
      return true;
    default:
      return false;
  }
}

template <typename T>
bool Load(Bytes rec, uint32_t offset, uint64_t* out) {
  std::optional<T> v = LoadAt<T>(rec, offset);
  if (!v) return false;
  *out = *v;
  return true;
}

bool ReadUnsigned(Bytes rec, uint32_t offset, uint32_t size, uint64_t* out) {
  switch (size) {
    case 1:
      return Load<uint8_t>(rec, offset, out);
    case 2:
      return Load<uint16_t>(rec, offset, out);
    case 4:
      return Load<uint32_t>(rec, offset, out);
    case 8:
      return Load<uint64_t>(rec, offset, out);
    default:
      return false;
  }
}

// The bytes a __data_loc/__rel_loc field points to: [begin, begin+len) inside rec.
bool LocatedBytes(const FilterField& f, Bytes rec, bool rel, size_t* begin, size_t* len) {
  auto item = LoadAt<uint32_t>(rec, f.offset);
  if (!item) return false;
  *begin = *item & 0xffff;
  *len = *item >> 16;
  if (rel) *begin += size_t{f.offset} + 4;
  return *begin <= rec.size() && rec.size() - *begin >= *len;
}

bool EvalCpumask(const FilterPredicate& p, Bytes rec) {
  size_t begin = 0, len = 0;
  if (!LocatedBytes(p.field, rec, false, &begin, &len)) return false;
  Bytes mask = rec.subspan(begin, len);
  auto bit = [&](uint64_t cpu) { return cpu / 8 < mask.size() && (mask[cpu / 8] >> (cpu % 8)) & 1; };
  if (CpuCount(p.cpus) == 1) {  // do_filter_cpumask_scalar
    const uint32_t cpu = p.cpus[0].first;
    bool only = bit(cpu);
    for (size_t i = 0; only && i < mask.size(); ++i) {
      uint8_t others = mask[i];
      if (i == cpu / 8) others &= static_cast<uint8_t>(~(1u << (cpu % 8)));
      if (others != 0) only = false;
    }
    switch (p.op) {
      case FilterOp::kEq:
        return only;
      case FilterOp::kNe:
        return !only;
      case FilterOp::kBitAnd:
        return bit(cpu);
      default:
        return false;
    }
  }
  // Several CPUs (do_filter_cpumask): == and != compare the sets, & asks whether they intersect.
  bool intersects = false, subset = true;
  for (const auto& r : p.cpus) {
    for (uint64_t cpu = r.first; cpu <= r.second; ++cpu) {
      if (bit(cpu)) {
        intersects = true;
      } else {
        subset = false;
      }
    }
  }
  uint64_t mask_bits = 0;
  for (uint8_t b : mask) mask_bits += static_cast<uint64_t>(__builtin_popcount(b));
  const bool equal = subset && mask_bits == CpuCount(p.cpus);
  switch (p.op) {
    case FilterOp::kEq:
      return equal;
    case FilterOp::kNe:
      return !equal;
    case FilterOp::kBitAnd:
      return intersects;
    default:
      return false;
  }
}

bool EvalPredicate(const FilterPredicate& p, Bytes rec, const FilterContext& ctx) {
  const FilterField& f = p.field;
  const uint32_t nr_cpu_ids = ctx.nr_cpu_ids == 0 ? kMaxFilterCpus : ctx.nr_cpu_ids;
  switch (f.kind) {
    case FilterFieldKind::kInteger: {
      uint64_t v = 0;
      if (!ReadUnsigned(rec, f.offset, f.size, &v)) return false;
      if (p.operand == FilterOperand::kCpus) return ScalarVsCpus(p, v, f.size, nr_cpu_ids);
      return CompareInteger(v, p.value, f.size, f.is_signed, p.op);
    }
    case FilterFieldKind::kCpu: {
      if (p.operand == FilterOperand::kCpus) return ScalarVsCpus(p, ctx.cpu, 4, nr_cpu_ids);
      if (p.op == FilterOp::kBitAnd) return false;  // filter_pred_cpu has no &
      return CompareInteger(ctx.cpu, p.value, 4, true, p.op);
    }
    case FilterFieldKind::kCpumask:
      return EvalCpumask(p, rec);
    case FilterFieldKind::kCharArray: {
      if (f.offset > rec.size() || rec.size() - f.offset < f.size) return false;
      return MatchString(p, CStr{rec.data() + f.offset, f.size}, f.size);
    }
    case FilterFieldKind::kComm: {
      uint8_t comm[kFilterCommBytes] = {};
      // A default FilterContext has an empty comm whose data() is null: memcpy must not see it.
      const size_t n = std::min(ctx.comm.size(), kFilterCommBytes - 1);
      if (n != 0) std::memcpy(comm, ctx.comm.data(), n);
      return MatchString(p, CStr{comm, kFilterCommBytes}, kFilterCommBytes);
    }
    case FilterFieldKind::kDataLocString:
    case FilterFieldKind::kRelLocString: {
      size_t begin = 0, len = 0;
      if (!LocatedBytes(f, rec, f.kind == FilterFieldKind::kRelLocString, &begin, &len)) return false;
      // The kernel's matchers read up to len bytes, or (glob, len 0) up to the NUL.
      return MatchString(p, CStr{rec.data() + begin, rec.size() - begin}, len);
    }
    case FilterFieldKind::kStringPointer: {
      uint64_t addr = 0;
      if (!ReadUnsigned(rec, f.offset, f.size, &addr) || !ctx.read_string) return false;
      std::optional<std::string> s = ctx.read_string(addr, f.user_string);
      if (!s) return false;
      size_t n = strnlen(s->data(), std::min(s->size(), kMaxPointedStringBytes));
      return MatchString(p, CStr{reinterpret_cast<const uint8_t*>(s->data()), n}, n + 1);
    }
  }
  return false;
}

bool Eval(const FilterExpr& e, Bytes rec, const FilterContext& ctx) {
  switch (e.kind) {
    case FilterExpr::Kind::kAnd:
      for (const auto& c : e.children) {
        if (!Eval(c, rec, ctx)) return false;
      }
      return true;
    case FilterExpr::Kind::kOr:
      for (const auto& c : e.children) {
        if (Eval(c, rec, ctx)) return true;
      }
      return false;
    case FilterExpr::Kind::kNot:
      return e.children.empty() ? false : !Eval(e.children[0], rec, ctx);
    case FilterExpr::Kind::kCompare:
      return EvalPredicate(e.pred, rec, ctx);
  }
  return false;
}

}  // namespace

bool EvaluateFilter(const FilterExpr& expr, Bytes record, const FilterContext& ctx) { return Eval(expr, record, ctx); }

}  // namespace tpe
