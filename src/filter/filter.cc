#include "filter/filter.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace tpe {
namespace {

// The kernel's isspace() for the characters a filter can hold.
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Longest number token parse_pred copies (its num_buf holds 23 characters and a NUL).
constexpr size_t kMaxNumberChars = 23;
// USTRING_BUF_SIZE - 1: char * strings are copied into a 1024-byte per-CPU buffer.
constexpr size_t kMaxPointedStringBytes = 1023;

std::string Col(size_t pos) { return "column " + std::to_string(pos + 1); }

// ---------------------------------------------------------------------------------------------
// Field resolution: how the kernel's filter_assign_type() and parse_pred() see a format field.

struct Resolved {
  FilterField field;
  std::string type;         // declared type, for messages ("pid_t", "char[16]")
  std::string unsupported;  // non-empty: why no predicate can use this field
};

bool IsCharPointer(const std::string& type) {
  std::string t;
  for (char c : type) {
    if (!IsSpace(c)) t += c;
  }
  return t == "char*" || t == "constchar*";
}

Resolved ResolveField(const FieldFormat& f) {
  Resolved r;
  r.type = f.type;
  r.field.name = f.name;
  r.field.offset = f.offset;
  r.field.size = f.size;
  r.field.is_signed = f.is_signed;
  const std::string what = f.name + " (" + f.type + ", " + std::to_string(f.size) + " bytes)";
  switch (f.kind) {
    case FieldKind::kInteger:
      r.field.kind = FilterFieldKind::kInteger;
      break;
    case FieldKind::kPointer:
      r.field.kind = IsCharPointer(f.type) ? FilterFieldKind::kStringPointer : FilterFieldKind::kInteger;
      if (f.size != 4 && f.size != 8) r.unsupported = what + " is a pointer of unexpected size";
      break;
    case FieldKind::kCharArray:
      r.field.kind = FilterFieldKind::kCharArray;
      break;
    case FieldKind::kArray:
      // select_comparison_fn() has functions for 1, 2, 4 and 8 bytes only.
      r.field.kind = FilterFieldKind::kInteger;
      if (f.size != 1 && f.size != 2 && f.size != 4 && f.size != 8) {
        r.unsupported = what +
                        " is an array the kernel cannot compare: only 1-, 2-, 4- and 8-byte fields compare as "
                        "numbers";
      }
      break;
    case FieldKind::kDataLoc:
    case FieldKind::kRelLoc:
      if (f.IsString()) {
        r.field.kind = f.kind == FieldKind::kDataLoc ? FilterFieldKind::kDataLocString : FilterFieldKind::kRelLocString;
      } else if (f.kind == FieldKind::kDataLoc && f.type.find("cpumask_t") != std::string::npos) {
        r.field.kind = FilterFieldKind::kCpumask;
      } else {
        r.field.kind = FilterFieldKind::kInteger;
        r.unsupported = what +
                        " is a variable-length array: the kernel would compare its 32-bit location word, not its "
                        "contents";
      }
      break;
    case FieldKind::kBytes:
      r.field.kind = FilterFieldKind::kInteger;
      r.unsupported = what + " is opaque bytes: the kernel cannot compare it";
      break;
  }
  return r;
}

bool IsStringKind(FilterFieldKind k) {
  return k == FilterFieldKind::kCharArray || k == FilterFieldKind::kDataLocString ||
         k == FilterFieldKind::kRelLocString || k == FilterFieldKind::kStringPointer || k == FilterFieldKind::kComm;
}

// ---------------------------------------------------------------------------------------------
// Literals.

// kstrtoull/kstrtoll with base 0 on `tok` ("-"? then decimal, 0x hex or 0 octal).
// Returns the error text (without position) or "" and sets *out.
std::string ParseInteger(std::string_view tok, bool is_signed, const std::string& field, uint64_t* out) {
  const std::string quoted = "\"" + std::string(tok) + "\"";
  bool neg = !tok.empty() && tok[0] == '-';
  std::string_view digits = tok.substr(neg ? 1 : 0);
  if (neg && !is_signed) {
    return "negative number " + quoted + " for the unsigned field " + field +
           " (the kernel reads unsigned fields with kstrtoull)";
  }
  if (digits.empty()) return quoted + " is not a number";
  unsigned base = 10;
  if (digits.size() >= 3 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') &&
      std::isxdigit(static_cast<unsigned char>(digits[2]))) {
    base = 16;
    digits.remove_prefix(2);
  } else if (digits[0] == '0') {
    base = 8;
  }
  uint64_t v = 0;
  for (char c : digits) {
    unsigned d;
    if (IsDigit(c)) {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      d = 99;
    }
    if (d >= base) {
      return quoted + " is not a number (decimal, 0x hex, or octal with a leading 0)";
    }
    if (v > (std::numeric_limits<uint64_t>::max() - d) / base) return quoted + " is out of range (64 bits)";
    v = v * base + d;
  }
  if (is_signed) {
    constexpr uint64_t kMinMagnitude = uint64_t{1} << 63;
    if (neg ? v > kMinMagnitude : v > kMinMagnitude - 1) {
      return quoted + " is out of range for the signed field " + field + " (the kernel reads it with kstrtoll)";
    }
    if (neg) v = ~v + 1;
  }
  *out = v;
  return "";
}

// cpulist "0-3,8" → sorted, merged ranges. Returns the error text or "".
std::string ParseCpuList(std::string_view list, std::vector<std::pair<uint32_t, uint32_t>>* out) {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  auto parse_num = [](std::string_view s, uint32_t* n) {
    if (s.empty() || s.size() > 9) return false;
    uint32_t v = 0;
    for (char c : s) {
      if (!IsDigit(c)) return false;
      v = v * 10 + (c - '0');
    }
    *n = v;
    return true;
  };
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = list.substr(start, comma - start);
    while (!item.empty() && IsSpace(item.front())) item.remove_prefix(1);
    while (!item.empty() && IsSpace(item.back())) item.remove_suffix(1);
    const std::string quoted = "\"" + std::string(item) + "\"";
    if (item.empty()) return "empty entry in the CPU list";
    if (item == "all" || item == "N" || item.find(':') != std::string_view::npos) {
      return "CPUS{" + std::string(item) +
             "} is not supported here (it depends on the machine); list CPUs like CPUS{0-3,8}";
    }
    size_t dash = item.find('-');
    uint32_t a = 0, b = 0;
    if (dash == std::string_view::npos) {
      if (!parse_num(item, &a)) return quoted + " is not a CPU number or range (like 3 or 0-7)";
      b = a;
    } else if (!parse_num(item.substr(0, dash), &a) || !parse_num(item.substr(dash + 1), &b)) {
      return quoted + " is not a CPU number or range (like 3 or 0-7)";
    }
    if (a > b) return "CPU range " + quoted + " runs backwards";
    if (b >= kMaxFilterCpus) {
      return "CPU " + std::to_string(b) + " is beyond " + std::to_string(kMaxFilterCpus - 1) +
             " (and the kernel refuses CPUs it does not have)";
    }
    ranges.emplace_back(a, b);
    start = comma + 1;
  }
  std::sort(ranges.begin(), ranges.end());
  out->clear();
  for (const auto& r : ranges) {
    if (!out->empty() && r.first <= out->back().second + 1) {
      out->back().second = std::max(out->back().second, r.second);
    } else {
      out->push_back(r);
    }
  }
  return "";
}

