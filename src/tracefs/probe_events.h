// Creating and removing dynamic probe events (uprobes, uretprobes, kprobes, kretprobes) through
// tracefs.
//
// Source: Documentation/trace/uprobetracer.rst and Documentation/trace/kprobetrace.rst ("Synopsis
// of kprobe_events", "Types"), and the "uprobe_events" section of <tracefs>/README, which lists
// the fetch-arg syntax the running kernel accepts. A definition line written to
// <tracefs>/uprobe_events or <tracefs>/kprobe_events becomes an event under
// events/<group>/<event>/ with an `id` and a `format` like any tracepoint, so everything from
// format/ up opens it unchanged (PERF_TYPE_TRACEPOINT with that id).
//
// Kernel facts this code respects (verified on 6.18, kernel/trace/trace_probe.c, trace_uprobe.c):
//  - Those files must be opened O_APPEND, never O_TRUNC: opening them with O_TRUNC removes every
//    probe event of every tool on the machine.
//  - Group and event names are [A-Za-z_][A-Za-z0-9_]* of at most 63 characters
//    (MAX_EVENT_NAME_LEN 64 counts the NUL); argument names at most 32 (MAX_ARG_NAME_LEN).
//  - A refused definition leaves its reason in <tracefs>/error_log (Linux 5.4+), except a few that
//    only go to dmesg (e.g. "Reference counter offset mismatch" when another uprobe at the same
//    file offset has another ref_ctr offset).
//  - An event cannot be removed while a perf event (or BPF program) is open on it: EBUSY.
//  - Writing a definition whose group/event already exists with the same arguments silently adds
//    a second probe location to that event; ProbeEvents::Create refuses existing names instead.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tracefs/probe_groups.h"
#include "tracefs/tracefs.h"

