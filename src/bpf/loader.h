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

// bpf_map_create(). `name` at most 15 characters (BPF_OBJ_NAME_LEN - 1; longer is cut).
// Sizes in bytes. Errors: PermissionDenied (capabilities), Unavailable (ENOMEM: memlock or
// memory), Internal otherwise; each names the map.
StatusOr<ScopedFd> CreateMap(bpf_map_type type, const std::string& name, uint32_t key_size, uint32_t value_size,
                             uint32_t max_entries, uint32_t flags = 0);

// bpf_prog_load() of a BPF_PROG_TYPE_TRACEPOINT program (license "GPL": the probe_read
// helpers need it). Errors: the verifier's rejection with its log (the last 4 KiB) and the
// program's disassembly line count; PermissionDenied without CAP_BPF.
StatusOr<ScopedFd> LoadTracepointProgram(const std::string& name, const std::vector<bpf_insn>& insns);

// Opens a disabled PERF_TYPE_TRACEPOINT perf event of `tracepoint_id` on the first online CPU
// and attaches `prog_fd` to it. The returned fd keeps the program attached until it is closed.
StatusOr<ScopedFd> AttachTracepoint(int prog_fd, uint64_t tracepoint_id);

// bpf_prog_info of a loaded program (BPF_OBJ_GET_INFO_BY_FD). run_time_ns and run_cnt stay 0
// unless the sysctl kernel.bpf_stats_enabled is 1; recursion_misses counts the runs the kernel
// skipped because another BPF program was running on that CPU (bpf_prog_active).
struct ProgramStats {
  uint64_t run_time_ns = 0;
  uint64_t run_cnt = 0;
  uint64_t recursion_misses = 0;
  uint32_t id = 0;  // the program id bpftool shows
};
ProgramStats ReadProgramStats(int prog_fd);

// The number of possible CPUs: per-CPU map values come back as one slot per possible CPU.
int PossibleCpus();

}  // namespace tpe::bpf
