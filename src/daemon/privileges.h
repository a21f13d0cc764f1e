// Dropping privileges once every perf event is open (--security.drop-capabilities).
//
// Capabilities belong to each thread, not to the process: capset(2) (libcap's cap_set_proc)
// changes the calling thread only, and a thread starts with its creator's sets
// (capabilities(7), "Thread versus process capabilities"). So the drop is made while the process
// has one thread — after the perf events are opened and the BPF programs attached, before the
// reader, sweeper and HTTP threads start — and every thread made afterwards starts with none.
// DropAllCapabilities refuses to run when other threads exist (they would keep theirs).
//
// What keeps working without capabilities: the perf event and BPF fds and the mapped rings
// opened before (counting, sampling, map reads, scraping); /proc/kallsyms, opened before the
// drop (HoldKallsymsOpen), so profiles and "ksym" labels still name kernel symbols — the kernel
// decides whether kallsyms shows addresses when the file is opened (kallsyms_open); reloads
// that need no new perf event. What does not:
//  - a reload that needs a new perf event or BPF program fails (PermissionDenied, counted in
//    tracepoint_exporter_config_reloads_total{result="failure"}) and the running config stays:
//    restart the service to change it; the same for a probe refresh;
//  - a CPU that comes back online is not traced again (its perf events cannot be reopened);
//  - BPF run-time stats windows (BPF_ENABLE_STATS needs CAP_SYS_ADMIN):
//    tracepoint_exporter_bpf_program_cpu_seconds_total is not exported;
//  - /proc/PID/maps of other users' processes (ptrace access mode checks: CAP_SYS_PTRACE): the
//    user frames of those that ran before the daemon started stay unnamed (processes started
//    later are learnt from their mmap records);
//  - listening on a port below 1024 (CAP_NET_BIND_SERVICE): the HTTP server starts after the drop.
//
// Source: capabilities(7), capset(2), prctl(2) PR_SET_NO_NEW_PRIVS and PR_CAP_AMBIENT; done with
// libcap.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace tpe {

// Threads of this process now (the "Threads:" line of /proc/self/status). Errors: the file's.
StatusOr<size_t> ThreadCount();

// Opens /proc/kallsyms for good (HoldKallsymsOpen), then clears every capability of the
// calling thread (effective, permitted, inheritable), the ambient set, and sets no_new_privs.
// Call it while the process has one thread. Errors: Internal naming the threads found when
// there are others (nothing is dropped then), or naming the failing call.
Status DropAllCapabilities();

}  // namespace tpe