uint64_t CpuCount(const std::vector<std::pair<uint32_t, uint32_t>>& cpus) {
  uint64_t n = 0;
  for (const auto& r : cpus) n += uint64_t{r.second} - r.first + 1;
  return n;
}

// filter_parse_regex(): how a ~ pattern is matched. Sets pattern/match/invert of `p` from p->text.
void BuildStringMatch(FilterPredicate* p) {
  if (p->op != FilterOp::kGlob) {
    p->pattern = p->text;
    p->match = StringMatch::kFull;
    p->invert = p->op == FilterOp::kNe;
    return;
  }
  std::string_view s = p->text;
  p->invert = false;
  if (!s.empty() && s[0] == '!') {
    p->invert = true;
    s.remove_prefix(1);
  }
  // The kernel returns MATCH_INDEX (compared like MATCH_FULL here) for a leading digit.
  StringMatch type = StringMatch::kFull;
  if (!s.empty() && IsDigit(s[0])) {
    p->match = StringMatch::kFull;
    p->pattern = std::string(s);
    return;
  }
  std::string_view search = s;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '*') {
      if (i == 0) {
        type = StringMatch::kSuffix;
      } else if (i == s.size() - 1) {
        type = type == StringMatch::kSuffix ? StringMatch::kSubstring : StringMatch::kPrefix;
        search = s.substr(0, i);
        break;
      } else {
        type = StringMatch::kGlob;
        break;
      }
    } else if (c == '[' || c == '?' || c == '\\') {
      type = StringMatch::kGlob;
      break;
    }
  }
  if (type == StringMatch::kSuffix || type == StringMatch::kSubstring) search.remove_prefix(1);
  p->match = type;
  p->pattern = std::string(search);
}

