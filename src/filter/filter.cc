// The filter language (filter.h): the parser, as the kernel's filter_parse()/parse_pred() read a
// filter against an event's format, the printer and the warnings. Evaluation is filter_eval.cc.
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
