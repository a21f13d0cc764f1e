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
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpe {

// Whether the kallsyms text at `path` hides the kernel's addresses from this process: its first
// text symbol (type t, T, w or W; the per-CPU data symbols some kernels list first sit at 0
// whatever the privilege) reads address 0. That is the zeroed listing kptr_restrict gives
// (kernel/kallsyms.c kallsyms_show_value): to a reader without CAP_SYSLOG at
// kernel.kptr_restrict=1, or at 0 when kernel.perf_event_paranoid >= 2; to every reader at 2.
// Reads only up to that line (a few KiB; the whole file costs ~0.3 s of CPU), through the held
// file when HoldKallsymsOpen(path) was called. Errors: the file's; NotFound when it lists no text
// symbol (in its first MiB).
StatusOr<bool> KallsymsHidden(const std::string& path = "/proc/kallsyms");

// Opens `path` now and keeps it open for the process's life: Kallsyms::Read(path) and
// KallsymsHidden(path) read through it from then on. The kernel decides whether a reader sees
// kallsyms' addresses when the file is opened (kallsyms_open caches kallsyms_show_value(
// file->f_cred); Linux 5.8, and the stable kernels it went back to), so a file opened while the
// process holds CAP_SYSLOG still shows them once the capabilities are dropped
// (daemon/privileges.h). Once per path (a later call for the same path does nothing). Errors:
// the open's. Thread-safety: any thread; reads of one held file are serialized.
Status HoldKallsymsOpen(const std::string& path = "/proc/kallsyms");

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
  // Reads and parses `path` (default /proc/kallsyms; through the held file after
  // HoldKallsymsOpen(path)). NotFound/PermissionDenied as the file gives.
  static StatusOr<Kallsyms> Read(const std::string& path = "/proc/kallsyms");

  // The symbol holding `address`: the last text symbol at or below it, unless that is the last
  // symbol of the table (no end known) or the address is 0. {nullptr, 0} when none.
  Hit Lookup(uint64_t address) const;

  // True when the listing had symbols but every address read 0 (kptr_restrict).
  bool hidden() const { return hidden_; }
  // Where the image `s` belongs to starts: the kernel's `_text` (else its lowest text symbol), or
  // a module's lowest text symbol. An address less its image's base is what a profile serves
  // instead of the address (KASLR: the base is the secret, offsets from it are not).
  uint64_t base(const Symbol& s) const;
  size_t size() const { return symbols_.size(); }

 private:
  std::vector<Symbol> symbols_;            // sorted by address
  std::map<std::string, uint64_t> bases_;  // module ("" the kernel) -> base
  bool text_found_ = false;                // `_text` was listed (it is the kernel's base)
  bool hidden_ = false;
};

// The kernel's symbols read once and shared by every render: reading /proc/kallsyms costs
// ~0.3 s of CPU here (the kernel formats ~120,000 lines; measured 92 % of a render), and a
// continuous profiler is scraped every 10 s. The table is read again when /proc/modules changed
// (a module loaded or removed), when it is older than
// `max_age_ns`, or when a render found a kernel address that no symbol holds (a module or BPF
// program loaded since: MarkMissed, once per address and table) and it is older than
// `min_age_ns`. A table that could not
// be read is an empty one (no kernel frame named), tried again after min_age_ns.
// Thread-safety: every method from any thread; the tables it hands out are immutable.
class KallsymsCache {
 public:
  // `modules_path`: whose text changing (a module loaded or removed) makes the table stale at once.
  explicit KallsymsCache(std::string path = "/proc/kallsyms", uint64_t max_age_ns = 600'000'000'000ULL,
                         uint64_t min_age_ns = 10'000'000'000ULL, std::string modules_path = "/proc/modules");
  // The table, read now if there is none or it is stale. `now_ns`: CLOCK_MONOTONIC.
  std::shared_ptr<const Kallsyms> Get(uint64_t now_ns);
  // Lookups in the current table found no symbol for these kernel addresses. An address already
  // missed since the last refresh for age (one no symbol holds, e.g. past the last one) asks for
  // no re-read.
  void MarkMissed(const std::set<uint64_t>& addresses);
  // Times the file was read.
  uint64_t reads() const;

 private:
  std::string path_, modules_path_;
  uint64_t max_age_ns_, min_age_ns_;
  std::string modules_text_;  // as last read
  mutable std::mutex mu_;
  std::shared_ptr<const Kallsyms> table_;
  uint64_t read_at_ns_ = 0;
  bool missed_ = false, failed_ = false;
  std::set<uint64_t> known_misses_;  // since the last refresh for age, at most 4096
  uint64_t reads_ = 0;
};

}  // namespace tpe
