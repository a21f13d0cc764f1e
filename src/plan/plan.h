// Planning: turns a parsed Config into the perf events to open and the collectors that consume
// their samples, validating every name against the running kernel's tracefs.
//
// Metrics on the same (event, filter) share one perf event per CPU and mode: a counter without
// labels uses a counting-mode event (no ring, no samples: the kernel counts and we read() at
// scrape); every other metric a sampled one.
//
// Errors name the config file, the JSON path and what would be valid: unknown event (with the
// closest event names), unknown field (with the event's fields), a decode that does not fit the
// field, a filter the kernel rejects (with the kernel's reason).
//
// Thread-safety: a Plan is built once on the main thread; afterwards the reader thread owns the
// sampled side and scrapes read the atomics and fds.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bpf/loader.h"
#include "collectors/collector.h"
#include "common/cgroup_resolver.h"
#include "common/metric_desc.h"
#include "common/scoped_fd.h"
#include "config/config.h"
#include "format/event_format.h"
#include "format/print_symbols.h"
#include "perf/perf_event.h"
#include "plan/kernel_features.h"
#include "plan/probes.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe {

struct EventPlan {
  EventName event;
  // What the config calls it, for messages and self-metric labels: event.ToString(), or for a
  // probe event its probe name ("uprobe:/usr/bin/x:main"), which stays the same across restarts
  // while its group:event names the process.
  std::string display;
  // A uprobe's or USDT probe's one process ("pid" in the config), 0 for all. A perf event with a
  // pid follows one thread (and, with attr.inherit, the threads it creates later), and a uprobe
  // perf event fires only while its thread runs: so a "pid" event has a perf event per thread
  // of the process (task_fds), and the kernel installs the uprobe in that process alone.
  int pid = 0;
  // Where "pid" comes from, for messages: the config's JSON path of the first metric or endpoint
  // that set it ("metrics[2]", "metrics[3].start").
  std::string pid_json_path;
  uint64_t tracepoint_id = 0;
  std::string filter;
  EventFormat format;
  std::map<std::string, SymbolTable> symbols;  // field → __print_symbolic table (extractors copy them)
  // Counting mode (false): the kernel counts, no samples. Sampled (true): every hit is a sample
  // in its CPU's ring. Label-less counters always get a counting-mode event of their own, so a
  // metric that stays the same across a reload keeps the same perf events whatever else
  // changes: (event, filter, sampled) is the identity under which perf events are kept.
  bool sampled = false;
  // Sampled with PERF_SAMPLE_CGROUP (kSampleTypeCgroup): some metric on it has a "cgroup" label.
  // Metrics that share the event and need no cgroup ignore the id; part of the perf events'
  // identity (a reload that adds the first cgroup label reopens them).
  bool cgroup = false;
  // Sampled with PERF_SAMPLE_CALLCHAIN for a profile: kCallchainKernel | kCallchainUser (0: no
  // stacks), at most `max_stack` frames. A profile's event is its own (metrics on the same
  // tracepoint do not pay for the kernel's unwinding), shown as "<event> stacks"; part of the
  // perf events' identity.
  static constexpr uint8_t kCallchainKernel = 1, kCallchainUser = 2;
  uint8_t callchain = 0;
  uint16_t max_stack = 0;
  // A profile whose user stacks are unwound in user space ("unwind": "dwarf"): each sample
  // carries the user registers and this many bytes of the user stack (TracepointEventOptions::
  // stack_user_bytes), and the kernel's callchain only its kernel part. 0: none. Part of the perf
  // events' identity.
  uint32_t stack_user_bytes = 0;
  // Not a tracepoint: the per-CPU PERF_COUNT_SW_DUMMY event (TracepointEventOptions::dummy) whose
  // PERF_RECORD_MMAP2 records teach ProcessImages the mappings of every process, for the bpf
  // engine's profiles with user stacks (their programs send no samples to learn them from).
  // Sampled into the CPU rings; no consumers, no format. Part of the perf events' identity.
  bool mmap_tracker = false;
  // Its perf events report PERF_RECORD_MMAP2 (user frames are named through the mappings they
  // teach ProcessImages): user callchains, user stacks, or the mmap tracker.
  bool learns_mappings() const { return (callchain & kCallchainUser) != 0 || stack_user_bytes > 0 || mmap_tracker; }
  // Not a tracepoint: a CPU profile's software clock event (TracepointEventOptions::
  // software_clock: PERF_COUNT_SW_CPU_CLOCK or _TASK_CLOCK; kSoftwareClockNone for a
  // tracepoint), sampled with PERF_SAMPLE_PERIOD at `frequency_hz` or every `period_ns`,
  // without the idle task unless `include_idle`. No format, no filter; its kernel count is
  // the clock's ns, not hits. Part of the perf events' identity.
  int software_clock = TracepointEventOptions::kSoftwareClockNone;
  uint64_t frequency_hz = 0, period_ns = 0;
  bool include_idle = false;
  bool clock() const { return software_clock != TracepointEventOptions::kSoftwareClockNone; }
  // A CPU profile on the bpf engine: the identity (Plan::identities) of the profile whose
  // BPF_PROG_TYPE_PERF_EVENT program (bpf::BpfProfile) runs at each overflow of this clock
  // event, attached at every open (PERF_EVENT_IOC_SET_BPF), CPU hotplug reopens included; the
  // program returns 0, and the event is not `sampled` (no ring, sample_type 0): it samples only
  // to overflow. Empty: none. The event is the profile's own; part of the perf events' identity
  // (a changed profile gets new events).
  std::string bpf_profile;
  std::vector<std::pair<Collector*, size_t>> consumers;  // (collector, its event index)

