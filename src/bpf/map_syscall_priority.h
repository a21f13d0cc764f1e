// Map syscalls that no task preempts, for kernels whose code is preemptible (PREEMPT_RT, full
// preemption).
//
// The bpf(2) map commands that touch values (BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM,
// BPF_MAP_DELETE_ELEM, BPF_MAP_LOOKUP_AND_DELETE_ELEM and the batch commands) hold bpf_prog_active
// on their CPU while they run (kernel/bpf/syscall.c, hashtab.c: bpf_disable_instrumentation(), a
// migrate_disable() and this_cpu_inc(bpf_prog_active)); BPF_MAP_GET_NEXT_KEY does not (rcu only).
// A tracepoint program whose event fires on that CPU meanwhile is skipped (trace_call_bpf: "since
// some bpf program is already running on this cpu"), counted as a miss only from Linux 6.7. Where
// kernel code is not preemptible, only an interrupt can run there meanwhile; where it is, any task
// that preempts the syscall can, for as long as it runs: a getppid() loop preempting a scrape lost
// its calls. A thread at SCHED_FIFO priority 99 is preempted by no SCHED_OTHER or lower SCHED_FIFO
// task (sched(7)) — on PREEMPT_RT neither by the threaded interrupt handlers (SCHED_FIFO 50) — so a
// map syscall made at that priority runs as on a kernel whose code is not preemptible: only hard
// interrupts, SCHED_DEADLINE tasks and the stop class come between. The commands above take no
// sleeping lock in that window on a preallocated map (the hash map's bucket lock is a raw spinlock
// there; copies to user space happen after bpf_enable_instrumentation), so they do not block in it.
//
// Use: the plan calls EnableFifoMapSyscalls() once on such a kernel, before capabilities are
// dropped; from then on every FifoMapSyscall scope (around each of the commands above; KernelMap
// and the engine's direct map calls open one) raises its thread to SCHED_FIFO 99 and puts back the
// thread's policy, priority and nice value at its end. Two extra sched_setscheduler(2) calls per
// map command, only where enabled.
//
// Thread-safety: any thread; the scope changes only the calling thread's policy (Linux policies
// are per thread: sched_setscheduler(0, ...) names the caller).
#pragma once

#include <functional>

#include "common/status.h"

namespace tpe::bpf {

// The SCHED_FIFO priority map syscalls run at: sched_get_priority_max(SCHED_FIFO) on Linux.
inline constexpr int kMapSyscallFifoPriority = 99;

// Raises RLIMIT_RTPRIO to kMapSyscallFifoPriority (soft and hard, where the hard limit is lower:
// needs CAP_SYS_RESOURCE; so that an unprivileged thread may raise itself after capabilities are
// dropped, sched(7) "RLIMIT_RTPRIO"), then raises and restores the calling thread once. Ok: every
// FifoMapSyscall scope raises from then on. Otherwise nothing is enabled and the error says why
// (EPERM: neither CAP_SYS_NICE nor RLIMIT_RTPRIO >= 99, or systemd's RestrictRealtime=yes).
Status EnableFifoMapSyscalls();
// Whether EnableFifoMapSyscalls succeeded in this process.
bool FifoMapSyscallsEnabled();

// Raises the calling thread to SCHED_FIFO kMapSyscallFifoPriority for its lifetime when enabled;
// a no-op otherwise. A raise the kernel refuses (CAP_SYS_NICE dropped where RLIMIT_RTPRIO could
// not be raised) leaves the thread as it was, is counted (FifoRaiseFailures) and logged once; the
// syscall still runs.
class FifoMapSyscall {
 public:
  FifoMapSyscall();
  ~FifoMapSyscall();
  FifoMapSyscall(const FifoMapSyscall&) = delete;
  FifoMapSyscall& operator=(const FifoMapSyscall&) = delete;

 private:
  bool raised_ = false;
  int policy_ = 0;
  int priority_ = 0;
};

// Raises refused after EnableFifoMapSyscalls succeeded.
uint64_t FifoRaiseFailures();

// The seam for unit tests: while set, every sched_setscheduler(2) these functions make calls
// `fn(policy, priority)` instead (0 or an errno), and sched_getscheduler/sched_getparam read
// SCHED_OTHER 0. Reset with nullptr; EnableFifoMapSyscallsForTesting(false) turns the mode off.
using SchedFn = std::function<int(int policy, int priority)>;
void SetSchedulerForTesting(SchedFn fn);
void EnableFifoMapSyscallsForTesting(bool on);

}  // namespace tpe::bpf
