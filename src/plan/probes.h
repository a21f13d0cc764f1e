// Probe events from the config (their references: config/probe_ref.h): uprobes, uretprobes, USDT
// probes, kprobes and kretprobes, named as bpftrace names them, turned into dynamic trace events
// (tracefs/probe_events.h) that the rest of the plan opens like any tracepoint (docs/ARCHITECTURE.md "Probe events are
// dynamic trace events").
//
//   uprobe:PATH:SYMBOL            entry of a function (an OFFSET is parsed but refused by
//                                 ResolveProbe: no disassembler checks the instruction boundary)
//   uretprobe:PATH:SYMBOL         return of a function ($retval)
//   usdt:PATH:PROVIDER:NAME       a USDT probe (.note.stapsdt); its semaphore is set by the kernel
//                                 (ref_ctr_offset, Linux 4.20) while the event is open
//   kprobe:FUNCTION[+OFFSET]      a kernel function (CONFIG_KPROBE_EVENTS)
//   kretprobe:FUNCTION            a kernel function's return
// PATH is an absolute path of an executable or a library; a container's binary is reached as
// /proc/PID/root/PATH. Fields come from the metric's "args": field name -> "argN[:TYPE]" (N from
// 0, the x86-64 calling convention's registers di, si, dx, cx, r8, r9; for USDT the probe's own
// argument specs) or "retval[:TYPE]" (return probes), TYPE one of u8..u64, s8..s64, ustring (a
// string in user memory), string (in kernel memory; on uprobes and USDT probes, which only see
// the program's memory, both are the program's string). The default TYPE is u64, and for USDT
// the size and sign the note gives.
//
// Thread-safety: the free functions are pure; ProbeRegistry is thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/probe_ref.h"
#include "elf/usdt.h"
#include "tracefs/probe_events.h"
#include "tracefs/tracefs.h"