  // Runtime state, filled when the perf events are opened. Guarded by the pipeline's mutex.
  std::vector<ScopedFd> fds;  // by CPU number; invalid where the CPU is not traced
  std::vector<uint64_t> ids;  // PERF_EVENT_IOC_ID per fd (0 where none), then those of task_fds
  // A "pid" event's perf events (pid > 0; `fds` is then empty): one per thread of the process
  // that existed when they were opened, with attr.inherit (threads created later get an
  // inherited copy in the kernel, which counts into its parent's read() and samples into its
  // parent's ring with its parent's id). Sampled: by CPU number, each thread's event on that CPU
  // (threads x CPUs). Counting mode: slot 0 only, each thread's event on every CPU (cpu -1).
  struct TaskFd {
    int tid = 0;
    ScopedFd fd;
    uint64_t id = 0;
  };
  std::vector<std::vector<TaskFd>> task_fds;
  EventCount retired;      // final counts of fds closed after their CPU went offline
  RelaxedCounter samples;  // samples decoded
  EventCount base;         // self-metric counts carried over from a replaced event
  // Hits the kernel counted that became neither a sample nor a lost sample (see Reader): the
  // largest lower bound measured so far.
  RelaxedCounter unaccounted;
  // The reader's pending measurement: counts read at check_time_ns, and samples stamped after it.
  EventCount check_counts;
  uint64_t samples_after_check = 0;

  // The kernel's count and lost-sample count (PERF_FORMAT_LOST) summed over CPUs, including
  // fds retired by CPU hotplug.
  EventCount ReadKernelCounts() const;
  // The same plus `base`: what the self-metrics report.
  EventCount ReadCounts() const;
  // Perf events open (fds and task_fds).
  size_t OpenFdCount() const;
  // Re-reads `ids` from fds and task_fds (after either changed).
  void CollectIds();
  // True when `other` would open the same perf events: same (event, filter, sampled, cgroup, pid,
  // callchain, max_stack, stack_user_bytes, mmap_tracker, software clock and its sampling,
  // bpf_profile).
  bool SamePerfEvents(const EventPlan& other) const {
    return event == other.event && filter == other.filter && sampled == other.sampled && cgroup == other.cgroup &&
           pid == other.pid && callchain == other.callchain && max_stack == other.max_stack &&
           stack_user_bytes == other.stack_user_bytes && mmap_tracker == other.mmap_tracker &&
           software_clock == other.software_clock && frequency_hz == other.frequency_hz &&
           period_ns == other.period_ns && include_idle == other.include_idle && bpf_profile == other.bpf_profile;
  }
};

// The kernel's count of counting-mode `events` (ReadKernelCounts) plus `carried`: a counting-mode
// metric's value (MetricPlan::counting_events, counting_carried).
uint64_t KernelCount(const std::vector<EventPlan*>& events, uint64_t carried);

