// Loading and attaching the bpf engine's programs with libbpf's low-level API (no object files,
// no BTF): bpf_map_create(), bpf_prog_load() with the verifier log, and attachment through a
// PERF_TYPE_TRACEPOINT perf event and PERF_EVENT_IOC_SET_BPF (perf_event_open(2), "ioctl";
// include/uapi/linux/bpf.h).
//
// A tracepoint program joins the tracepoint's own program array and runs on every CPU's hits,
// whatever CPU its perf event was opened on, and whether that perf event is enabled or not
// (perf_trace_<event>() runs the array before it looks at the CPU's perf events). So each
// program is attached exactly once, through one disabled perf event on one CPU: the event never
// counts or samples anything, costs no perf output, and CPU hotplug does not touch the program.
// Closing that perf event detaches the program.
//
// Errors name what is missing: PermissionDenied mentions CAP_BPF and CAP_PERFMON (or
// CAP_SYS_ADMIN); a verifier rejection is Internal with the verifier's log.
//
// Thread-safety: free functions; the fds they return belong to the caller.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/scoped_fd.h"
#include "common/status.h"

namespace tpe::bpf {

// Whether this process can run the bpf engine: a tracepoint program loads and a map is created.
// `reason` says why not ("CAP_BPF missing: ..."). Probed once per call (a few syscalls).
struct BpfSupport {
  bool available = false;
  std::string reason;
};
BpfSupport ProbeBpf();

// Kernel version facts the bpf engine depends on, probed once at startup (DetectBpfFeatures).
struct BpfFeatures {
  std::string release;       // uname -r
  int major = 0, minor = 0;  // parsed from `release` (0.0 when unparsable)
  bool preempt_rt = false;   // uname -v has PREEMPT_RT, or /sys/kernel/realtime is 1
  // Kernel code can be preempted where the exporter's map syscalls run (PREEMPT_RT; CONFIG_PREEMPT,
  // "SMP PREEMPT" in uname -v; PREEMPT_DYNAMIC booted or switched to "full"). A map syscall holds
  // bpf_prog_active on its CPU under migrate_disable (bpf_disable_instrumentation), which is
  // preemptible there: a task that then hits a tracepoint on that CPU has its programs skipped
  // (trace_call_bpf), counted as misses only from Linux 6.7 (tracepoint_misses).
  bool preemptible_syscalls = false;
  // Where preemptible_syscalls: the exporter's map syscalls run at SCHED_FIFO 99, so no task
  // preempts one and no program is skipped for one (map_syscall_priority.h; DetectBpfFeatures()
  // enables it). fifo_map_syscalls_note: why not, when it could not be enabled.
  bool fifo_map_syscalls = false;
  std::string fifo_map_syscalls_note;
  bool probe_read_kernel_str = true;  // BPF_FUNC_probe_read_kernel(_str) (Linux 5.5)
  // bpf_prog_info.recursion_misses counts tracepoint programs (Linux 6.7, commit "bpf: Add
  // missed stats for tracepoint programs"; earlier kernels only count them for kprobe/trampoline
  // programs, so a tracepoint program's reads 0 whatever was skipped).
  bool tracepoint_misses = true;
  // Non-preallocated hash maps are safe in tracing programs from Linux 6.1 (bpf_mem_alloc) on
  // non-RT kernels. Below 6.1: 5.7-6.0 WARN_ONCE("trace type BPF program uses run-time
  // allocation") and taint; RT kernels refuse the load; earlier ones kmalloc in any tracepoint.
  bool runtime_alloc_safe = true;
  // BPF maps and programs are charged to RLIMIT_MEMLOCK (before Linux 5.11; later to the memory
  // cgroup). DetectBpfFeatures then raises RLIMIT_MEMLOCK to infinity when allowed.
  bool memlock_charged = false;
  // BPF_ATOMIC BPF_XCHG (Linux 5.12, kernel commit 5ffa25502b5a "bpf: Add instructions for
  // atomic_[cmp]xchg"): probe programs take their record's guard with it (probe_record.h).
  bool atomic_xchg = true;
  // BPF_MAP_LOOKUP_AND_DELETE_ELEM on hash maps (Linux 5.14, kernel commit 3e87f192b405 "bpf:
  // Add lookup_and_delete_elem support to hashtab"): the sweeps take exactly the entries they
  // remove (start_sweep.h, map_series.h).
  bool map_lookup_and_delete = true;
  // BPF_MAP_LOOKUP_BATCH and BPF_MAP_LOOKUP_AND_DELETE_BATCH on hash maps (Linux 5.6, kernel
  // commit 057996380a42 "bpf: Add batch ops to all htab bpf map").
  bool map_batch_ops = true;
  std::string memlock_note;  // what was done about RLIMIT_MEMLOCK ("" when not charged)
};
// uname(2), /sys/kernel/realtime, and probes that do what the engine will do, each through the
// fault seam below: a tiny program calling probe_read_kernel_str (the verifier refuses an unknown
// helper with EINVAL), one with BPF_XCHG (EINVAL), the two map commands on a 1-entry hash map
// (EINVAL/ENOTSUPP where the kernel lacks them for hash maps), whether a map is charged to
// RLIMIT_MEMLOCK (a 1-entry map created under a soft limit of 0: EPERM where it is charged), and
// on PREEMPT_RT whether a tracing program may use a map allocating at run time (the verifier
// refuses it there before 6.1; on other kernels before 6.1 it loads with a WARN that taints the
// kernel, so there the version decides). When memlock is charged, setrlimit(RLIMIT_MEMLOCK).
// Where kernel code is preemptible: EnableFifoMapSyscalls() (map_syscall_priority.h: raises
// RLIMIT_RTPRIO; from then on this process's map syscalls run at SCHED_FIFO 99), its result in
// fifo_map_syscalls(_note).
// Never fails; a probe that cannot decide (EPERM) leaves the version's answer.
BpfFeatures DetectBpfFeatures();
// The same for a given uname -r, uname -v and /sys/kernel/realtime content (tests: a fleet
// kernel's answers come through the fault seam).
BpfFeatures DetectBpfFeatures(const std::string& release, const std::string& version, const std::string& realtime);
// The pure part: the facts that follow from a release ("5.10.0-28-amd64"), a version string
// (uname -v) and /sys/kernel/realtime's content ("" when absent): the answer where no probe can
// decide (runtime_alloc_safe, tracepoint_misses: the kernel sources' versions), and the fallback
// of every probe that cannot (EPERM).
BpfFeatures BpfFeaturesFromUname(const std::string& release, const std::string& version, const std::string& realtime);

// How maps are created and programs loaded, chosen by the plan from BpfFeatures and set before
// any metric is created (process-wide; not changed while a map is being created).
struct LoadOptions {
  // Clear BPF_F_NO_PREALLOC: a hash map's max_entries x (key + value) bytes (for a per-CPU hash
  // max_entries x (key + value x possible CPUs)) are allocated when it is created, none in the
  // tracepoint.
  bool preallocate_maps = false;
  // Rewrite calls of probe_read_kernel(_str) and probe_read_user(_str) to probe_read(_str) (the
  // pre-5.5 helpers, which read kernel and, on x86-64, user memory the same way).
  bool probe_read_fallback = false;
  // BPF memory is charged to RLIMIT_MEMLOCK (BpfFeatures::memlock_charged): an EPERM while
  // CAP_BPF/CAP_SYS_ADMIN are held is reported as RLIMIT_MEMLOCK (BpfErrnoStatus).
  bool memlock_charged = false;
  // BPF_XCHG is available (BpfFeatures::atomic_xchg): probe programs take their record's guard
  // with it (probe_record.h).
  bool atomic_xchg = false;
  // How sweeps take entries out of hash maps (BpfFeatures::map_lookup_and_delete,
  // map_batch_ops; start_sweep.h).
  bool map_lookup_and_delete = false;
  bool map_batch_ops = false;
};
void SetLoadOptions(const LoadOptions& options);
LoadOptions GetLoadOptions();

// A BPF object name the kernel accepts: characters outside [A-Za-z0-9_.] become '_' (':' is valid
// in a metric name, but bpf_obj_name_cpy() refuses it with EINVAL), cut to 15 characters
// (BPF_OBJ_NAME_LEN - 1).
std::string BpfObjectName(const std::string& name);

// The status of a failed bpf() call: EPERM/EACCES are RLIMIT_MEMLOCK when `privileged` (CAP_BPF
// or CAP_SYS_ADMIN held) and `memlock_charged`, else missing capabilities; ENOMEM and E2BIG are
// Unavailable; anything else Internal. Each names `what` and what would help.
Status BpfErrnoStatus(int err, const std::string& what, bool privileged, bool memlock_charged);

// The fault seam for kernels we cannot boot: while set, every bpf() call this file makes
// (CreateMap, LoadTracepointProgram, the probes) first calls `fault(call)`; a positive return is
// taken as that call's errno and the syscall is not made; kInjectSuccess makes the call succeed
// without the syscall (a create or load then returns an fd of /dev/null, which is only ever
// closed: for tests of the probes, which never use what they created); 0 makes the real call.
// nullptr clears it. Process-wide; set only while no other thread creates maps or loads programs
// (tests).
struct BpfCall {
  // BPF_MAP_CREATE, BPF_PROG_LOAD, or the feature probes' BPF_MAP_LOOKUP_AND_DELETE_ELEM and
  // BPF_MAP_LOOKUP_AND_DELETE_BATCH
  int cmd = 0;
  std::string name;
  bpf_map_type map_type = BPF_MAP_TYPE_UNSPEC;     // BPF_MAP_CREATE
  uint32_t map_flags = 0;                          // BPF_MAP_CREATE
  const std::vector<bpf_insn>* insns = nullptr;    // BPF_PROG_LOAD
  bpf_prog_type prog_type = BPF_PROG_TYPE_UNSPEC;  // BPF_PROG_LOAD
  bool CallsHelper(int helper) const;              // BPF_PROG_LOAD: some insn calls BPF_FUNC_<helper>
};
using BpfFault = std::function<int(const BpfCall& call)>;
inline constexpr int kInjectSuccess = -1;
void SetBpfFaultForTesting(BpfFault fault);

// bpf_map_create(). `name` is made a BpfObjectName. Sizes in bytes. With
// LoadOptions::preallocate_maps, BPF_F_NO_PREALLOC is cleared from `flags`. Errors:
// BpfErrnoStatus (PermissionDenied: capabilities or RLIMIT_MEMLOCK; Unavailable: ENOMEM/E2BIG;
// Internal otherwise), each naming the map.
StatusOr<ScopedFd> CreateMap(bpf_map_type type, const std::string& name, uint32_t key_size, uint32_t value_size,
                             uint32_t max_entries, uint32_t flags = 0);

// bpf_prog_load() of a BPF_PROG_TYPE_TRACEPOINT program (license "GPL": the probe_read
// helpers need it), or with `type` BPF_PROG_TYPE_KPROBE a probe event's program (probe_record.h;
// kern_version set to the running kernel's, which kernels before 5.0 required). `name` is made a BpfObjectName; with
// LoadOptions::probe_read_fallback the probe_read_kernel(_str) calls are rewritten first. Errors: the verifier's
// rejection with its log (the last 4 KiB) and the program's disassembly line count; PermissionDenied without CAP_BPF.
StatusOr<ScopedFd> LoadTracepointProgram(const std::string& name, const std::vector<bpf_insn>& insns,
                                         bpf_prog_type type = BPF_PROG_TYPE_TRACEPOINT);

// Returns once every BPF program run that began before the call has returned: an RCU grace
// period (tracing programs run under rcu_read_lock: kernel/trace/bpf_trace.c trace_call_bpf),
// typically a few ms. Two ways:
//  * membarrier(MEMBARRIER_CMD_GLOBAL) (membarrier(2)), which is synchronize_rcu() only while 2
//    or more CPUs are online, and refused (EINVAL) with nohz_full CPUs (kernel/sched/membarrier.c,
//    sys_membarrier: "if (tick_nohz_full_enabled()) return -EINVAL; if (num_online_cpus() > 1)
//    synchronize_rcu(); return 0;"). With one CPU online it returns at once, yet on a preemptible
//    kernel a program run preempted on that CPU (under rcu_read_lock, migrate_disable) has not
//    returned: it would write after we read.
//  * an update of a 1-entry BPF_MAP_TYPE_ARRAY_OF_MAPS, which calls synchronize_rcu() whatever
//    the CPUs (kernel/bpf/syscall.c maybe_wait_bpf_programs, Linux 4.20: kernel commit
//    1ae80cf31938 "bpf: wait for running BPF programs when updating map-in-map").
// kMembarrierFirst: membarrier while sysconf(_SC_NPROCESSORS_ONLN) (glibc reads
// /sys/devices/system/cpu/online at each call) says 2 or more CPUs are online before the call
// and still after it (a CPU taken offline meanwhile: the kernel may have counted one), else the
// map-in-map update; membarrier refused: the map-in-map update. kMapInMap: the map-in-map update
// alone. Membarrier stays the first choice where it waits: it needs no map, and kernels before
// 4.20 (RHEL 8's 4.18 may lack the backport) do not wait in the map update. Errors: Unavailable
// when neither way works (no CAP_BPF; one CPU online and the map-in-map refused).
// Thread-safe (the map-in-map is made once, under a mutex, and kept).
enum class GraceWait { kMembarrierFirst, kMapInMap };
Status WaitForProgramRuns(GraceWait how = GraceWait::kMembarrierFirst);

// The seam of WaitForProgramRuns for unit tests (a one-CPU host, a kernel refusing membarrier):
// while set, it asks `online_cpus()` instead of sysconf, and calls `membarrier()` and
// `map_in_map()` (each returns 0 or an errno) instead of the syscalls. nullptr: the real ones.
// Process-wide; set only while no other thread waits (tests).
struct GraceWaitCalls {
  std::function<int()> online_cpus;
  std::function<int()> membarrier;
  std::function<int()> map_in_map;
};
void SetGraceWaitCallsForTesting(const GraceWaitCalls* calls);

// A program attached to a tracepoint: the disabled perf event that holds it there. Destroying
// (or resetting) it closes the event, which detaches the program. This process's attachments are
// counted per tracepoint, so that ForeignPrograms() can tell them from other tools' programs.
// Move-only. Thread-safe (the count is under a mutex).
class TracepointAttachment {
 public:
  TracepointAttachment() = default;
  TracepointAttachment(TracepointAttachment&& other) noexcept;
  TracepointAttachment& operator=(TracepointAttachment&& other) noexcept;
  ~TracepointAttachment();
  int fd() const { return event_.get(); }