// ---------------------------------------------------------------------------------------------
// Parser: recursive descent with the kernel's precedence (! and parentheses, then &&, then ||).

class Parser {
 public:
  Parser(std::string_view text, const EventFormat& format) : t_(text), format_(format) {}

  StatusOr<FilterExpr> Parse() {
    if (t_.size() > kMaxFilterBytes) {
      return InvalidArgument("filter is " + std::to_string(t_.size()) + " bytes; the kernel takes at most " +
                             std::to_string(kMaxFilterBytes));
    }
    size_t nul = t_.find('\0');
    if (nul != std::string_view::npos) return InvalidArgument("NUL byte at " + Col(nul) + " of the filter");
    SkipSpace();
    if (AtEnd()) return InvalidArgument("empty filter: expected a predicate such as \"pid == 1\"");
    FilterExpr e;
    TPE_RETURN_IF_ERROR(ParseOr(&e, 0));
    SkipSpace();
    if (!AtEnd()) {
      if (t_[pos_] == ')') return InvalidArgument("unbalanced ) at " + Col(pos_) + ": no ( to close");
      return InvalidArgument("expected &&, || or the end of the filter at " + Col(pos_) + ", found " + Found());
    }
    return e;
  }

 private:
  bool AtEnd() const { return pos_ >= t_.size(); }
  void SkipSpace() {
    while (!AtEnd() && IsSpace(t_[pos_])) ++pos_;
  }
  bool LookingAt(std::string_view s) const { return t_.substr(pos_).starts_with(s); }
  // What is at pos_, for messages: "end of filter" or a quoted excerpt.
  std::string Found() const {
    if (AtEnd()) return "the end of the filter";
    std::string_view rest = t_.substr(pos_, 12);
    return "\"" + std::string(rest) + (pos_ + 12 < t_.size() ? "...\"" : "\"");
  }

  Status TooDeep() const {
    return InvalidArgument("parentheses and ! nested deeper than " + std::to_string(kMaxFilterDepth) + " at " +
                           Col(pos_));
  }

  Status ParseOr(FilterExpr* out, int depth) {
    FilterExpr first;
    TPE_RETURN_IF_ERROR(ParseAnd(&first, depth));
    std::vector<FilterExpr> terms;
    terms.push_back(std::move(first));
    for (;;) {
      SkipSpace();
      if (!LookingAt("||")) break;
      size_t op_pos = pos_;
      pos_ += 2;
      SkipSpace();
      if (AtEnd() || t_[pos_] == ')') {
        return InvalidArgument("expected a predicate after || at " + Col(op_pos) + ", found " + Found() +
                               " (the kernel ignores a dangling ||; remove it or complete it)");
      }
      FilterExpr next;
      TPE_RETURN_IF_ERROR(ParseAnd(&next, depth));
      terms.push_back(std::move(next));
    }
    *out = Combine(FilterExpr::Kind::kOr, std::move(terms));
    return Status::Ok();
  }

  Status ParseAnd(FilterExpr* out, int depth) {
    FilterExpr first;
    TPE_RETURN_IF_ERROR(ParseUnary(&first, depth));
    std::vector<FilterExpr> terms;
    terms.push_back(std::move(first));
    for (;;) {
      SkipSpace();
      if (!LookingAt("&&")) break;
      size_t op_pos = pos_;
      pos_ += 2;
      SkipSpace();
      if (AtEnd() || t_[pos_] == ')') {
        return InvalidArgument("expected a predicate after && at " + Col(op_pos) + ", found " + Found() +
                               " (the kernel ignores a dangling &&; remove it or complete it)");
      }
      FilterExpr next;
      TPE_RETURN_IF_ERROR(ParseUnary(&next, depth));
      terms.push_back(std::move(next));
    }
    *out = Combine(FilterExpr::Kind::kAnd, std::move(terms));
    return Status::Ok();
  }