// One metric of a plan: what runs it and what a reload needs to carry it over.
struct MetricPlan {
  std::unique_ptr<Collector> collector;
  std::string identity;  // MetricConfig::canonical: equal identities are the same metric
  // The engine that runs it (kBpf or kPerf) and why (for --config.check, --print and
  // tracepoint_exporter_metric_info), e.g. "perf: counting mode (a label-less counter)" or
  // "perf: the filter's glob pattern cannot be compiled (bpf)".
  Engine engine = Engine::kPerf;
  std::string engine_reason;
  // Counting mode: its events (the current probe event first, then those of replaced binaries),
  // whose counts add up to the metric's; else empty.
  std::vector<EventPlan*> counting_events;
  // Counting mode: counts of its perf events that a reload closed (an event of a replaced binary
  // no process maps any more), read once they were disabled; added to its events'.
  uint64_t counting_carried = 0;
};

struct Plan {
  // The probe events (uprobes, USDT, kprobes) this plan opens. First, so destroyed last: after the
  // perf events and programs on them are closed (ProbeRegistry::RemoveUnreferenced).
  std::vector<std::shared_ptr<const ProbeHandle>> probes;
  // Each probe event's "group:event" -> its name in the config (EventPlan::display).
  std::map<std::string, std::string> probe_names;
  // A probe event on a binary that has been replaced since (a package upgrade): the current
  // event's "group:event" -> the events of the same probe on the files its path named before
  // that some process still maps (ProbeVariants::replaced), oldest first. Their formats are the
  // current event's: every metric on the probe is fed by all of them, on both engines.
  std::map<std::string, std::vector<std::string>> probe_replaced;
  // Each uprobe event's "group:event" -> FileIdentity of the binary it was defined on.
  std::map<std::string, std::string> probe_identity;
  std::string config_path;
  Settings settings;
  std::vector<std::unique_ptr<EventPlan>> events;
  // One per metric, in config order (then the profiles' own, e.g. the mmap tracker's none).
  std::vector<MetricPlan> metrics;
  // Events an earlier plan had, closed by the reload that made this plan, whose samples may still
  // be in the rings: their ids still dispatch to their consumers (metrics this plan kept), so no
  // sample is lost. Counts final (`retired`). Dropped at the next reload.
  std::vector<std::unique_ptr<EventPlan>> draining;
  bool needs_comm = false;            // some label uses source "comm"
  bool needs_ordering = false;        // comm labels or latency pairing
  std::vector<std::string> warnings;  // degraded but working, e.g. no BTF
  // BPF programs this plan attaches, by tracepoint "system:name": at most 64 each with other
  // tools' (the kernel's BPF_TRACE_MAX_PROGS); further "auto" metrics of a tracepoint run on perf.
  std::map<std::string, int> bpf_programs;
  // Programs other processes run on those tracepoints when the plan was built
  // (bpf::ForeignPrograms): they take slots of the 64 too.
  std::map<std::string, int> foreign_bpf_programs;
  // The kernel's features this plan was built for, and one line per unavailable one: the
  // fallback the plan chose and what it costs (DescribeFeatures).
  KernelFeatures features;
  std::vector<std::string> kernel_notes;
  // cgroup id → path for every "cgroup" label (created with the first one; the cgroup2 mount of
  // /proc/self/mountinfo). Shared: a collector kept across a reload keeps its resolver.
  std::shared_ptr<CgroupResolver> cgroups;

  // Appends a metric's record (engine kPerf until the planner says otherwise) and returns it.
  MetricPlan& AddMetric(std::unique_ptr<Collector> collector, std::string identity);
  // The metrics' collectors, in order (null where a reload moved one out).
  std::vector<Collector*> Collectors() const;
  // The metrics' engines, in order.
  std::vector<Engine> Engines() const;
};