 private:
  friend StatusOr<TracepointAttachment> AttachTracepoint(int prog_fd, uint64_t tracepoint_id);
  void Reset();
  ScopedFd event_;
  uint64_t tracepoint_id_ = 0;
};

// Opens a disabled PERF_TYPE_TRACEPOINT perf event of `tracepoint_id` on the first online CPU
// and attaches `prog_fd` to it (PERF_EVENT_IOC_SET_BPF, perf_event_open(2)). Errors: E2BIG
// (Unavailable) when the tracepoint already runs BPF_TRACE_MAX_PROGS (64) programs, from any
// process; PermissionDenied without CAP_PERFMON/CAP_SYS_ADMIN.
StatusOr<TracepointAttachment> AttachTracepoint(int prog_fd, uint64_t tracepoint_id);

// The kernel's limit of BPF programs run by one tracepoint (BPF_TRACE_MAX_PROGS,
// kernel/trace/bpf_trace.c), shared by every process that attaches to it.
inline constexpr int kMaxProgramsPerTracepoint = 64;

// How many BPF programs other than this process's TracepointAttachments the tracepoint
// `tracepoint_id` runs now (bpftrace, BCC, another exporter): the kernel's count from
// PERF_EVENT_IOC_QUERY_BPF (Linux 4.16; perf_event_open(2)) on a disabled perf event, less
// ours. They take slots of kMaxProgramsPerTracepoint. Errors: the perf_event_open or ioctl errno
// (PermissionDenied without CAP_PERFMON). Thread-safe.
StatusOr<int> ForeignPrograms(uint64_t tracepoint_id);

// bpf_prog_info of a loaded program (BPF_OBJ_GET_INFO_BY_FD). run_time_ns and run_cnt stay 0
// unless the sysctl kernel.bpf_stats_enabled is 1; recursion_misses counts the runs the kernel
// skipped because another BPF program was running on that CPU (bpf_prog_active).
struct ProgramStats {
  uint64_t run_time_ns = 0;
  uint64_t run_cnt = 0;
  uint64_t recursion_misses = 0;
  uint32_t id = 0;  // the program id bpftool shows
  // Whether the kernel's bpf_prog_info has the fields (the length it filled in tells): run_time_ns
  // and run_cnt from Linux 5.1, recursion_misses from 5.12. A field the kernel lacks reads 0,
  // which is not a count.
  bool has_run_time = false;
  bool has_recursion_misses = false;
};
ProgramStats ReadProgramStats(int prog_fd);
// The pure part: the stats in `info`, of which the kernel filled `info_len` bytes
// (bpf(BPF_OBJ_GET_INFO_BY_FD) sets info_len to the smaller of ours and its struct's size).
ProgramStats ProgramStatsFromInfo(const bpf_prog_info& info, uint32_t info_len);

// The number of possible CPUs: per-CPU map values come back as one slot per possible CPU.
int PossibleCpus();

}  // namespace tpe::bpf
