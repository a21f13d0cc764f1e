#include "format/print_symbols.h"

#include <traceevent/event-parse.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

namespace tpe {
namespace {

struct TepDeleter {
  void operator()(tep_handle* t) const { tep_free(t); }
};

std::optional<int64_t> ParseNumber(const char* s) {
  if (s == nullptr || *s == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 0);
  if (errno == ERANGE) {
    unsigned long long u = std::strtoull(s, &end, 0);
    if (*end == '\0') return static_cast<int64_t>(u);
  }
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::optional<uint64_t> EvalConst(const tep_print_arg* a);

bool IsOp(const tep_print_arg* a, std::string_view op) {
  return a != nullptr && a->type == TEP_PRINT_OP && a->op.op != nullptr && op == a->op.op;
}

// A constant integer expression of the print fmt, e.g. sched_switch's
// ((((0x00000000 | 0x00000001 | ...) + 1) << 1) - 1), or nullopt when it is not one.
std::optional<uint64_t> EvalConst(const tep_print_arg* a) {
  if (a == nullptr) return std::nullopt;
  if (a->type == TEP_PRINT_ATOM) {
    auto v = ParseNumber(a->atom.atom);
    if (v) return static_cast<uint64_t>(*v);
    return std::nullopt;
  }
  if (a->type == TEP_PRINT_TYPE) return EvalConst(a->typecast.item);
  if (a->type != TEP_PRINT_OP || a->op.op == nullptr) return std::nullopt;
  std::string_view op = a->op.op;
  auto r = EvalConst(a->op.right);
  if (!r) return std::nullopt;
  if (a->op.left == nullptr || a->op.left->type == TEP_PRINT_NULL) {  // unary: ~x, -x, !x
    if (op == "~") return ~*r;
    if (op == "-") return -*r;
    if (op == "!") return uint64_t{*r == 0};
    return std::nullopt;
  }
  auto l = EvalConst(a->op.left);
  if (!l) return std::nullopt;
  if (op == "|") return *l | *r;
  if (op == "&") return *l & *r;
  if (op == "^") return *l ^ *r;
  if (op == "+") return *l + *r;
  if (op == "-") return *l - *r;
  if (op == "*") return *l * *r;
  if (op == "<<") return *r < 64 ? *l << *r : 0;
  if (op == ">>") return *r < 64 ? *l >> *r : 0;
  return std::nullopt;
}

// The field an argument refers to: REC->f, (type)REC->f, or REC->f & <constant>, with the mask
// (all ones when there is none); nullptr for any other expression.
const char* ArgField(const tep_print_arg* a, uint64_t* mask) {
  *mask = ~uint64_t{0};
  while (a != nullptr) {
    switch (a->type) {
      case TEP_PRINT_FIELD:
        return a->field.name;
      case TEP_PRINT_TYPE:
        a = a->typecast.item;
        break;
      case TEP_PRINT_OP: {
        if (!IsOp(a, "&")) return nullptr;
        auto m = EvalConst(a->op.right);
        if (!m) return nullptr;
        *mask &= *m;
        a = a->op.left;
        break;
      }
      default:
        return nullptr;
    }
  }
  return nullptr;
}

void Collect(const tep_print_flag_sym* syms, const EnumResolver& resolve, SymbolTable* t) {
  for (const auto* s = syms; s != nullptr; s = s->next) {
    std::optional<int64_t> v = ParseNumber(s->value);
    if (!v && resolve && s->value != nullptr) v = resolve(s->value);
    if (v) {
      t->entries.emplace_back(static_cast<uint64_t>(*v), s->str ? s->str : "");
    } else {
      t->unresolved.emplace_back(s->value ? s->value : "?");
    }
  }
}

// The table of a __print_symbolic/__print_flags argument over a field, added to `out` (the first
// table of a field wins); the field's name, or nullptr.
const char* AddTable(const tep_print_arg* a, const EnumResolver& resolve, std::map<std::string, SymbolTable>* out) {
  const bool flags = a->type == TEP_PRINT_FLAGS;
  uint64_t mask = 0;
  const char* f = ArgField(flags ? a->flags.field : a->symbol.field, &mask);
  if (f == nullptr || out->count(f)) return nullptr;
  SymbolTable& t = (*out)[f];
  t.mask = mask;
  t.is_flags = flags;
  if (flags && a->flags.delim) t.delim = a->flags.delim;
  Collect(flags ? a->flags.flags : a->symbol.symbols, resolve, &t);
  return f;
}

bool IsTable(const tep_print_arg* a) {
  return a != nullptr && (a->type == TEP_PRINT_FLAGS || a->type == TEP_PRINT_SYMBOL);
}

void Walk(const tep_print_arg* a, const EnumResolver& resolve, std::map<std::string, SymbolTable>* out,
          bool top_level) {
  const char* previous = nullptr;  // the field whose table the previous top-level argument printed
  for (; a != nullptr; a = top_level ? a->next : nullptr) {
    const char* printed = nullptr;
    switch (a->type) {
      case TEP_PRINT_SYMBOL:
      case TEP_PRINT_FLAGS:
        printed = AddTable(a, resolve, out);
        break;
      case TEP_PRINT_OP: {
        // cond ? yes : no, as libtraceevent parses it: op "?" with right = op ":" (yes, no).
        if (IsOp(a, "?") && IsOp(a->op.right, ":")) {
          const tep_print_arg* yes = a->op.right->op.left;
          const tep_print_arg* no = a->op.right->op.right;
          uint64_t cond_mask = 0;
          const char* cond = ArgField(a->op.left, &cond_mask);
          const bool no_is_text = no != nullptr && no->type == TEP_PRINT_ATOM;
          if (cond != nullptr && IsTable(yes) && no_is_text) {
            const char* f = AddTable(yes, resolve, out);
            if (f != nullptr && std::string_view(f) == cond) {
              SymbolTable& t = out->at(f);
              t.zero_name = no->atom.atom;
              t.zero_mask = cond_mask;
              printed = f;
            }
            break;
          }
          if (cond != nullptr && previous != nullptr && std::string_view(cond) == previous && yes != nullptr &&
              yes->type == TEP_PRINT_ATOM && no_is_text) {
            out->at(previous).suffixes.push_back({cond_mask, yes->atom.atom, no->atom.atom});
            printed = previous;
            break;
          }
        }
        Walk(a->op.left, resolve, out, false);
        Walk(a->op.right, resolve, out, false);
        break;
      }
      case TEP_PRINT_TYPE:
        Walk(a->typecast.item, resolve, out, false);
        break;
      default:
        break;
    }
    previous = printed;
  }
}

}  // namespace

namespace {

std::string RenderTable(const SymbolTable& t, uint64_t value) {
  if (t.zero_name && (value & t.zero_mask) == 0) return *t.zero_name;
  value &= t.mask;
  if (!t.is_flags) {
    for (const auto& [v, name] : t.entries) {
      if (v == value) return name;
    }
    return std::to_string(static_cast<int64_t>(value));
  }
  const auto& entries = t.entries;
  const std::string& delim = t.delim;
  std::string out;
  uint64_t left = value;
  for (const auto& [v, name] : entries) {
    if (v == 0) {
      if (value == 0) return name;
      continue;
    }
    if ((left & v) == v) {
      if (!out.empty()) out += delim;
      out += name;
      left &= ~v;
    }
  }
  if (left != 0 || out.empty()) {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(left));
    if (!out.empty()) out += delim;
    out += buf;
  }
  return out;
}

}  // namespace

std::string SymbolTable::Render(uint64_t value) const {
  std::string out = RenderTable(*this, value);
  for (const Suffix& s : suffixes) out += (value & s.mask) != 0 ? s.if_set : s.if_clear;
  return out;
}

StatusOr<std::map<std::string, SymbolTable>> ParsePrintSymbols(const std::string& format_text,
                                                               const std::string& system, const EnumResolver& resolve,
                                                               const std::string& source) {
  std::unique_ptr<tep_handle, TepDeleter> tep(tep_alloc());
  if (!tep) return Internal("tep_alloc failed");
  tep_event* event = nullptr;
  tep_errno err = tep_parse_format(tep.get(), &event, format_text.data(), format_text.size(), system.c_str());
  if (err != TEP_ERRNO__SUCCESS || event == nullptr) {
    char buf[256] = "unknown error";
    tep_strerror(tep.get(), err, buf, sizeof(buf));
    return InvalidArgument(source + ": libtraceevent cannot parse the print fmt: " + buf);
  }
  std::map<std::string, SymbolTable> out;
  Walk(event->print_fmt.args, resolve, &out, true);
  return out;
}

}  // namespace tpe
