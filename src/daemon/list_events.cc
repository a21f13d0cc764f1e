#include "daemon/list_events.h"

#include <fnmatch.h>

#include "decode/field_extractor.h"
#include "format/event_format.h"
#include "format/print_symbols.h"

namespace tpe {

Status ListEvents(const Tracefs& tracefs, const std::string& glob, std::ostream& out, const KernelEnums& enums) {
  TPE_ASSIGN_OR_RETURN(auto events, tracefs.ListEvents());
  size_t matched = 0;
  for (const auto& e : events) {
    std::string name = e.ToString();
    if (::fnmatch(glob.c_str(), name.c_str(), 0) != 0) continue;
    ++matched;
    auto text = tracefs.ReadFormat(e);
    if (!text.ok()) {
      out << name << "  (format unreadable: " << text.status().message() << ")\n";
      continue;
    }
    auto fmt = ParseFormat(*text, name);
    if (!fmt.ok()) {
      out << name << "  (format unparsable: " << fmt.status().message() << ")\n";
      continue;
    }
    out << name << "  id=" << fmt->id << "\n";
    auto syms = ParsePrintSymbols(
        *text, e.system, [&](std::string_view n) { return enums.Lookup(n); }, name);
    for (const auto& f : fmt->fields) {
      if (f.is_common && f.name != "common_pid") continue;
      const SymbolTable* table = nullptr;
      if (syms.ok()) {
        auto it = syms->find(f.name);
        if (it != syms->end()) table = &it->second;
      }
      std::string decodes;
      for (const auto& d : FittingDecodes(f, table)) decodes += (decodes.empty() ? "" : ", ") + d;
      out << "    " << f.name << "  " << f.type << "  size=" << f.size << (f.is_signed ? " signed" : "") << "  ("
          << FieldKindName(f.kind) << ")  decode: " << decodes << "\n";
    }
  }
  if (matched == 0) return NotFound("no tracepoint matches \"" + glob + "\" (try --list-events='sched:*')");
  return Status::Ok();
}

}  // namespace tpe
