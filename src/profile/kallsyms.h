// Kernel symbols from /proc/kallsyms, for naming kernel frames of a callchain or stack map.
//
// Source: the text format of /proc/kallsyms (kernel/kallsyms.c s_show: "<address> <type> <name>"
// and, for a module's symbol, "\t[<module>]"); kptr_restrict (Documentation/admin-guide/sysctl/
// kernel.rst): a reader without CAP_SYSLOG, or any reader at kptr_restrict=2, sees every address
// as 0 — then nothing can be named and hidden() says so.
//
// Thread-safety: immutable after Parse; Lookup may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpe {

class Kallsyms {
 public:
  struct Symbol {
    uint64_t address = 0;  // start address (kernel virtual)
    std::string name;      // e.g. "__x64_sys_getppid"
    std::string module;    // "" for the kernel image, else the module's name ("xfs")
  };
  struct Hit {
    const Symbol* symbol = nullptr;  // the text symbol whose range holds the address
    uint64_t offset = 0;             // address - symbol->address, bytes
  };

  // Parses the text of /proc/kallsyms. Keeps text symbols (types t, T, w, W). Returns
  // InvalidArgument naming the first malformed line (its number and text). An all-zero listing
  // parses into a table with hidden() true.
  static StatusOr<Kallsyms> Parse(std::string_view text);
  // Reads and parses `path` (default /proc/kallsyms). NotFound/PermissionDenied as the file gives.
  static StatusOr<Kallsyms> Read(const std::string& path = "/proc/kallsyms");

  // The symbol holding `address`: the last text symbol at or below it, unless that is the last
  // symbol of the table (no end known) or the address is 0. {nullptr, 0} when none.
  Hit Lookup(uint64_t address) const;

  // True when the listing had symbols but every address read 0 (kptr_restrict).
  bool hidden() const { return hidden_; }
  size_t size() const { return symbols_.size(); }

 private:
  std::vector<Symbol> symbols_;  // sorted by address
  bool hidden_ = false;
};

}  // namespace tpe
