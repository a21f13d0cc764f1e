// Probe groups and their owners: the group a daemon creates its probe events in names the daemon
// (pid, start time, pid namespace), so that a later daemon can tell a group whose owner is gone
// (a crash left its events behind) from one that is in use. Names, parsing, the process table of
// /proc and the staleness rule; the events themselves are probe_events.h's.
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

#include "tracefs/tracefs.h"

namespace tpe {

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

}  // namespace tpe
