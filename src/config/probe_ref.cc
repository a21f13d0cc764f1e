#include "config/probe_ref.h"

#include <algorithm>
#include <cctype>
#include <iterator>

#include "common/name_table.h"

namespace tpe {
namespace {

constexpr const char* kForms =
    "uprobe:PATH:SYMBOL[+OFFSET], uretprobe:PATH:SYMBOL, usdt:PATH:PROVIDER:NAME, kprobe:FUNCTION[+OFFSET] or "
    "kretprobe:FUNCTION";

bool IsIdent(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// "SYMBOL[+OFFSET]" into `ref`; OFFSET is decimal or 0x hex.
Status SplitOffset(const std::string& event, const std::string& text, ProbeRef* ref) {
  const size_t plus = text.find('+');
  ref->symbol = text.substr(0, plus);
  if (plus == std::string::npos) return Status::Ok();
  const std::string off = text.substr(plus + 1);
  const bool hex = off.starts_with("0x") || off.starts_with("0X");
  const std::string digits = hex ? off.substr(2) : off;
  const bool ok = !digits.empty() && digits.size() <= 15 &&
                  digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") == std::string::npos;
  if (!ok) {
    return InvalidArgument("\"" + event + "\": the offset \"" + off +
                           "\" is not a number of bytes in decimal or 0x hex (e.g. +16 or +0x10)");
  }
  ref->offset = std::stoull(digits, nullptr, hex ? 16 : 10);
  return Status::Ok();
}

}  // namespace

std::optional<ProbePrefix> ProbePrefixOf(std::string_view event) {
  const size_t colon = event.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  return FromName<ProbePrefix>(event.substr(0, colon));
}

bool IsProbeEvent(const std::string& event) { return ProbePrefixOf(event).has_value(); }

std::string ProbePrefixList() {
  std::string out;
  for (const EnumName<ProbePrefix>& p : kProbePrefixNames) out += (out.empty() ? "" : ", ") + std::string(p.name) + ":";
  return out;
}

StatusOr<ProbeRef> ParseProbeRef(const std::string& event) {
  ProbeRef ref;
  const size_t colon = event.find(':');
  const std::string kind = event.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : event.substr(colon + 1);
  auto bad = [&](const std::string& why) {
    return InvalidArgument("\"" + event + "\" " + why + " (valid forms: " + kForms + ")");
  };
  const std::optional<ProbePrefix> prefix = FromName<ProbePrefix>(kind);
  if (prefix == ProbePrefix::kKprobe || prefix == ProbePrefix::kKretprobe) {
    ref.kind = prefix == ProbePrefix::kKprobe ? ProbeKind::kKprobe : ProbeKind::kKretprobe;
    TPE_RETURN_IF_ERROR(SplitOffset(event, rest, &ref));
    if (ref.symbol.empty()) {
      return bad("names no kernel function");
    }
    if (ref.kind == ProbeKind::kKretprobe && ref.offset != 0) return bad("has an offset: a return probe takes none");
    return ref;
  }
  if (!prefix) return bad("is not a probe name");
  if (!rest.starts_with("/")) return bad("needs an absolute PATH after \"" + kind + ":\"");
  const size_t last = rest.rfind(':');
  if (last == std::string::npos || last + 1 >= rest.size()) return bad("names no symbol after the path");
  if (prefix == ProbePrefix::kUsdt) {
    ref.usdt = true;
    const size_t prev = rest.rfind(':', last - 1);
    if (prev == std::string::npos || prev == 0) return bad("needs PATH:PROVIDER:NAME");
    ref.path = rest.substr(0, prev);
    ref.provider = rest.substr(prev + 1, last - prev - 1);
    ref.name = rest.substr(last + 1);
    if (ref.provider.empty()) return bad("names no provider");
    return ref;
  }
  ref.kind = prefix == ProbePrefix::kUprobe ? ProbeKind::kUprobe : ProbeKind::kUretprobe;
  ref.path = rest.substr(0, last);
  TPE_RETURN_IF_ERROR(SplitOffset(event, rest.substr(last + 1), &ref));
  if (ref.symbol.empty()) return bad("names no symbol");
  if (ref.kind == ProbeKind::kUretprobe && ref.offset != 0) return bad("has an offset: a return probe takes none");
  return ref;
}

StatusOr<ProbeArg> ParseProbeArg(const ProbeRef& probe, const std::string& field, const std::string& spec) {
  const std::string culprit = "args." + field + " \"" + spec + "\"";
  if (!IsIdent(field) || field.size() > 32 || field.starts_with("common_") || field.starts_with("__probe_")) {
    return InvalidArgument("args: \"" + field +
                           "\" is not a valid field name ([A-Za-z_][A-Za-z0-9_]*, at most 32 characters, not common_* "
                           "or __probe_*)");
  }
  ProbeArg a;
  a.field = field;
  const size_t colon = spec.find(':');
  const std::string what = spec.substr(0, colon);
  if (colon != std::string::npos) {
    a.type = spec.substr(colon + 1);
    if (a.type.empty()) return InvalidArgument(culprit + ": the type after ':' is missing");
  }
  const bool ret_probe = probe.kind == ProbeKind::kUretprobe || probe.kind == ProbeKind::kKretprobe;
  if (what == "retval") {
    if (!ret_probe || probe.usdt) {
      return InvalidArgument(culprit + ": retval is only for uretprobe: and kretprobe: events");
    }
    a.retval = true;
  } else if (what.starts_with("arg") && what.size() > 3 && what.size() <= 5 &&
             what.find_first_not_of("0123456789", 3) == std::string::npos) {
    a.index = std::stoi(what.substr(3));
    const int max = probe.usdt ? 11 : 5;
    if (a.index > max) {
      return InvalidArgument(culprit + ": arg" + std::to_string(a.index) + " is out of range (arg0 to arg" +
                             std::to_string(max) + (probe.usdt ? ")" : "; later arguments are on the stack)"));
    }
    if (ret_probe && !probe.usdt) {
      return InvalidArgument(culprit +
                             ": a return probe has no arguments (the registers are no longer theirs); "
                             "use retval, or an entry probe");
    }
  } else {
    return InvalidArgument(culprit + ": must be argN[:TYPE] or retval[:TYPE]");
  }
  static const char* kTypes[] = {"u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "ustring", "string"};
  if (!a.type.empty() && std::find(std::begin(kTypes), std::end(kTypes), a.type) == std::end(kTypes)) {
    return InvalidArgument(culprit + ": type \"" + a.type + "\" is not one of u8, u16, u32, u64, s8, s16, s32, s64, " +
                           "ustring, string");
  }
  return a;
}

}  // namespace tpe