// Builds and validates the plan. With `check_filters`, each filter is also test-applied in a
// private tracefs instance (Tracefs::CheckFilter). The pipeline needs no such check: the kernel
// validates each filter when it is set on the perf event (PERF_EVENT_IOC_SET_FILTER), and only
// a rejected filter costs a tracefs instance, to tell the kernel's reason.
//
// Engines (per metric "engine"): "perf" always uses perf events. "bpf" needs `bpf.available`
// (else PermissionDenied naming CAP_BPF) and a metric the program generator can express (else
// InvalidArgument saying what). "auto" (the default) takes bpf when both hold, except for a
// label-less counter, which the kernel already counts exactly in counting mode, and a profile,
// whose perf callchains are exact where a stack map can lose stacks to hash collisions (a
// "bpf" profile is a bpf::BpfProfile, plus the mmap tracking event when it takes user stacks);
// otherwise perf, with the reason in engine_reasons (and one log line by the daemon). Probe events (uprobes,
// USDT, kprobes) take the same choice: their bpf programs are BPF_PROG_TYPE_KPROBE ones that
// compute the event's fields from pt_regs (bpf/probe_record.h); a metric reading a __probe_*
// field runs on perf. bpf metrics' maps are
// created and programs loaded (verified) here; Pipeline::Open/Reload attach them. For a
// reload, `running_bpf` holds the identities (MetricConfig::canonical) of the running pipeline's
// bpf metrics: those are planned without loading anything (Pipeline::Reload keeps the running
// ones), so an unchanged config reloads even after capabilities were dropped.
//
// A probe whose binary was replaced under its path while processes still run the old file has an
// event per file (Plan::probe_replaced): on perf each gets its EventPlans with the same consumers
// (a counting-mode counter adds their counts), on bpf the metric is a BpfPartsMetric with a part
// per file.
//
// `features` (DetectKernelFeatures; the default is a current kernel) decides the fallbacks: the
// loader's options (bpf::SetLoadOptions: preallocated maps, probe_read helpers), perf events
// without PERF_FORMAT_LOST, cgroup labels left out (with a warning) where cgroup v2 holds no
// tasks, and a refusal of a cgroup label on the perf engine without PERF_SAMPLE_CGROUP
// (Unavailable naming the metric and what would work).
StatusOr<std::unique_ptr<Plan>> BuildPlan(const Config& config, const Tracefs& tracefs, const KernelEnums& enums,
                                          bool check_filters,
                                          const bpf::BpfSupport& bpf = bpf::BpfSupport{false, "not probed"},
                                          const std::set<std::string>& running_bpf = {},
                                          const KernelFeatures& features = KernelFeatures{});

// The warning BuildPlan gives when features.kallsyms_hidden and `profiles` (their names, comma
// separated) take kernel stacks: what hides the addresses (the two sysctls as they are now) and
// what would show them.
std::string KallsymsHiddenWarning(const std::string& profiles);

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kEventHitsTotalDesc{"tracepoint_exporter_event_hits_total",
                                                "Times the tracepoint fired (after its filter), counted by the kernel.",
                                                MetricKind::kCounter};
inline constexpr MetricDesc kSamplesTotalDesc{"tracepoint_exporter_samples_total", "Samples decoded, per event.",
                                              MetricKind::kCounter};
inline constexpr MetricDesc kSamplesLostTotalDesc{
    "tracepoint_exporter_samples_lost_total",
    "Samples the kernel dropped because the ring buffer was full, per event (PERF_FORMAT_LOST).", MetricKind::kCounter};
inline constexpr MetricDesc kSamplesUnaccountedTotalDesc{
    "tracepoint_exporter_samples_unaccounted_total",
    "Hits the kernel counted that became neither a sample nor a lost sample (a lower bound, measured each second): "
    "samples + lost + unaccounted == hits once the rings are drained. Nonzero when the kernel drops samples "
    "without accounting for them.",
    MetricKind::kCounter};
inline constexpr MetricDesc kPidPerfEventsDesc{
    "tracepoint_exporter_pid_perf_events",
    "Perf events (file descriptors) a \"pid\" event holds: one per thread the process had when "
    "they were opened, on every CPU for a sampled metric (threads it creates later inherit "
    "them in the kernel). At most settings.max_pid_perf_events.",
    MetricKind::kGauge};
inline constexpr MetricDesc kProbeMissesTotalDesc{
    "tracepoint_exporter_probe_misses_total",
    "Hits of a kprobe or kretprobe event the kernel missed (<tracefs>/kprobe_profile, third "
    "column): for a kretprobe mostly returns of calls beyond its maxactive calls in flight, "
    "which its metrics never see. Raise the event's \"maxactive\" (at most 4096).",
    MetricKind::kCounter};
inline constexpr MetricDesc kMetricInfoDesc{
    "tracepoint_exporter_metric_info",
    "The engine each metric runs on (bpf: in-kernel aggregation; perf: perf events and rings); "
    "always 1. --config.check says why.",
    MetricKind::kGauge};

}  // namespace tpe