  // One term, or an n-ary node with nested nodes of the same kind flattened into it.
  static FilterExpr Combine(FilterExpr::Kind kind, std::vector<FilterExpr> terms) {
    if (terms.size() == 1) return std::move(terms[0]);
    FilterExpr e;
    e.kind = kind;
    for (auto& t : terms) {
      if (t.kind == kind) {
        for (auto& c : t.children) e.children.push_back(std::move(c));
      } else {
        e.children.push_back(std::move(t));
      }
    }
    return e;
  }

  // `after_not`: this term directly follows a '!', which already counted one level of depth
  // for a parenthesis that follows it (so "!(a)", the canonical form of "!a", is no deeper).
  Status ParseUnary(FilterExpr* out, int depth, bool after_not = false) {
    SkipSpace();
    // '!' negates unless it starts "!=" or "!~" (the kernel's is_not()).
    if (LookingAt("!") && !LookingAt("!=") && !LookingAt("!~")) {
      if (depth >= kMaxFilterDepth) return TooDeep();
      ++pos_;
      FilterExpr inner;
      TPE_RETURN_IF_ERROR(ParseUnary(&inner, depth + 1, /*after_not=*/true));
      out->kind = FilterExpr::Kind::kNot;
      out->children.clear();
      out->children.push_back(std::move(inner));
      return Status::Ok();
    }
    if (LookingAt("(")) {
      if (!after_not && depth >= kMaxFilterDepth) return TooDeep();
      size_t open = pos_++;
      SkipSpace();
      if (LookingAt(")")) return InvalidArgument("empty parentheses at " + Col(open));
      TPE_RETURN_IF_ERROR(ParseOr(out, after_not ? depth : depth + 1));
      SkipSpace();
      if (AtEnd()) return InvalidArgument("missing ) for the ( at " + Col(open));
      if (t_[pos_] != ')') {
        return InvalidArgument("expected &&, || or ) at " + Col(pos_) + ", found " + Found() + " (inside the ( at " +
                               Col(open) + ")");
      }
      ++pos_;
      return Status::Ok();
    }
    out->kind = FilterExpr::Kind::kCompare;
    out->children.clear();
    return ParsePredicate(&out->pred);
  }

  std::string FieldList() const {
    std::string out;
    for (const auto& f : format_.fields) {
      if (f.is_common) continue;
      out += f.name + ", ";
    }
    for (const auto& f : format_.fields) {
      if (f.is_common) out += f.name + ", ";
    }
    return out + "CPU, COMM";
  }

  // Where a predicate's parts were, for its messages.
  struct PredicateText {
    std::string name;   // the field as written
    std::string what;   // "name (type)"
    size_t op_pos = 0;  // the operator's offset
  };

  // One comparison, "field op value" (the kernel's parse_pred()): its field, its operator, then
  // its value, each checked against the others.
  Status ParsePredicate(FilterPredicate* p) {
    PredicateText pt;
    TPE_RETURN_IF_ERROR(ParseField(p, &pt));
    TPE_RETURN_IF_ERROR(ParseOperator(p, &pt));
    return ParseValue(p, pt);
  }

