// The kernel's features, detected once at startup by the floor that owns each syscall (perf/
// for perf_event_open bits, bpf/ for helpers and map behaviour) and gathered here into the one
// value the plan reads (Plan::features). The plan, never a collector, chooses each fallback; it
// records what is unavailable and what that costs in Plan::kernel_notes, which the log,
// --config.check and --print show, and tracepoint_exporter_kernel_feature{feature,since} exports
// as 0|1.
//
// Thread-safety: values; DetectKernelFeatures is called once on the main thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bpf/loader.h"
#include "common/metric_desc.h"
#include "perf/perf_event.h"
#include "tracefs/probe_events.h"

namespace tpe {

// Whether cgroup labels can tell tasks apart. Both the perf engine (PERF_SAMPLE_CGROUP) and the
// bpf engine (bpf_get_current_cgroup_id) give the task's cgroup v2 id; on a host where only the
// v1 hierarchies hold tasks, every task is in the v2 root and the labels collapse to one series.
struct CgroupFacts {
  bool v2_labels = true;  // a cgroup2 hierarchy is mounted and holds tasks
  std::string why;        // when !v2_labels: what was found
};
// Pure: from /proc/self/mountinfo and /proc/self/cgroup (cgroups(7) "/proc/[pid]/cgroup").
// v2 is unused when no cgroup2 is mounted, or when this process sits in the v2 root while a v1
// hierarchy with controllers places it elsewhere (a v1-only systemd, cgroup2 mounted unused).
CgroupFacts DetectCgroupFacts(const std::string& mountinfo, const std::string& proc_self_cgroup);

struct KernelFeatures {
  PerfFeatures perf;
  bpf::BpfFeatures bpf;
  CgroupFacts cgroup;
  // The probe syntax <tracefs>/README describes (ParseProbeReadme): USDT semaphores
  // (ref_ctr_offset, 4.20) and kprobes' ustring (5.4). probe_synopsis false: not read or no
  // probe events; nothing is said about them then.
  ProbeReadme probe_readme;
  // Whether /proc/kallsyms hides the kernel's addresses from this process (KallsymsHidden: no
  // CAP_SYSLOG at kernel.kptr_restrict=1, or at 0 with kernel.perf_event_paranoid >= 2;
  // kptr_restrict=2): kernel frames of profiles stay addresses. nullopt: not known (unreadable).
  // Read for each plan (RefreshRuntimeFacts) and exported as tracepoint_exporter_kallsyms_hidden.
  std::optional<bool> kallsyms_hidden;
};

// Detects everything (perf: DetectPerfFeatures; bpf: DetectBpfFeatures, which also raises
// RLIMIT_MEMLOCK where it is charged; cgroup: the /proc files; probe syntax: <tracefs_root>/README
// when a root is given; RefreshRuntimeFacts). Never fails.
KernelFeatures DetectKernelFeatures(const std::string& tracefs_root = "");

// Reads again the facts a sysctl or a privilege can change while the daemon runs:
// perf.max_stack (kernel.perf_event_max_stack) and kallsyms_hidden (from `kallsyms_path`). Cheap
// (two small reads); called for each plan. Never fails.
void RefreshRuntimeFacts(KernelFeatures* features, const std::string& kallsyms_path = "/proc/kallsyms");

// One row per feature with a minimum kernel: its name (the `feature` label), the kernel that
// brought it, whether this kernel has it, and what its absence costs.
struct FeatureRow {
  std::string feature;
  std::string since;
  bool available = true;
  std::string cost;  // the fallback and its accuracy cost when !available
};
std::vector<FeatureRow> DescribeFeatures(const KernelFeatures& features);

// The loader options the plan chooses: preallocated maps when run-time allocation is unsafe,
// the probe_read helpers before 5.5.
bpf::LoadOptions ChooseLoadOptions(const KernelFeatures& features);

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kKernelFeatureDesc{
    "tracepoint_exporter_kernel_feature",
    "Whether the running kernel has a feature the exporter uses (1) or not (0; the log and "
    "--config.check say which fallback runs and what it costs). since: the first kernel with it.",
    MetricKind::kGauge};
inline constexpr MetricDesc kKallsymsHiddenDesc{
    "tracepoint_exporter_kallsyms_hidden",
    "Whether /proc/kallsyms lists every kernel address as 0 to the exporter (1: kernel frames "
    "of profiles stay raw addresses; it needs CAP_SYSLOG) or not (0), as found when the "
    "running config was planned.",
    MetricKind::kGauge};

}  // namespace tpe