namespace tpe {

// What a probe event is attached to. Uprobes live in <tracefs>/uprobe_events (CONFIG_UPROBE_EVENTS),
// kprobes in <tracefs>/kprobe_events (CONFIG_KPROBE_EVENTS).
enum class ProbeKind {
  kUprobe,     // "p:" at a file offset of a binary: fires on entering that instruction
  kUretprobe,  // "r:" at a function's file offset: fires when the function returns ($retval)
  kKprobe,     // "p:" at a kernel symbol + offset
  kKretprobe,  // "r:" at a kernel function: fires when it returns ($retval)
};

// "uprobe", "uretprobe", "kprobe", "kretprobe".
const char* ProbeKindName(ProbeKind kind);

// One probe event definition. Every string is checked by ProbeEventLine before it reaches the
// kernel.
struct ProbeEventSpec {
  ProbeKind kind = ProbeKind::kUprobe;
  std::string group;  // e.g. "tpe_1234" (ProbeGroupForPid); [A-Za-z_][A-Za-z0-9_]*, <= 63 chars
  std::string event;  // e.g. "m3_entry"; [A-Za-z_][A-Za-z0-9_]*, <= 63 chars
  // Uprobes: absolute path of the binary or library (the kernel resolves it to an inode when the
  // definition is written). Kprobes: empty.
  std::string path;
  // Uprobes: file offset of the probed instruction in `path` (not a virtual address). Kprobes:
  // byte offset into `symbol` (0 for kretprobes).
  uint64_t offset = 0;
  // Uprobes: file offset of a USDT semaphore (an unsigned short the kernel increments in every
  // process mapping `path` while the probe is enabled), 0 for none. Linux 4.20+.
  uint64_t ref_ctr_offset = 0;
  // Kprobes: the kernel function, optionally "module:function". Uprobes: empty.
  std::string symbol;
  // Field name -> fetch arg (FETCHARGS and "Types" in Documentation/trace/kprobetrace.rst and
  // uprobetracer.rst), e.g. {"a0", "%di:u64"}, {"s", "+0(%si):ustring"}, {"rv", "$retval:s32"}.
  // Each becomes a field of the event's format, in this order.
  std::vector<std::pair<std::string, std::string>> args;
  // Kretprobes: MAXACTIVE, the return instances the kernel preallocates ("r<MAXACTIVE>:", at most
  // kMaxActiveLimit); 0 = the kernel's default (num_possible_cpus(), kernel/kprobes.c). Calls in
  // flight beyond it are missed returns (<tracefs>/kprobe_profile, third column).
  uint32_t maxactive = 0;
};
// KRETPROBE_MAXACTIVE_MAX (kernel/trace/trace_kprobe.c).
inline constexpr uint32_t kMaxActiveLimit = 4096;

// The definition line for `spec` (without the trailing newline), e.g.
//   "p:tpe_1234/m3_entry /bin/x:0x1139 a0=%di:u64"       (uprobe)
//   "r:tpe_1234/m3_ret /bin/x:0x1139(0x4010) rv=$retval:s64" (uretprobe with a USDT semaphore)
//   "p:tpe_1234/sleep do_nanosleep+16 a=%di"              (kprobe)
//   "r64:tpe_1234/sleep_ret do_nanosleep rv=$retval"       (kretprobe with maxactive 64)
// Pure; thread-safe.
// Errors: InvalidArgument naming the bad piece and what is valid: names ([A-Za-z_][A-Za-z0-9_]*,
// lengths above), a path that is not absolute or holds whitespace, control characters, '#',
// quotes or backslashes, a fetch arg outside [A-Za-z0-9_%$@+-().:[]/] (so `\imm` and `\"str"`
// are not expressible), duplicate or reserved argument names (common_*, __probe_*), more than
// 128 arguments, $retval on an entry probe, a kretprobe offset, a path/symbol on the wrong kind,
// a maxactive on another kind than a kretprobe or above kMaxActiveLimit.
// Nothing written can start a second definition (no newline, no space inside a piece).
StatusOr<std::string> ProbeEventLine(const ProbeEventSpec& spec);

// The event a line read back from uprobe_events/kprobe_events defines, e.g.
//   "p:tpe_1234/m3 /bin/x:0x0000000000001139 a0=%di:u64" -> {"tpe_1234", "m3"}
//   "r16:kprobes/ret do_nanosleep" -> {"kprobes", "ret"}  (kretprobe with maxactive)
// Pure; thread-safe. Errors: InvalidArgument quoting the line.
StatusOr<EventName> ParseProbeEventsLine(std::string_view line);

// The kernel's reason for refusing `command` from the text of <tracefs>/error_log: the message of
// the last entry whose "Command:" is `command`, plus the piece the kernel's caret points at, e.g.
// "Invalid register name (at \"%zz:u64\")". nullopt when no entry is about `command` (error_log
// keeps only the last 10 entries of all writers). Pure; thread-safe.
std::optional<std::string> KernelErrorFor(std::string_view error_log, std::string_view command);

// What <tracefs>/README says the running kernel's probe events accept. The README is the
// kernel's readme_msg (kernel/trace/trace.c), which the patch adding a probe feature extends:
//   "   place (uprobe): <path>:<offset>[%return][(ref_ctr_offset)]"  (ref_ctr_offset: Linux 4.20,
//                                                                     commit 1cc33161a83d)
//   "\t     type: s8/16/32/64, u8/16/32/64, x8/16/32/64, char, string, symbol,"
//   "\t           b<bit-width>@<bit-offset>/<container-size>, ustring,"  (commit 88903c464321)
// where Linux 4.19 has "\t    place: <path>:<offset>" and no ustring.
struct ProbeReadme {
  bool probe_synopsis = false;  // the kprobe_events/uprobe_events synopsis (its "type:" line) is there
  bool uprobe_ref_ctr = false;  // the uprobe place line shows "(ref_ctr_offset)"
  // The fetch-arg types of the "type:" lines as written: "s8/16/32/64", "string", "ustring", ...
  std::vector<std::string> types;
  bool HasType(std::string_view type) const;
};
// Parses the text of <tracefs>/README; a README without the probe synopsis (a kernel without
// CONFIG_KPROBE_EVENTS and CONFIG_UPROBE_EVENTS) gives probe_synopsis false. Pure; thread-safe.
ProbeReadme ParseProbeReadme(std::string_view readme);

// Whether the kernel `readme` describes takes `spec`: Unavailable, naming the event, what it
// needs, and `readme_path`, for
//  - a ref_ctr_offset (a USDT semaphore) when the uprobe place has no "(ref_ctr_offset)": such a
//    kernel reads "PATH:OFFSET(REF)" as a bad offset, and the traced program, whose semaphore
//    nobody sets, would skip the probe anyway;
//  - a fetch arg of type ustring when the types lack it (kprobes have no other way to read a
//    user-space string; uprobes read user memory with "string", kernel/trace/trace_uprobe.c).
// A readme without the probe synopsis refuses nothing (unknown: the kernel decides). Pure.
Status CheckProbeSupport(const ProbeEventSpec& spec, const ProbeReadme& readme, const std::string& readme_path);

// Owns the probe events it created in one group: creates them, removes them one by one, and
// removes whatever is left in its destructor (errors there are logged, not returned; call
// RemoveAll first to see them). Close every perf event / BPF program on an event before it is
// removed, or the kernel refuses (EBUSY). Move-only; a moved-from object owns nothing.
//
// Thread-safety: one object is used by one thread at a time. The kernel serializes writes to the
// events files, so distinct objects (and processes) may create and remove concurrently.
class ProbeEvents {
 public:
  // `tracefs` must outlive this object; `group` is the group every Create uses (normally
  // ProbeGroupForPid(getpid())). Nothing is written until Create.
  ProbeEvents(const Tracefs& tracefs, std::string group);
  ~ProbeEvents();
  ProbeEvents(ProbeEvents&& o) noexcept;
  ProbeEvents& operator=(ProbeEvents&& o) noexcept;
  ProbeEvents(const ProbeEvents&) = delete;
  ProbeEvents& operator=(const ProbeEvents&) = delete;