  // The field: an event field first (sched_waking's own "comm" wins over the task's), then the
  // generic ones, and its suffix; sets p->field and p->column.
  Status ParseField(FilterPredicate* p, PredicateText* pt) {
    SkipSpace();
    size_t name_pos = pos_;
    while (!AtEnd() && (IsAlnum(t_[pos_]) || t_[pos_] == '_')) ++pos_;
    if (pos_ == name_pos) {
      return InvalidArgument("expected a field name at " + Col(name_pos) + ", found " + Found());
    }
    std::string name(t_.substr(name_pos, pos_ - name_pos));
    p->column = static_cast<int>(name_pos) + 1;

    Resolved r;
    if (const FieldFormat* f = format_.FindField(name)) {
      r = ResolveField(*f);
    } else if (name == "CPU" || name == "cpu" || name == "common_cpu") {
      r.field.name = name;
      r.field.kind = FilterFieldKind::kCpu;
      r.field.size = 4;
      r.field.is_signed = true;
      r.type = "int";
    } else if (name == "COMM" || name == "comm") {
      r.field.name = name;
      r.field.kind = FilterFieldKind::kComm;
      r.field.size = kFilterCommBytes;
      r.type = "char[16]";
    } else if (name == "STACKTRACE") {
      // 6.18 accepts "STACKTRACE == 1" in a filter: a generic field meant for hist triggers.
      return InvalidArgument("STACKTRACE at " + Col(name_pos) +
                             " is the kernel's stack trace key for hist triggers; it cannot be compared in a filter");
    } else {
      std::string ev = format_.name.empty() ? "the event" : format_.name;
      return InvalidArgument("unknown field \"" + name + "\" at " + Col(name_pos) + "; fields of " + ev + ": " +
                             FieldList());
    }
    if (LookingAt(".ustring")) {
      r.field.user_string = true;
      pos_ += 8;
    } else if (LookingAt(".function")) {
      return InvalidArgument(name + ".function at " + Col(name_pos) +
                             " is not supported: comparing with a kernel function name needs the kernel's symbol "
                             "table");
    } else if (LookingAt(".")) {
      return InvalidArgument("unknown suffix after " + name + " at " + Col(pos_) + " (only .ustring is supported)");
    }
    if (!r.unsupported.empty()) return InvalidArgument(r.unsupported + " (at " + Col(name_pos) + ")");
    p->field = r.field;
    pt->name = name;
    pt->what = name + " (" + r.type + ")";
    return Status::Ok();
  }

  // The operator: p->op.
  Status ParseOperator(FilterPredicate* p, PredicateText* pt) {
    // Order matters: "<=" before "<", ">=" before ">".
    SkipSpace();
    pt->op_pos = pos_;
    static constexpr std::pair<std::string_view, FilterOp> kOps[] = {
        {"~", FilterOp::kGlob}, {"!=", FilterOp::kNe}, {"==", FilterOp::kEq}, {"<=", FilterOp::kLe},
        {"<", FilterOp::kLt},   {">=", FilterOp::kGe}, {">", FilterOp::kGt},  {"&", FilterOp::kBitAnd},
    };
    bool found = false;
    for (const auto& [text, op] : kOps) {
      if (LookingAt(text) && !(op == FilterOp::kBitAnd && LookingAt("&&"))) {
        p->op = op;
        pos_ += text.size();
        found = true;
        break;
      }
    }
    if (!found) {
      std::string hint = LookingAt("=") ? " (equality is ==)" : "";
      return InvalidArgument("expected an operator (==, !=, <, <=, >, >=, & or ~) after " + pt->name + " at " +
                             Col(pt->op_pos) + ", found " + Found() + hint);
    }
    return Status::Ok();
  }

  // The value: a quoted string, CPUS{...} or a number, as the field's kind takes it.
  Status ParseValue(FilterPredicate* p, const PredicateText& pt) {
    SkipSpace();
    const size_t value_pos = pos_;
    const FilterFieldKind kind = p->field.kind;
    if (!AtEnd() && (t_[pos_] == '"' || t_[pos_] == '\'')) return ParseStringValue(p, pt, value_pos);
    if (LookingAt("CPUS")) return ParseCpusValue(p, pt, value_pos);
    if (!AtEnd() && (IsDigit(t_[pos_]) || t_[pos_] == '-')) return ParseNumberValue(p, pt, value_pos);
    if (IsStringKind(kind)) {
      return InvalidArgument("expected a quoted string ('...' or \"...\") at " + Col(value_pos) + " for " + pt.what +
                             ", found " + Found());
    }
    if (kind == FilterFieldKind::kCpumask) {
      return InvalidArgument("expected CPUS{...} at " + Col(value_pos) + " for " + pt.what + ", found " + Found());
    }
    return InvalidArgument("expected a number at " + Col(value_pos) + " for " + pt.what + ", found " + Found());
  }

