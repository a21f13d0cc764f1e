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

// The initial pid namespace's inode number (PROC_PID_INIT_INO, include/linux/proc_ns.h).
inline constexpr uint64_t kInitPidNamespace = 0xEFFFFFFCu;
// This process's pid namespace: the inode of /proc/self/ns/pid (kInitPidNamespace when
// unreadable). Thread-safe.
uint64_t CurrentPidNamespace();

// The start time of process `pid` (of this process's pid namespace; 0 means this process):
// field 22 of /proc/<pid>/stat, "starttime", in clock ticks after boot (proc(5)). nullopt when it
// cannot be read (no such process, or /proc hides it). Thread-safe.
std::optional<uint64_t> ProcessStartTime(int pid);

// The probe group of the daemon with process id `pid`, started at `start_time`
// (ProcessStartTime), in pid namespace `pidns`:
//   "tpe_<pid>_s<start_time>"          in the initial pid namespace,
//   "tpe_<pid>_s<start_time>_<pidns>"  in any other (a container's daemon is often pid 1: the
//                                      namespace keeps its group apart from the host's pid 1
//                                      and from other containers').
// A process with that pid and that start time is the owner whatever its name; any other is not
// (the pid was reused). At most 4 + 10 + 2 + 20 + 1 + 20 = 57 characters (the kernel allows 63).
// Without a start time (nullopt: it could not be read), the format of earlier versions:
// "tpe_<pid>" or "tpe_<pid>_<pidns>", whose owner is recognised by its name (ProbeOwnerAlive).
// Pure.
std::string ProbeGroupName(int pid, std::optional<uint64_t> start_time, uint64_t pidns);
// ProbeGroupName(pid, ProcessStartTime(pid), CurrentPidNamespace()).
std::string ProbeGroupForPid(int pid);

// The owner named by a group ProbeGroupName makes (either format).
struct ProbeGroupOwner {
  int pid = 0;                         // in namespace `pidns`
  std::optional<uint64_t> start_time;  // nullopt: the earlier format, without one
  uint64_t pidns = kInitPidNamespace;
  bool operator==(const ProbeGroupOwner&) const = default;
};
// nullopt for any other name (including non-canonical ones such as "tpe_01234", "tpe_1x",
// "tpe_1_s01" or "tpe_1_<the initial namespace>"). Pure; thread-safe.
std::optional<ProbeGroupOwner> ParseProbeGroup(std::string_view group);
// The pid of ParseProbeGroup(group). Pure; thread-safe.
std::optional<int> PidOfProbeGroup(std::string_view group);

// The event a line read back from uprobe_events/kprobe_events defines, e.g.
//   "p:tpe_1234/m3 /bin/x:0x0000000000001139 a0=%di:u64" -> {"tpe_1234", "m3"}
//   "r16:kprobes/ret do_nanosleep" -> {"kprobes", "ret"}  (kretprobe with maxactive)
// Pure; thread-safe. Errors: InvalidArgument quoting the line.
StatusOr<EventName> ParseProbeEventsLine(std::string_view line);

// What this process's /proc shows of the processes alive, for judging whose probe groups are
// stale (ReadProcessTable).
struct ProcessTable {
  uint64_t own_pidns = kInitPidNamespace;  // CurrentPidNamespace()
  // The pid namespaces at least one process lives in: the inodes of /proc/<pid>/ns/pid. Filled
  // only in the initial namespace, where /proc shows every process.
  std::set<uint64_t> live_pidns;
  // False when the scan was not made, or some process's namespace could not be read
  // (/proc/<pid>/ns/pid is EACCES to a reader ptrace_may_access() refuses) and its NSpid does not
  // place it in the initial namespace: then no namespace is taken for dead and no pid for gone in
  // another namespace.
  bool complete = false;
  // {pid namespace, pid there} -> pid here, for processes of other namespaces: their
  // /proc/<pid>/status "NSpid:" line (Linux 4.1) ends with their pid in their own namespace.
  std::map<std::pair<uint64_t, int>, int> ns_pids;
  // The namespaces of `ns_pids` (at least one of their processes had an NSpid line).
  std::set<uint64_t> mapped_pidns;
};

// From the text of uprobe_events or kprobe_events: the events of groups ParseProbeGroup reads,
// other than `own_group`, whose owner is gone. Other tools' groups and unparsable lines are never
// selected. A group of
//  - this process's pid namespace (procs.own_pidns) is stale when `owner_alive(pid, owner)` is
//    false;
//  - another namespace, judged only from the initial namespace: stale when that namespace has no
//    process any more (not in procs.live_pidns, procs.complete); when it has some, and its pids
//    are mapped (procs.mapped_pidns), stale when no process has the owner's pid there, or
//    `owner_alive(pid here, owner)` is false; otherwise left alone.
// Pure (but for calling `owner_alive`); thread-safe.
std::vector<EventName> SelectStaleProbeEvents(std::string_view events_text, const std::string& own_group,
                                              const ProcessTable& procs,
                                              const std::function<bool(int pid, const ProbeGroupOwner&)>& owner_alive);

// ProcessTable of this process. `other_namespaces`: also scan /proc for the namespaces and NSpid
// of every process (only in the initial namespace; otherwise just own_pidns). Thread-safe.
ProcessTable ReadProcessTable(bool other_namespaces);

// Whether process `pid` (in this process's pid namespace) exists and is a tracepoint_exporter:
// its /proc/<pid>/comm is "tracepoint_expo" (the name truncated to 15 characters) or its
// /proc/<pid>/exe is named tracepoint_exporter. A process that exists but whose comm and exe
// cannot be read counts as alive (never remove what may be in use). A zombie (state Z or X in
// /proc/<pid>/stat: dead, not yet reaped) is not alive. The rule for groups of the earlier format
// (no start time). Thread-safe.
bool ProbeOwnerAlive(int pid);
// Whether process `pid` (in this process's pid namespace) is `owner`: for an owner with a start
// time, the process exists, is not a zombie and started then (ProcessStartTime); when its start
// time cannot be read, or it lives in another time namespace (/proc/<pid>/ns/time differs, Linux
// 5.6: its start times are shifted), it counts as alive. Without a start time: ProbeOwnerAlive(pid).
// Thread-safe.
bool ProbeOwnerAlive(int pid, const ProbeGroupOwner& owner);

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