  const std::string& group() const { return group_; }

  // Appends ProbeEventLine(spec) to uprobe_events or kprobe_events (open O_WRONLY | O_APPEND |
  // O_CLOEXEC) and returns {group, event}; after it, tracefs.ReadId/ReadFormat work on that name.
  // An empty spec.group means this object's group; another group is InvalidArgument.
  // Errors: InvalidArgument from ProbeEventLine, or when events/<group>/<event> already exists;
  // Unavailable from CheckProbeSupport with <root>/README (read when the spec has a
  // ref_ctr_offset or a ustring argument);
  // Unavailable when the kernel has no such interface ("kprobes are not available on this kernel
  // (no <root>/kprobe_events; CONFIG_KPROBE_EVENTS)", likewise uprobes); PermissionDenied (root /
  // CAP_SYS_ADMIN needed); otherwise the kernel's own reason from error_log (KernelErrorFor) with
  // the code of the write's errno (EINVAL: InvalidArgument, ENOENT: NotFound, ...), falling back
  // to strerror when error_log says nothing (kernels before 5.4, dmesg-only refusals).
  StatusOr<EventName> Create(const ProbeEventSpec& spec);

  // Writes "-:<group>/<event>" for an event this object created and forgets it.
  // Errors: InvalidArgument when this object did not create `event`; Unavailable when it is still
  // in use (EBUSY: a perf event or BPF program is open on it; the event stays owned, retry after
  // closing them); NotFound when it is already gone (it is forgotten); others with the kernel's
  // reason as in Create.
  Status Remove(const EventName& event);

  // Removes every event this object created, newest first, trying all of them; returns the first
  // error (the events that failed stay owned).
  Status RemoveAll();

  // The events created and not yet removed, oldest first.
  std::vector<EventName> events() const;

 private:
  struct Owned {
    EventName name;
    std::string file;  // "uprobe_events" or "kprobe_events"
  };
  const Tracefs* tracefs_;
  std::string group_;
  std::vector<Owned> owned_;
};

// At start-up: removes the probe events that crashed runs left behind, from uprobe_events and
// kprobe_events (a missing file is skipped): every event SelectStaleProbeEvents selects with
// ReadProcessTable and ProbeOwnerAlive, i.e. groups other than `own_group` whose owner is gone
// (another process has its pid, or none), and from the initial pid namespace also the groups of
// namespaces no process lives in any more (their /proc/PID/root paths pin a container's root
// until the events go). Other tools' events and live daemons' groups are never touched. An event
// that cannot be removed (EBUSY: someone still has it open) is logged and skipped.
// Returns how many events were removed.
// Errors: PermissionDenied / Internal when an events file exists but cannot be read.
StatusOr<int> RemoveStaleProbeEvents(const Tracefs& tracefs, const std::string& own_group);

// Removes every event of `group` from uprobe_events and kprobe_events: at start-up, the events a
// dead process with this process's pid (and namespace) left in the group this process is about
// to use. Returns how many were removed. Errors: as RemoveStaleProbeEvents; an event still open
// (EBUSY) is an error naming it.
StatusOr<int> RemoveProbeGroup(const Tracefs& tracefs, const std::string& group);

}  // namespace tpe
