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

// The field a symbol/flags argument refers to: REC->f, (type)REC->f, or REC->f & mask.
const char* ArgField(const tep_print_arg* a) {
  while (a != nullptr) {
    switch (a->type) {
      case TEP_PRINT_FIELD:
        return a->field.name;
      case TEP_PRINT_TYPE:
        a = a->typecast.item;
        break;
      case TEP_PRINT_OP:
        if (a->op.op != nullptr && std::string_view(a->op.op) == "&") {
          a = a->op.left;
          break;
        }
        return nullptr;
      default:
        return nullptr;
    }
  }
  return nullptr;
}

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

void Walk(const tep_print_arg* a, const EnumResolver& resolve, std::map<std::string, SymbolTable>* out) {
  for (; a != nullptr; a = a->next) {
    switch (a->type) {
      case TEP_PRINT_SYMBOL: {
        const char* f = ArgField(a->symbol.field);
        if (f != nullptr && !out->count(f)) Collect(a->symbol.symbols, resolve, &(*out)[f]);
        break;
      }
      case TEP_PRINT_FLAGS: {
        const char* f = ArgField(a->flags.field);
        if (f != nullptr && !out->count(f)) {
          SymbolTable& t = (*out)[f];
          t.is_flags = true;
          if (a->flags.delim) t.delim = a->flags.delim;
          Collect(a->flags.flags, resolve, &t);
        }
        break;
      }
      case TEP_PRINT_OP:
        Walk(a->op.left, resolve, out);
        Walk(a->op.right, resolve, out);
        break;
      case TEP_PRINT_TYPE:
        Walk(a->typecast.item, resolve, out);
        break;
      default:
        break;
    }
  }
}

}  // namespace

std::string SymbolTable::Render(uint64_t value) const {
  if (!is_flags) {
    for (const auto& [v, name] : entries) {
      if (v == value) return name;
    }
    return std::to_string(static_cast<int64_t>(value));
  }
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
  Walk(event->print_fmt.args, resolve, &out);
  return out;
}

}  // namespace tpe
