// Opening PERF_TYPE_TRACEPOINT perf events and the ioctls on them.
//
// Source: perf_event_open(2); include/uapi/linux/perf_event.h. This folder is the only place in
// the project that calls perf_event_open, ioctl or mmap.
//
// Thread-safety: free functions on distinct fds are safe from any thread; read() of a count may
// race harmlessly with the kernel updating it.
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/scoped_fd.h"
#include "common/status.h"

namespace tpe {

// The sample_type of every sampled event: a sample record is
//   { header; u64 id; u32 pid, tid; u64 time; u32 size; u8 raw[size]; }
// and with sample_id_all every other record ends with { u32 pid, tid; u64 time; u64 id; }.
inline constexpr uint64_t kSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW;
// An event with a "cgroup" label: kSampleType plus PERF_SAMPLE_CGROUP (Linux >= 5.7), which
// appends { u64 cgroup; } after the raw data. The sample_id_all trailer of other records does
// not include it, so records of both kinds can share a ring.
inline constexpr uint64_t kSampleTypeCgroup = kSampleType | PERF_SAMPLE_CGROUP;
// The user registers a sample for unwinding carries (attr.sample_regs_user), by their bit in
// arch/x86/include/uapi/asm/perf_regs.h enum perf_event_x86_regs: AX, BX, CX, DX, SI, DI, BP,
// SP, IP (bits 0-8) and R8-R15 (bits 16-23); the sample's regs[] follow in ascending bit order.
inline constexpr uint64_t kSampleRegsUser = 0x1ffull | (0xffull << 16);
inline constexpr uint32_t kSampleRegsUserCount = 17;

struct TracepointEventOptions {
  uint64_t tracepoint_id = 0;  // events/<sys>/<event>/id
  bool sampled = false;        // sample_period=1 with kSampleType; else counting mode
  bool cgroup = false;         // sampled: kSampleTypeCgroup instead of kSampleType
  bool track_tasks = false;    // also emit PERF_RECORD_COMM/FORK/EXIT (attr.comm, attr.task)
  // Also emit PERF_RECORD_MMAP2 for every executable mapping a task makes while the event is
  // enabled (attr.mmap + attr.mmap2; for a per-CPU event: any task on that CPU). Profiles use
  // them to name the user frames of processes that exited before the request.
  bool track_mmap = false;
  // Not a tracepoint: a PERF_COUNT_SW_DUMMY software event (it never fires, so it has no
  // samples), opened for its PERF_RECORD_MMAP2 records (with track_mmap): the bpf engine's
  // profiles learn processes' mappings from it. tracepoint_id is then ignored.
  bool dummy = false;
  uint32_t wakeup_watermark_bytes = 0;  // wake the reader when this many bytes are unread
  // read_format carries PERF_FORMAT_LOST (Linux >= 6.0; PerfFeatures::format_lost). Without it
  // read() returns {value, time_enabled} and EventCount::lost_known is false.
  bool format_lost = true;
  // attr.inherit: a per-task event (pid > 0) is copied into every task its task creates from
  // then on (perf_event_init_task, kernel/events/core.c). The copies count into the original's
  // read() (perf_event_read_value sums the children), sample into its ring and carry its id
  // (primary_event_id), and go when their task exits (their counts folded into the original).
  bool inherit = false;
  // With `inherit`: copied into new threads only, not into child processes (attr.inherit_thread,
  // Linux 5.13; PerfFeatures::inherit_thread).
  bool inherit_thread = false;
  // Sampled: each sample carries the stack (PERF_SAMPLE_CALLCHAIN, between TIME and RAW; the
  // kernel unwinds with frame pointers): the kernel's part, the user's part, or both
  // (attr.exclude_callchain_user / _kernel leave the other out). At most `max_stack` frames
  // (attr.sample_max_stack, Linux 4.8; the kernel refuses more than
  // kernel.perf_event_max_stack, 127 by default). Source: perf_event_open(2).
  bool callchain_kernel = false;
  bool callchain_user = false;
  uint16_t max_stack = 127;
  // Sampled, > 0: each sample also carries the task's user registers kSampleRegsUser
  // (PERF_SAMPLE_REGS_USER) and the `stack_user_bytes` bytes of its user stack above its rsp
  // (PERF_SAMPLE_STACK_USER), for unwinding from the code's tables in user space (perf record
  // --call-graph dwarf). A multiple of 8, below 65536 (perf_copy_attr refuses others). Source:
  // perf_event_open(2).
  uint32_t stack_user_bytes = 0;
  // Not a tracepoint: a software clock event, PERF_COUNT_SW_CPU_CLOCK or PERF_COUNT_SW_TASK_CLOCK
  // (kSoftwareClockNone: none), sampled with PERF_SAMPLE_PERIOD added to the sample_type (it sits
  // between TIME and CALLCHAIN: each sample says how many ns of the clock it stands for; RAW
  // stays, the kernel writes an empty 4-byte payload for an event without raw data) at
  // `frequency_hz` or, when frequency_hz is 0, every `period_ns` ns of the clock (sample_period;
  // the kernel's floor is 10,000 ns). A frequency is opened as the fixed period 1e9 /
  // frequency_hz ns, which is what the kernel makes of attr.freq for these hrtimer events
  // (perf_swevent_init_hrtimer), without attr.freq's limit kernel.perf_event_max_sample_rate. `exclude_idle`: no
  // samples while the CPU runs its idle task (attr.exclude_idle). tracepoint_id and the filter are then meaningless.
  // Source: perf_event_open(2).
  static constexpr int kSoftwareClockNone = -1;
  int software_clock = kSoftwareClockNone;
  uint64_t frequency_hz = 0;
  uint64_t period_ns = 0;
  bool exclude_idle = false;
  // A software clock whose overflows run a BPF program (AttachBpfProgram) and write no sample:
  // not `sampled` (no ring, sample_type 0: from Linux 6.3 bpf_overflow_handler prepares the
  // sample's fields before each run), but the same period and exclude_idle.
  bool bpf_overflow = false;
};

// What this kernel's perf_event_open accepts, probed once at startup (DetectPerfFeatures).
// perf_copy_attr() (kernel/events/core.c) refuses unknown read_format and sample_type bits with
// EINVAL whatever the event type, so a per-task PERF_COUNT_SW_DUMMY event (pid 0, cpu -1: no
// privilege beyond the caller's own task, no tracefs) decides both.
struct PerfFeatures {
  bool format_lost = true;     // PERF_FORMAT_LOST (Linux 6.0): per-event lost-sample counts
  bool sample_cgroup = true;   // PERF_SAMPLE_CGROUP (Linux 5.7): the cgroup id in each sample
  bool inherit_thread = true;  // attr.inherit_thread (Linux 5.13): inherit into threads only
  // Non-empty when a probe failed for another reason than EINVAL (e.g. EACCES): the feature is
  // then assumed present and the real perf_event_open reports the error.
  std::string probe_error;
  // kernel.perf_event_max_stack: the most frames attr.sample_max_stack may ask for (more is
  // refused with EOVERFLOW: get_callchain_buffers, kernel/events/callchain.c) and a BPF stack
  // map may hold. A sysctl, settable while no callchain event exists: read for each plan
  // (ReadPerfEventMaxStack). -1: unknown.
  int max_stack = -1;
};
// Three perf_event_open calls (through the fault seam below), and ReadPerfEventMaxStack. Never
// fails.
PerfFeatures DetectPerfFeatures();

// The value of kernel.perf_event_max_stack read from `path` (Documentation/admin-guide/sysctl/
// kernel.rst), or -1 when it cannot be read or is not a number.
int ReadPerfEventMaxStack(const std::string& path = "/proc/sys/kernel/perf_event_max_stack");

// The fault seam for kernels we cannot boot: while set, every perf_event_open this folder makes
// (OpenPerfEvent, DetectPerfFeatures) first calls `fault(attr, pid, cpu)`; a nonzero return is
// taken as that call's errno and the syscall is not made. Pass nullptr to clear. Process-wide;
// set it only while no other thread opens perf events (tests, before and after the code under
// test). Example: EINVAL when attr.read_format has PERF_FORMAT_LOST, as Linux 5.x answers.
using PerfOpenFault = std::function<int(const perf_event_attr& attr, int pid, int cpu)>;
void SetPerfOpenFaultForTesting(PerfOpenFault fault);

// The sample_period of a software clock event sampled at `frequency_hz` (1e9 / frequency_hz
// ns, what the kernel makes of attr.freq for these hrtimer events) or, when it is 0, every
// `period_ns` ns: the ns of the clock each sample stands for. Pure.
inline uint64_t ClockSamplePeriodNs(uint64_t frequency_hz, uint64_t period_ns) {
  return frequency_hz > 0 ? 1000000000ULL / frequency_hz : period_ns;
}

// Fills a perf_event_attr for a tracepoint: type PERF_TYPE_TRACEPOINT, config = id,
// use_clockid with CLOCK_MONOTONIC, sample_id_all, read_format PERF_FORMAT_TOTAL_TIME_ENABLED |
// PERF_FORMAT_LOST, created disabled (enable with EnableEvent once everything is wired).
// Sampled events carry no task tracking of their own: they write into a CPU's ring owned by a
// ring-owner event (MakeRingOwnerAttr) through SetOutput.
perf_event_attr MakeTracepointAttr(const TracepointEventOptions& opts);

// The event that owns one CPU's ring buffer: a PERF_COUNT_SW_DUMMY software event (it counts
// nothing and samples nothing) with the tracepoints' clock, sample_id_all and read_format, so
// that sampled tracepoint events can SetOutput into its ring and it can outlive any of them
// (a reload may close every tracepoint event and keep the ring). With `track_tasks` it also
// emits PERF_RECORD_COMM/FORK/EXIT for every task on the CPU (attr.comm, attr.task). Created
// enabled. Source: perf_event_open(2) PERF_COUNT_SW_DUMMY; tools/perf uses the same for
// tracking.
// `format_lost`: as TracepointEventOptions::format_lost.
perf_event_attr MakeRingOwnerAttr(bool track_tasks, uint32_t wakeup_watermark_bytes, bool format_lost = true);

// perf_event_open(attr, pid, cpu, group=-1, PERF_FLAG_FD_CLOEXEC): all tasks on one CPU
// (pid -1), or one task (pid > 0, a thread id: the event counts only while that thread runs, on
// `cpu` or on any CPU with cpu -1; with attr.inherit also in the tasks it creates later; for a
// uprobe the kernel installs the breakpoint in that task's process only, uprobe_perf_filter).
// Errors: PermissionDenied that says what is missing (CAP_PERFMON/CAP_SYS_ADMIN, or
// kernel.perf_event_paranoid), NotFound for a bad id or a task that does not exist (ESRCH),
// InvalidArgument otherwise.
StatusOr<ScopedFd> OpenPerfEvent(const perf_event_attr& attr, int cpu, int pid = -1);

// PERF_EVENT_IOC_SET_FILTER: the kernel's event filter syntax (Documentation/trace/events.rst
// §5.1). Errors: InvalidArgument when the kernel rejects it (ask Tracefs::CheckFilter why).
Status SetFilter(int fd, const std::string& filter);

// PERF_EVENT_IOC_SET_BPF: runs BPF program `prog_fd` (BPF_PROG_TYPE_PERF_EVENT for a software
// clock) at each overflow of sampled event `fd`, before its sample would be written (a program
// that returns 0 drops it). The event holds a reference to the program until it is closed.
// Errors: InvalidArgument when the kernel refuses the pair (EINVAL: a program type that does not
// fit the event), EEXIST when the event has a program already, as errno says otherwise.
// Source: perf_event_open(2), PERF_EVENT_IOC_SET_BPF.
Status AttachBpfProgram(int fd, int prog_fd);

// PERF_EVENT_IOC_SET_OUTPUT: send `fd`'s records to `target_fd`'s ring (same CPU and clock).
Status SetOutput(int fd, int target_fd);

// PERF_EVENT_IOC_ID: the id that PERF_SAMPLE_IDENTIFIER carries for this fd.
StatusOr<uint64_t> ReadEventId(int fd);

// PERF_EVENT_IOC_ENABLE / DISABLE.
Status EnableEvent(int fd);
Status DisableEvent(int fd);

// read(2) with read_format PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_LOST:
// {value, time_enabled, lost}; without PERF_FORMAT_LOST (kernels before 6.0) {value,
// time_enabled}, and then `lost_known` is false and `lost` 0 means "not counted", not "none
// lost" (the ring-level PERF_RECORD_LOST records still count them per CPU ring). `count` is how many times the event
// fired on this CPU while enabled (after the filter), whether or not its sample made it to the ring; `lost` is how many
// of its samples the kernel dropped (ring full). `enabled_ns` is the time the event has been enabled: it stops
// advancing for good when the event's CPU goes offline (the kernel detaches per-CPU events then, and they stay dead
// when the CPU returns), so an enabled per-CPU event whose enabled_ns no longer grows must be reopened.
struct EventCount {
  uint64_t count = 0;
  uint64_t lost = 0;
  uint64_t enabled_ns = 0;
  bool lost_known = true;  // false: the event was opened without PERF_FORMAT_LOST
};
StatusOr<EventCount> ReadEventCount(int fd);

// The online CPUs, from /sys/devices/system/cpu/online ("0-3,5").
StatusOr<std::vector<int>> OnlineCpus();
// The CPUs that can ever be online, from /sys/devices/system/cpu/possible.
StatusOr<std::vector<int>> PossibleCpus();
// The time_enabled (ns) of a ring-owner event (read_format PERF_FORMAT_TOTAL_TIME_ENABLED):
// see EventCount::enabled_ns.
StatusOr<uint64_t> ReadEnabledTime(int fd);
// Parses a CPU list such as "0-3,5". Pure; InvalidArgument on malformed text.
StatusOr<std::vector<int>> ParseCpuList(const std::string& text);

// What limits perf_event_open for this process, for error messages: the paranoid level and
// whether we have CAP_PERFMON / CAP_SYS_ADMIN.
std::string DescribePerfPrivileges();

}  // namespace tpe