namespace tpe {

// The kernel fetch args (Documentation/trace/uprobetracer.rst "FETCHARGS") of `args`, in order:
// {field, "%di:u64"}, {field, "+0(%si):string"}, {field, "$retval:s32"}, and for USDT from the
// note's spec ("-4@-16(%rbp)" -> "-16(%bp):s32"). A string argument of a uprobe, uretprobe or
// USDT probe is written "string" whether it says ustring or string (uprobes read user memory
// either way, and kernels before ustring refuse that name); a kprobe's ustring stays ustring
// (ProbeEvents::Create refuses it on a kernel without it). `usdt_args`: the probe's parsed arguments
// (usdt only). Errors: InvalidArgument naming the field (an argument the probe does not have, a
// USDT constant argument, a string type on a field the spec says is narrower than a pointer).
StatusOr<std::vector<std::pair<std::string, std::string>>> FetchArgs(const ProbeRef& probe,
                                                                     const std::vector<ProbeArg>& args,
                                                                     const std::vector<elf::UsdtArgument>& usdt_args);

// Resolves `probe` (ELF symbols and notes, read from PATH) into the event definition for
// ProbeEvents, without group and event names. Errors: those of elf::ElfFile (a missing file, a
// stripped binary, an unknown symbol or probe, each with the closest names), InvalidArgument for
// a USDT probe with more than one site (not supported) and from FetchArgs.
StatusOr<ProbeEventSpec> ResolveProbe(const ProbeRef& probe, const std::vector<ProbeArg>& args);

// The event name for a definition: a prefix naming the probe (u_/ur_/usdt_/k_/kr_ and the
// symbol or provider_name, cut to fit) and 8 hex digits of a hash of the definition (maxactive
// included) and `file_identity` (FileIdentity of a uprobe's binary), so equal definitions on the
// same file share one event and different ones never collide in practice. Pure.
std::string ProbeEventName(const ProbeRef& probe, const ProbeEventSpec& spec, const std::string& file_identity = "");
// "st_dev:st_ino" of `path` ("" when it cannot be stat'ed): the kernel binds a uprobe to the
// file's inode when it is defined (trace_uprobe_create: kern_path, d_real_inode), so a binary
// replaced under the same path (a package upgrade renames a new file over it) needs a new event,
// which a changed identity gives. The modification time is not part of it: a file rewritten in
// place (or touched) keeps its inode, and the kernel's uprobe on it with it; a second event on
// the same inode and offset would count every hit twice. Thread-safe.
std::string FileIdentity(const std::string& path);

// The "MAJOR:MINOR:INODE" (decimal) that /proc/PID/maps shows for a mapping of `path`, found by
// mapping its first page (PROT_READ, MAP_PRIVATE) and reading /proc/self/maps: on overlayfs
// (containers) a mapping is of the underlying file, whose device differs from what stat(2) of
// the overlay path says (Documentation/filesystems/overlayfs.rst "Inode properties"), and a
// uprobe is bound to that underlying inode (d_real_inode). "" when the file cannot be mapped.
// Thread-safe.
std::string MappedIdentity(const std::string& path);
// The "MAJOR:MINOR:INODE" identities of the file-backed mappings in /proc/PID/maps text
// (proc(5): "address perms offset dev inode pathname", dev as hex "MAJOR:MINOR"); anonymous
// mappings (inode 0) are skipped. Pure.
std::vector<std::string> ParseMapsIdentities(std::string_view maps);
// The identities of every file mapped by some process now (/proc/*/maps; processes that exit or
// cannot be read meanwhile are skipped). Thread-safe; reads every process's maps.
std::set<std::string> MappedFilesNow();

// One line of <tracefs>/kprobe_profile (Documentation/trace/kprobetrace.rst "Event Profiling"):
// the event's name (without its group), its hits and its misses (kprobe_profile's third column:
// for a kprobe, hits the kernel skipped (kprobe recursion); for a kretprobe also returns lost
// because all MAXACTIVE instances were in use, kernel/trace/trace_kprobe.c
// probes_profile_seq_show).
struct KprobeProfileRow {
  std::string event;
  uint64_t hits = 0;
  uint64_t misses = 0;
};
// Parses kprobe_profile's text; malformed lines are skipped. Pure.
std::vector<KprobeProfileRow> ParseKprobeProfile(std::string_view text);

// The default MAXACTIVE of a kretprobe event ("maxactive" in the config): how many calls of the
// function may be in flight at once (blocked callers included) before its returns are missed.
// The kernel's own default is num_possible_cpus() (2 x that, at least 10, on preemptible
// kernels: kernel/kprobes.c register_kretprobe), far fewer than the callers a blocking function
// has; each instance costs the kernel ~100 bytes.
// At most kMaxActiveLimit (tracefs/probe_events.h).
inline constexpr uint32_t kDefaultMaxactive = 1024;

// Held by every plan that opens a probe event: while one is held the event stays.
class ProbeHandle {
 public:
  ProbeHandle(EventName event, ProbeEventSpec spec, std::string file_identity = "")
      : event_(std::move(event)), spec_(std::move(spec)), file_identity_(std::move(file_identity)) {}
  const EventName& event() const { return event_; }
  // The event's definition: its kind and fetch args (the bpf engine computes its fields from them).
  const ProbeEventSpec& spec() const { return spec_; }
  // FileIdentity of a uprobe's binary when the event was defined ("" for kprobes).
  const std::string& file_identity() const { return file_identity_; }

