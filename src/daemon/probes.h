// Probe events from the config: uprobes, uretprobes, USDT probes, kprobes and kretprobes, named as
// bpftrace names them, turned into dynamic trace events (tracefs/probe_events.h) that the rest of
// the plan opens like any tracepoint (DESIGN.md "probes beyond tracepoints").
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

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "elf/usdt.h"
#include "tracefs/probe_events.h"
#include "tracefs/tracefs.h"

namespace tpe {

// Whether `event` names a probe (starts with uprobe:, uretprobe:, usdt:, kprobe:, kretprobe:).
bool IsProbeEvent(const std::string& event);

// A parsed probe name.
struct ProbeRef {
  ProbeKind kind = ProbeKind::kUprobe;
  bool usdt = false;
  std::string path;      // uprobes
  std::string symbol;    // uprobes: the function; kprobes: the kernel function
  std::string provider;  // usdt
  std::string name;      // usdt
  uint64_t offset = 0;   // bytes into the function ("+OFFSET", decimal or 0x hex)
};
// Parses a probe name (above). Errors: InvalidArgument quoting `event` and the valid forms.
StatusOr<ProbeRef> ParseProbeRef(const std::string& event);

// One "args" entry: field name -> "argN[:TYPE]" | "retval[:TYPE]".
struct ProbeArg {
  std::string field;
  bool retval = false;
  int index = 0;     // argN
  std::string type;  // "" = the default
};
// Errors: InvalidArgument naming the field and what is valid (a field name
// [A-Za-z_][A-Za-z0-9_]* of at most 32 characters, not common_* or __probe_*; argN with N 0-5, or
// 0-11 for USDT; retval only on return probes; TYPE as above).
StatusOr<ProbeArg> ParseProbeArg(const ProbeRef& probe, const std::string& field, const std::string& spec);

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
// symbol or provider_name, cut to fit) and 8 hex digits of a hash of the definition and
// `file_identity` (FileIdentity of a uprobe's binary), so equal definitions on the same file
// share one event and different ones never collide in practice. Pure.
std::string ProbeEventName(const ProbeRef& probe, const ProbeEventSpec& spec, const std::string& file_identity = "");
// "st_dev:st_ino:mtime_ns" of `path` ("" when it cannot be stat'ed): the kernel binds a uprobe to
// the file's inode when it is defined, so a binary replaced under the same path (a package
// upgrade) needs a new event, which a changed identity gives. Thread-safe.
std::string FileIdentity(const std::string& path);

// Held by every plan that opens a probe event: while one is held the event stays.
class ProbeHandle {
 public:
  ProbeHandle(EventName event, ProbeEventSpec spec) : event_(std::move(event)), spec_(std::move(spec)) {}
  const EventName& event() const { return event_; }
  // The event's definition: its kind and fetch args (the bpf engine computes its fields from them).
  const ProbeEventSpec& spec() const { return spec_; }

 private:
  EventName event_;
  ProbeEventSpec spec_;
};

// The probe events of this process: one group (ProbeGroupForPid(getpid())), each definition once,
// shared by every plan that uses it (a reload keeps the event its unchanged metrics read). An
// event whose last handle is gone is removed by RemoveUnreferenced, which the daemon calls after
// a reload and after stopping; whatever is left goes when the registry is destroyed (at exit).
// Construction removes the events crashed runs left behind (RemoveStaleProbeEvents).
// Thread-safe.
class ProbeRegistry {
 public:
  explicit ProbeRegistry(const Tracefs& tracefs);
  // The process-wide registry for `tracefs` (created on first use; the first tracefs wins; it keeps
  // a copy).
  static ProbeRegistry& Get(const Tracefs& tracefs);
  // The process-wide registry if some Get created it, else null (nothing to remove).
  static ProbeRegistry* IfCreated();

  // The event for `spec` (its group and event names are filled in here), created when no live
  // one has the same definition. Errors: ProbeEvents::Create's.
  StatusOr<std::shared_ptr<const ProbeHandle>> Acquire(ProbeEventSpec spec, const ProbeRef& probe);
  // Removes the events no handle holds any more. An event still open elsewhere (EBUSY) stays for
  // the next call. Returns how many were removed.
  int RemoveUnreferenced();
  const std::string& group() const { return events_.group(); }

 private:
  struct Entry {
    EventName event;
    std::weak_ptr<const ProbeHandle> handle;
  };
  std::mutex mu_;
  const Tracefs tracefs_;                 // events_ points at it
  ProbeEvents events_;                    // guarded by mu_
  std::map<std::string, Entry> by_line_;  // definition line + file identity -> its event; guarded by mu_
};

}  // namespace tpe