  // A quoted string, for a string field's ==, != or ~ (a glob).
  Status ParseStringValue(FilterPredicate* p, const PredicateText& pt, size_t value_pos) {
    const FilterFieldKind kind = p->field.kind;
    char q = t_[pos_];
    size_t close = t_.find(q, pos_ + 1);
    if (close == std::string_view::npos) {
      return InvalidArgument(std::string("missing closing ") + q + " for the string at " + Col(value_pos));
    }
    p->text = std::string(t_.substr(pos_ + 1, close - pos_ - 1));
    if (p->text.size() > kMaxFilterStringBytes) {
      return InvalidArgument("string at " + Col(value_pos) + " is " + std::to_string(p->text.size()) +
                             " bytes; the kernel takes at most " + std::to_string(kMaxFilterStringBytes));
    }
    pos_ = close + 1;
    p->operand = FilterOperand::kString;
    if (!IsStringKind(kind)) {
      if (p->op == FilterOp::kGlob) {
        return InvalidArgument("operator ~ at " + Col(pt.op_pos) + " needs a string field; " + pt.what + " is not one");
      }
      return InvalidArgument(pt.what + " is not a string field: expected " +
                             (kind == FilterFieldKind::kCpumask ? std::string("CPUS{...}") : "a number") + " at " +
                             Col(value_pos) + ", not a quoted string");
    }
    if (p->op != FilterOp::kEq && p->op != FilterOp::kNe && p->op != FilterOp::kGlob) {
      return InvalidArgument("operator " + std::string(FilterOpName(p->op)) + " at " + Col(pt.op_pos) +
                             " is not valid for the string field " + pt.what + "; use ==, != or ~");
    }
    BuildStringMatch(p);
    return Status::Ok();
  }

  // CPUS{list}, for a CPU or CPU-mask field's ==, != or &.
  Status ParseCpusValue(FilterPredicate* p, const PredicateText& pt, size_t value_pos) {
    const FilterFieldKind kind = p->field.kind;
    pos_ += 4;
    if (!LookingAt("{")) {
      return InvalidArgument("expected { right after CPUS at " + Col(pos_) + ", found " + Found());
    }
    size_t close = t_.find('}', pos_);
    if (close == std::string_view::npos) {
      return InvalidArgument("missing } for the CPUS{ at " + Col(value_pos));
    }
    std::string err = ParseCpuList(t_.substr(pos_ + 1, close - pos_ - 1), &p->cpus);
    if (!err.empty()) return InvalidArgument(err + " (CPUS{ at " + Col(value_pos) + ")");
    pos_ = close + 1;
    p->operand = FilterOperand::kCpus;
    if (IsStringKind(kind)) {
      return InvalidArgument(pt.what + " is a string: expected a quoted string at " + Col(value_pos) +
                             ", not CPUS{...}");
    }
    if (p->op != FilterOp::kEq && p->op != FilterOp::kNe && p->op != FilterOp::kBitAnd) {
      return InvalidArgument("operator " + std::string(FilterOpName(p->op)) + " at " + Col(pt.op_pos) +
                             " is not valid with CPUS{...}; use ==, != or &");
    }
    return Status::Ok();
  }

  // A number, for an integer field.
  Status ParseNumberValue(FilterPredicate* p, const PredicateText& pt, size_t value_pos) {
    const FilterFieldKind kind = p->field.kind;
    if (t_[pos_] == '-') ++pos_;
    while (!AtEnd() && IsAlnum(t_[pos_])) ++pos_;
    std::string_view tok = t_.substr(value_pos, pos_ - value_pos);
    if (tok.size() > kMaxNumberChars) {
      return InvalidArgument("number at " + Col(value_pos) + " is longer than " + std::to_string(kMaxNumberChars) +
                             " characters");
    }
    p->operand = FilterOperand::kInteger;
    if (IsStringKind(kind)) {
      return InvalidArgument(pt.what + " is a string: expected a quoted string ('...' or \"...\") at " +
                             Col(value_pos) + ", found " + std::string("\"") + std::string(tok) + "\"");
    }
    if (kind == FilterFieldKind::kCpumask) {
      return InvalidArgument(pt.what + " is a CPU mask: compare it with CPUS{...} at " + Col(value_pos) + ", e.g. " +
                             pt.name + " & CPUS{0-3}");
    }
    if (p->op == FilterOp::kGlob) {
      return InvalidArgument("operator ~ at " + Col(pt.op_pos) + " needs a string field; " + pt.what + " is not one");
    }
    if (kind == FilterFieldKind::kCpu && p->op == FilterOp::kBitAnd) {
      return InvalidArgument(pt.name + " & N at " + Col(pt.op_pos) +
                             " never matches (the kernel accepts it but its CPU predicate has no &); use " + pt.name +
                             " & CPUS{...} or " + pt.name + " == N");
    }
    std::string err = ParseInteger(tok, p->field.is_signed, pt.name, &p->value);
    if (!err.empty()) return InvalidArgument(err + " at " + Col(value_pos));
    return Status::Ok();
  }

