// A profile on the bpf engine: the event's program (a BpfMetric of Kind::kProfile)
// counts each hit past the filter under (labels, process, kernel stack id, user stack id) in a
// per-CPU hash, the ids from bpf_get_stackid() into a BPF_MAP_TYPE_STACK_TRACE map; Stacks()
// reads both at request time. The counts are exact: every run past the filter adds 1 to one
// series, and a series that does not fit (max_stacks series) is counted
// (tracepoint_exporter_series_dropped_total{metric}).
//
// A stack that cannot be recorded keeps its sample: the series' id is bpf_get_stackid()'s
// error, shown as one frame "[kernel stack lost: <reason>]" (StackCount::kernel_lost) and
// counted by reason in tracepoint_exporter_profile_stacks_lost_total{profile, part, reason}:
// "stack_map_full" (the stack map's max_stacks elements are in use), "hash_collision" (another
// stack holds the id's bucket). A kernel thread has no user stack: that part is simply empty.
//
// Stack ids are never deleted while the profile lives (as bpftrace's maps): an id names one
// stack until the map goes (a reload that changes the profile), so a series read at any time
// resolves to the stack that was counted — deleting an id a program may hand out again at once
// could name another stack's samples. Each id is read once (then cached), and only to render:
// the kernel's copy (bpf_stackmap_copy, kernel/bpf/stackmap.c) takes the id's bucket out while
// it copies, and a different stack hashing to the same bucket in that instant (a collision
// otherwise) is handed the id and then dropped for the old one: that one sample is named as the
// old stack. The kernel has the same window when two CPUs insert different stacks into one empty
// bucket at once. Both need a hash collision within the same microsecond.
//
// Collisions: the map has roundup_pow_of_two(max_stacks) buckets for kernel and user stacks
// together, so a new stack finds its bucket taken about as often as the buckets are filled
// (~6% with 1,000 distinct stacks at the default 10,000; ~25% with 5,000): raise
// max_stacks_per_profile for profiles with many stacks. Memory: max_stacks x (8 x max_frames
// + ~32) bytes, preallocated (10,000 x 127 frames: ~10.5 MB); refused over
// settings.bpf_preallocate_max_bytes.
//
// CPU profiles (BpfEndpoint::clock): the program runs at each overflow of the per-CPU clock
// events, with the interrupted registers: a sample taken in user mode has no kernel stack
// (bpf_get_stackid: -EFAULT, shown empty, not lost), one in a kernel thread no user stack.
// The kernel skips the program, uncounted (no program miss either: no misses series for it),
// when the clock's interrupt lands while bpf_prog_active is raised on that CPU
// (bpf_overflow_handler): while another BPF program runs there, and during BPF map syscalls
// (bpf_disable_instrumentation) — the exporter's own reads of its maps at a scrape among them,
// so that time is missing from its own profile. A share of samples about the share of CPU time
// spent in those. Like the perf engine's, samples the kernel throttles (more than
// kernel.perf_event_max_sample_rate / HZ in a tick) are not taken at all.
//
// Exited processes: user frames are named through the mappings the pipeline learns from the
// per-CPU mmap tracking event the plan adds for a bpf profile with user stacks (plan.h), as on
// the perf engine.
//
// Thread-safety: Create/Attach/Detach on the owning (main) thread; Stacks, EngineStats from any
// thread (map reads are syscalls; the id cache is guarded by a mutex).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bpf/bpf_metric.h"
#include "collectors/profile.h"
#include "common/metric_desc.h"

namespace tpe::bpf {

class BpfProfile : public Collector, public StackProfile {
 public:
  // `spec.kind` must be kProfile (InvalidArgument otherwise). Errors as BpfMetric::Create.
  static StatusOr<std::unique_ptr<BpfProfile>> Create(BpfMetricSpec spec);
  // Checked, not loaded (a reload keeps the running profile in its place): BpfMetric::CreateUnloaded.
  static StatusOr<std::unique_ptr<BpfProfile>> CreateUnloaded(BpfMetricSpec spec);

