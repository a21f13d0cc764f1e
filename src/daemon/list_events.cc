#include "daemon/list_events.h"

#include <fnmatch.h>

#include "decode/field_extractor.h"
#include "elf/elf_file.h"
#include "format/event_format.h"
#include "format/print_symbols.h"
#include "plan/probes.h"

namespace tpe {

namespace {

// --list-events='usdt:PATH:GLOB' (USDT probes whose "provider:name" matches, with their argument
// specs) or 'uprobe:PATH:GLOB' / 'uretprobe:PATH:GLOB' (function symbols), from the ELF file.
Status ListProbes(ProbePrefix prefix, const std::string& glob, std::ostream& out) {
  const size_t colon = glob.find(':');
  const std::string kind = glob.substr(0, colon), rest = glob.substr(colon + 1);
  if (prefix == ProbePrefix::kKprobe || prefix == ProbePrefix::kKretprobe) {
    return InvalidArgument("--list-events=" + glob + ": kernel functions are listed by the kernel (" +
                           "/sys/kernel/tracing/available_filter_functions), not here");
  }
  const size_t first = rest.find(':');
  if (!rest.starts_with("/") || first == std::string::npos) {
    return InvalidArgument(
        "--list-events=" + glob + ": give " + kind + ":PATH:GLOB, e.g. '" + kind +
        (prefix == ProbePrefix::kUsdt ? ":/usr/bin/python3.11:*'" : ":/lib/x86_64-linux-gnu/libc.so.6:*mall*'"));
  }
  // PATH ends at the first ':' (a USDT GLOB is "provider:name" and may hold one).
  const std::string path = rest.substr(0, first), pattern = rest.substr(first + 1);
  TPE_ASSIGN_OR_RETURN(elf::ElfFile file, elf::ElfFile::Open(path));
  size_t matched = 0;
  if (prefix == ProbePrefix::kUsdt) {
    for (const elf::UsdtProbe& p : file.UsdtProbes()) {
      if (::fnmatch(pattern.c_str(), p.FullName().c_str(), 0) != 0 &&
          ::fnmatch(pattern.c_str(), p.name.c_str(), 0) != 0) {
        continue;
      }
      ++matched;
      out << "usdt:" << path << ":" << p.FullName() << "  offset=0x" << std::hex << p.file_offset
          << (p.semaphore_file_offset ? "  semaphore=0x" : "");
      if (p.semaphore_file_offset) out << p.semaphore_file_offset;
      out << std::dec << "\n";
      for (size_t i = 0; i < p.args.size(); ++i) {
        const elf::UsdtArgument& a = p.args[i];
        out << "    arg" << i << "  " << a.spec << "  " << (a.is_signed ? "s" : "u") << 8 * a.size << "\n";
      }
      if (!p.args_status.ok()) out << "    (arguments unreadable: " << p.args_status.message() << ")\n";
    }
  } else {
    for (const elf::Symbol& sym : file.Symbols(pattern)) {
      ++matched;
      out << kind << ":" << path << ":" << sym.QualifiedName() << "  offset=0x" << std::hex << sym.file_offset
          << std::dec << "  size=" << sym.size << (sym.is_ifunc ? "  (ifunc: probes hit its resolver)" : "") << "\n";
    }
  }
  if (matched == 0) return NotFound("--list-events=" + glob + ": nothing in " + path + " matches \"" + pattern + "\"");
  return Status::Ok();
}

}  // namespace

Status ListEvents(const Tracefs& tracefs, const std::string& glob, std::ostream& out, const KernelEnums& enums) {
  if (const std::optional<ProbePrefix> prefix = ProbePrefixOf(glob)) return ListProbes(*prefix, glob, out);
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