  std::string_view t_;
  size_t pos_ = 0;
  const EventFormat& format_;
};

// ---------------------------------------------------------------------------------------------
// Evaluation.

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

// ---------------------------------------------------------------------------------------------
// Printing.

std::string OperandToString(const FilterPredicate& p) {
  switch (p.operand) {
    case FilterOperand::kString: {
      char q = p.text.find('"') == std::string::npos ? '"' : '\'';
      return q + p.text + q;
    }
    case FilterOperand::kCpus: {
      std::string out = "CPUS{";
      for (size_t i = 0; i < p.cpus.size(); ++i) {
        if (i) out += ",";
        out += std::to_string(p.cpus[i].first);
        if (p.cpus[i].second != p.cpus[i].first) out += "-" + std::to_string(p.cpus[i].second);
      }
      return out + "}";
    }
    case FilterOperand::kInteger: {
      const bool is_signed = p.field.is_signed || p.field.kind == FilterFieldKind::kCpu;
      if (is_signed && static_cast<int64_t>(p.value) < 0) return std::to_string(static_cast<int64_t>(p.value));
      if (p.op == FilterOp::kBitAnd) {
        char buf[24];
        std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(p.value));
        return buf;
      }
      return std::to_string(p.value);
    }
  }
  return "";
}

void Print(const FilterExpr& e, std::string* out) {
  switch (e.kind) {
    case FilterExpr::Kind::kCompare:
      *out += e.pred.field.name;
      if (e.pred.field.user_string) *out += ".ustring";
      *out += " ";
      *out += FilterOpName(e.pred.op);
      *out += " ";
      *out += OperandToString(e.pred);
      return;
    case FilterExpr::Kind::kNot:
      *out += "!";
      if (!e.children.empty() && e.children[0].kind == FilterExpr::Kind::kNot) {
        Print(e.children[0], out);
      } else {
        *out += "(";
        if (!e.children.empty()) Print(e.children[0], out);
        *out += ")";
      }
      return;
    case FilterExpr::Kind::kAnd:
    case FilterExpr::Kind::kOr: {
      const bool is_and = e.kind == FilterExpr::Kind::kAnd;
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i) *out += is_and ? " && " : " || ";
        const FilterExpr& c = e.children[i];
        // && binds tighter than ||, so only an || inside && (or a nested node of the same kind,
        // which ParseFilter never makes) needs parentheses.
        bool parens = c.kind == e.kind || (is_and && c.kind == FilterExpr::Kind::kOr);
        if (parens) *out += "(";
        Print(c, out);
        if (parens) *out += ")";
      }
      return;
    }
  }
}