  const std::string& name() const override { return metric_->name(); }
  void OnSample(size_t, const Sample&, CommTable*) override {}  // the kernel aggregates
  MetricSnapshot Snapshot() const override;                     // name and help: off /metrics
  bool NeedsComm() const override { return false; }
  bool NeedsOrdering() const override { return false; }
  bool is_profile() const override { return true; }
  const StackProfile* stack_profile() const override { return this; }
  Status Attach() override { return metric_->Attach(); }
  void Detach() override { metric_->Detach(); }
  bool attached() const override { return metric_->attached(); }
  void OnCostWindow(bool open) override { metric_->OnCostWindow(open); }
  uint64_t series_dropped() const override { return metric_->series_dropped(); }
  // The program's stats (BpfMetric::EngineStats), then tracepoint_exporter_profile_samples_total
  // (samples counted into series, as on perf: dropped ones are series_dropped; an off-CPU
  // profile: blocks added), _profile_stacks (series held) and _profile_stacks_lost_total by part
  // and reason; an off-CPU profile's _profile_off_cpu_short_blocks_total, _dropped_total (the
  // switched-out tasks' map was full) and _unpaired_total, as on perf.
  std::vector<EngineStat> EngineStats() const override;

  // StackProfile: every series, its stacks read from the stack map (leaf first, zero padding
  // cut). A stack id whose read fails keeps its samples as lost ("unreadable").
  std::vector<StackCount> Stacks() const override;
  // A CPU profile (spec().end.clock): each sample weighs its clock period, ("cpu",
  // "nanoseconds"), as on the perf engine; otherwise samples counted.
  // An off-CPU profile (spec().off_cpu): ns blocked, ("off_cpu", "nanoseconds").
  double scale() const override { return clock() ? static_cast<double>(metric_->spec().clock_period_ns) : 1; }
  uint64_t instance() const override { return instance_; }
  std::string value_type() const override { return clock() ? "cpu" : off_cpu() ? "off_cpu" : "samples"; }
  std::string value_unit() const override { return clock() || off_cpu() ? "nanoseconds" : "count"; }
  bool clock() const { return metric_->spec().end.clock; }
  bool off_cpu() const { return metric_->spec().off_cpu.has_value(); }
  bool stamped() const override { return false; }  // the kernel counts: read as of the call

  const BpfMetric& metric() const { return *metric_; }

  // The reason a negative stack id stands for, as the lost frame and the self-metric name it:
  // "stack_map_full", "hash_collision", "no_callchain" (-EFAULT: the kernel took no stack), or
  // "error <errno>". Pure.
  static std::string LostReason(int32_t id);

 private:
  explicit BpfProfile(std::unique_ptr<BpfMetric> metric)
      : metric_(std::move(metric)), instance_(NextProfileInstance()) {}
  struct Read {
    std::vector<StackCount> stacks;
    uint64_t samples = 0;
    std::map<std::pair<std::string, std::string>, uint64_t> lost;  // (part, reason) -> samples
  };
  // Every series; with `resolve` its stacks' frames too (else only the lost reasons).
  Read ReadAll(bool resolve) const;
  // The frames of stack `id` (cached). False when the stack map has no such id.
  bool Frames(int32_t id, std::vector<uint64_t>* out) const;

  std::unique_ptr<BpfMetric> metric_;
  uint64_t instance_;
  mutable std::mutex mu_;
  mutable std::map<int32_t, std::vector<uint64_t>> frames_;  // stack id -> ips (ids are never reused)
  mutable bool batch_ = true;                                // ReadMap's batch choice
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kProfileStacksLostTotalDesc{
    "tracepoint_exporter_profile_stacks_lost_total",
    "Samples of a bpf-engine profile whose kernel or user stack (part) the stack map could "
    "not hold, by reason: stack_map_full (settings.max_stacks_per_profile distinct stacks "
    "in use), hash_collision (another stack holds the id's bucket). The samples are counted "
    "under a frame naming the reason. An off-CPU profile counts ns blocked instead, its "
    "unit.",
    MetricKind::kCounter};

}  // namespace tpe::bpf