 private:
  EventName event_;
  ProbeEventSpec spec_;
  std::string file_identity_;
};

// What ProbeRegistry::Acquire returns for one probe of the config: the event on the file its
// path names now, and the events of the same probe on files the path named before (a binary
// replaced by a package upgrade) that some process still maps. Each counts the processes running
// its file; a metric counts them all.
struct ProbeVariants {
  std::shared_ptr<const ProbeHandle> current;
  std::vector<std::shared_ptr<const ProbeHandle>> replaced;  // oldest first
};

// The probe events of this process: one group (ProbeGroupForPid(getpid())), each definition once,
// shared by every plan that uses it (a reload keeps the event its unchanged metrics read). An
// event whose last handle is gone is removed by RemoveUnreferenced, which the daemon calls after
// a reload and after stopping; whatever is left goes when the registry is destroyed (at exit).
// Construction removes the events crashed runs left behind (RemoveStaleProbeEvents).
//
// A replaced binary: a uprobe stays bound to the inode it was defined on. When the file at a
// probe's path is another inode than the one its event was defined on, Acquire defines the probe
// again on the new file and also returns the earlier file's event while a process maps that file
// (MappedFilesNow, checked at each Acquire: each reload, and each RefreshReason that says so).
// Once no process maps it, the next plan no longer holds it and RemoveUnreferenced removes it.
// Thread-safe.
class ProbeRegistry {
 public:
  // `mapped`: the identities (MappedIdentity) of the files processes map now; MappedFilesNow by
  // default (tests inject their own).
  explicit ProbeRegistry(const Tracefs& tracefs, std::function<std::set<std::string>()> mapped = MappedFilesNow);
  // The process-wide registry for `tracefs` (created on first use; the first tracefs wins; it keeps
  // a copy).
  static ProbeRegistry& Get(const Tracefs& tracefs);
  // The process-wide registry if some Get created it, else null (nothing to remove).
  static ProbeRegistry* IfCreated();

  // The events of the probe `key` (the config's probe: its event name, args and maxactive, as the
  // caller spells them; the same key on a replaced binary is the same probe): `spec` (its group
  // and event names are filled in here) on the file at spec.path, created when no live event has
  // the same definition on the same file, and the live events of `key` on files the path named
  // before that some process still maps. `file_identity`: FileIdentity(spec.path) taken before
  // `spec` was resolved from the file's ELF ("" for kprobes). Errors: ProbeEvents::Create's;
  // Unavailable when the path names another file after the event was created than
  // `file_identity` (replaced meanwhile: the offset may not be the new file's; the event is
  // removed again).
  StatusOr<ProbeVariants> Acquire(const std::string& key, ProbeEventSpec spec, const ProbeRef& probe,
                                  const std::string& file_identity);
  // Removes the events no handle holds any more. An event still open elsewhere (EBUSY) stays for
  // the next call. Returns how many were removed.
  int RemoveUnreferenced();
  // Why a plan built now would hold other probe events than the live ones ("" when it would
  // not): the file at some held uprobe's path is another one than the newest event of its probe
  // was defined on (a replaced binary), or no process maps the file of a held event of a
  // replaced binary any more. Stats each probed path; reads /proc/*/maps only while events of
  // replaced binaries are held.
  std::string RefreshReason();
  // The next Acquire reads the mapped files again (BuildPlan calls it first: one reading of
  // /proc/*/maps serves all the probes of a plan).
  void ForgetMappedFiles();
  const std::string& group() const { return events_.group(); }

 private:
  struct Entry {
    EventName event;
    std::weak_ptr<const ProbeHandle> handle;
    std::string key;              // the probe (Acquire's key)
    std::string path;             // uprobes: the binary's path
    std::string identity;         // FileIdentity(path) when defined ("" for kprobes)
    std::string mapped_identity;  // MappedIdentity(path) when defined
    ProbeEventSpec spec;
  };
  // The mapped files (mapped_), read once after each ForgetMappedFiles. Under mu_.
  const std::set<std::string>& Mapped();
  std::mutex mu_;
  const Tracefs tracefs_;                                // events_ points at it
  ProbeEvents events_;                                   // guarded by mu_
  std::map<std::string, Entry> by_line_;                 // definition line + file identity -> its event; guarded by mu_
  std::map<std::string, std::string> current_identity_;  // key -> identity of its newest event; guarded by mu_
  std::function<std::set<std::string>()> mapped_fn_;
  std::set<std::string> mapped_;  // guarded by mu_
  bool mapped_read_ = false;      // guarded by mu_
};

}  // namespace tpe