void CollectWarnings(const FilterExpr& e, const EventFormat& format, std::vector<std::string>* out) {
  for (const auto& c : e.children) CollectWarnings(c, format, out);
  if (e.kind != FilterExpr::Kind::kCompare) return;
  const FilterPredicate& p = e.pred;
  FilterExpr self;
  self.pred = p;
  const std::string text = FilterToString(self);
  const FilterFieldKind k = p.field.kind;
  if (p.operand == FilterOperand::kString && p.op == FilterOp::kGlob) {
    std::string_view s = p.text;
    if (!s.empty() && s[0] == '!') s.remove_prefix(1);
    if (!s.empty() && IsDigit(s[0]) && s.find_first_of("*?[\\") != std::string_view::npos) {
      out->push_back(text +
                     ": the kernel compares a pattern that starts with a digit literally, without wildcards; "
                     "start it with a character class instead, e.g. \"[" +
                     std::string(1, s[0]) + "]" + std::string(s.substr(1)) + "\"");
    }
    const bool fixed = k == FilterFieldKind::kCharArray || k == FilterFieldKind::kComm;
    const std::string n = std::to_string(k == FilterFieldKind::kComm ? kFilterCommBytes : p.field.size);
    if (fixed && p.match == StringMatch::kSuffix && !p.pattern.empty()) {
      out->push_back(text + ": the kernel matches \"*suffix\" against the end of the whole " + n +
                     "-byte array, not the end of the string, so only strings that fill the array match; use a "
                     "glob such as \"*[" +
                     p.pattern.substr(0, 1) + "]" + p.pattern.substr(1) + "\" for a real suffix match");
    }
    if (k == FilterFieldKind::kCharArray && p.match == StringMatch::kSubstring && !p.pattern.empty()) {
      out->push_back(text + ": the kernel searches all " + n +
                     " bytes of the array for \"*substring*\", including stale bytes after the string's NUL");
    }
  }
  if (k == FilterFieldKind::kStringPointer && !p.field.user_string &&
      (format.name.starts_with("sys_enter_") || format.name.starts_with("sys_exit_"))) {
    out->push_back(text + ": " + p.field.name +
                   " points to user memory, which the kernel reads only with .ustring; without it the predicate "
                   "is always false: write " +
                   p.field.name + ".ustring");
  }
}

}  // namespace

const char* FilterOpName(FilterOp op) {
  switch (op) {
    case FilterOp::kEq:
      return "==";
    case FilterOp::kNe:
      return "!=";
    case FilterOp::kLt:
      return "<";
    case FilterOp::kLe:
      return "<=";
    case FilterOp::kGt:
      return ">";
    case FilterOp::kGe:
      return ">=";
    case FilterOp::kBitAnd:
      return "&";
    case FilterOp::kGlob:
      return "~";
  }
  return "?";
}

const char* FilterFieldKindName(FilterFieldKind kind) {
  switch (kind) {
    case FilterFieldKind::kInteger:
      return "integer";
    case FilterFieldKind::kCharArray:
      return "char array";
    case FilterFieldKind::kDataLocString:
      return "__data_loc string";
    case FilterFieldKind::kRelLocString:
      return "__rel_loc string";
    case FilterFieldKind::kStringPointer:
      return "string pointer";
    case FilterFieldKind::kCpumask:
      return "cpumask";
    case FilterFieldKind::kCpu:
      return "cpu";
    case FilterFieldKind::kComm:
      return "comm";
  }
  return "?";
}

StatusOr<FilterExpr> ParseFilter(std::string_view text, const EventFormat& format) {
  return Parser(text, format).Parse();
}

bool EvaluateFilter(const FilterExpr& expr, Bytes record, const FilterContext& ctx) { return Eval(expr, record, ctx); }

std::string FilterToString(const FilterExpr& expr) {
  std::string out;
  Print(expr, &out);
  return out;
}

std::vector<std::string> FilterWarnings(const FilterExpr& expr, const EventFormat& format) {
  std::vector<std::string> out;
  CollectWarnings(expr, format, &out);
  return out;
}

bool UsesCpus(const FilterExpr& expr) {
  if (expr.kind == FilterExpr::Kind::kCompare) return expr.pred.operand == FilterOperand::kCpus;
  return std::any_of(expr.children.begin(), expr.children.end(), [](const FilterExpr& c) { return UsesCpus(c); });
}

Status CheckFilterCpus(const FilterExpr& expr, uint32_t nr_cpu_ids) {
  if (expr.kind != FilterExpr::Kind::kCompare) {
    for (const auto& c : expr.children) TPE_RETURN_IF_ERROR(CheckFilterCpus(c, nr_cpu_ids));
    return Status::Ok();
  }
  const FilterPredicate& p = expr.pred;
  if (p.operand != FilterOperand::kCpus) return Status::Ok();
  for (const auto& [first, last] : p.cpus) {
    if (last >= nr_cpu_ids) {
      return InvalidArgument(FilterToString(expr) + " at column " + std::to_string(p.column) + " names CPU " +
                             std::to_string(std::max(first, nr_cpu_ids)) + ", but this machine's CPUs are 0-" +
                             std::to_string(nr_cpu_ids - 1) + " (the kernel refuses it: Invalid cpulist)");
    }
  }
  return Status::Ok();
}

}  // namespace tpe
