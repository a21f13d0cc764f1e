// A profile: how often each stack was seen at an event, per label set (docs/ARCHITECTURE.md "A
// profile is a metric whose series key includes stacks").
//
// OnSample splits the sample's PERF_SAMPLE_CALLCHAIN (decode/callchain.h) and keys the series
// by the labels' key, the task's pid, the kernel's instruction pointers and the user frames —
// the callchain's user part, or, for a "dwarf" profile, the frames unwound from the sample's
// user registers and stack copy (unwind/unwinder.h) — normalized to (file, offset) with the
// mappings the process had at the sample's time
// (process/process_images.h: the sample is dispatched in time order with the process's exec,
// fork and mmap records), so a stack keeps naming the code it was taken in after its process
// exec'd, exited or its pid was reused. Names come only when a scrape renders the stacks
// (profile/symbolizer.h): the hot path does no symbol lookups. With a `value` field the series
// sums the field instead of counting samples, as CounterCollector does.
//
// A profile's stacks are kept for its whole life ("since start": /debug/pprof/<name>), so its
// series are never swept; at max_stacks distinct (labels, stack) series a new one is dropped and
// counted (series_dropped()). A callchain the kernel wrote badly is a decode error.
//
// Thread-safety: OnSample from the reader thread only; Stacks and Snapshot from any thread.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectors/collector.h"
#include "collectors/label_set.h"
#include "collectors/series_table.h"
#include "collectors/wide_sum.h"
#include "common/metric_desc.h"
#include "decode/callchain.h"
#include "decode/field_extractor.h"
#include "process/process_images.h"
#include "unwind/cfi_cache.h"
#include "unwind/unwinder.h"

namespace tpe {

// One series of a profile, as Stacks() reads it.
struct StackCount {
  LabelPairs labels;
  uint32_t pid = 0;              // the sampled task's process (thread group) id (0: outside the
                                 // daemon's pid namespace, on the perf engine)
  std::vector<uint64_t> kernel;  // kernel instruction pointers, leaf first
  // The user part, leaf first, normalized (the perf engine, at sample time)...
  std::vector<UserFrame> user_frames;
  // ... or raw (the bpf engine: user instruction pointers of process `pid`'s image that started
  // at `image_ns`, ProcessImages::NormalizeAt; 0: the image that predates what was learnt).
  std::vector<uint64_t> user;
  uint64_t image_ns = 0;
  // Why the kernel or user part is missing when the engine could not record it (the bpf
  // engine's stack map: "stack map full", "hash collision"): rendered as one frame naming the
  // reason, so the samples still add up. "" when the part was recorded (or not asked for).
  std::string kernel_lost, user_lost;
  // samples, or the sum of the value field's raw integers (saturating at 2^64 - 1: never less
  // than an earlier read; pprof's int64 values saturate at 2^63 - 1 anyway)
  uint64_t value = 0;
};

// `after` less `before`, series by series (same labels, pid, image, frames and lost reasons): what a
// profile gained between two Stacks() of one profile (its series only grow: never swept). Series
// that did not grow are left out; a series smaller in `after` (cannot happen within one
// profile) is taken whole. Order of `after` kept. Pure.
std::vector<StackCount> StacksSince(const std::vector<StackCount>& before, std::vector<StackCount> after);

// A unique number per profile of the process, from 1 (never reused): tells a profile kept
// across a reload from its replacement. Thread-safe.
uint64_t NextProfileInstance();

// A profile's series as they were at one moment (StackProfile::Baseline), for
// StackProfile::StacksSince: the start of a window. Opaque; immutable once made.
class StackBaseline {
 public:
  virtual ~StackBaseline() = default;
};

// What serves a profile (daemon/profile_pages.h), whichever engine collects it: ProfileCollector
// (perf samples with callchains) or bpf::BpfProfile (stack maps). Thread-safety: every method
// from any thread.
class StackProfile {
 public:
  virtual ~StackProfile() = default;
  // Every series so far; a value profile's values are raw integers, to be multiplied by scale().
  virtual std::vector<StackCount> Stacks() const = 0;
  // The profile now, as the start of a window (never null). This default keeps Stacks(); a
  // profile that can tell its series apart more cheaply keeps only their values.
  virtual std::shared_ptr<const StackBaseline> Baseline() const;
  // What the profile gained since `baseline` (a Baseline() of this profile, not of another): the
  // series that grew, by how much — tpe::StacksSince(stacks then, Stacks()). This default
  // computes exactly that.
  virtual std::vector<StackCount> StacksSince(const StackBaseline& baseline) const;
  virtual double scale() const = 0;
  // NextProfileInstance() of this profile.
  virtual uint64_t instance() const = 0;
  // What a series' value counts, and in what unit (pprof's sample type): ("samples", "count"),
  // a value profile's (field name, "count"), or a CPU profile's ("cpu", "nanoseconds").
  virtual std::string value_type() const = 0;
  virtual std::string value_unit() const { return "count"; }
  // True when the profile is fed samples stamped with their time, in time order (the reader
  // thread): Stacks() read in a reader mark (Pipeline::AddMark) is the profile exactly as of the
  // mark's time. False when the kernel counts (the bpf engine): Stacks() is the profile as of
  // the call.
  virtual bool stamped() const { return true; }
};

// A CPU profile's weighting (ProfileCollector): each sample adds the ns of the clock it stands
// for (Sample::period). The idle task is left out by the kernel (attr.exclude_idle) unless the
// profile includes it: pid 0 is no reason to drop a sample, as the kernel also reports pid 0 for
// every task outside the daemon's pid namespace (perf_event_pid_type: task_tgid_nr_ns).
struct ClockWeight {
  bool include_idle = false;
};

// An off-CPU profile's pairing (ProfileCollector, fed sched:sched_switch samples with
// callchains, in time order across CPUs): at a switch the task switched out (prev_pid) is
// remembered with the time and its stack (the sample's callchain is the switching-out task's),
// and the task switched in (next_pid) adds the time since its own switch-out to the stack it left
// with. Blocks shorter than `min_block_ns` are counted, not added. The idle task (pid 0), tasks of
// process `own_pid` (the exporter) and exiting tasks (prev_state EXIT_DEAD / EXIT_ZOMBIE) are not
// remembered. At most `max_blocked` tasks are remembered at once; more are counted as dropped. A
// task switched out again before its switch-in was seen loses that block, counted as unpaired.
struct OffCpuPairing {
  FieldExtractor prev_pid, next_pid, prev_state;
  uint64_t min_block_ns = 0;
  uint32_t own_pid = 0;
  size_t max_blocked = 100000;
};

class ProfileCollector : public Collector, public StackProfile {
 public:
  // `max_stacks`: distinct (label set, stack) series kept. `value`/`scale`: see CounterCollector.
  // `clock`: a CPU profile (value type "cpu", unit "nanoseconds"; no `value`).
  ProfileCollector(std::string name, std::string help, LabelSet labels, size_t max_stacks,
                   std::optional<FieldExtractor> value = std::nullopt, double scale = 1,
                   std::optional<ClockWeight> clock = std::nullopt);
  // An off-CPU profile (value type "off_cpu", unit "nanoseconds").
  ProfileCollector(std::string name, std::string help, LabelSet labels, size_t max_stacks, OffCpuPairing off_cpu);

  const std::string& name() const override { return name_; }
  const std::string& help() const { return help_; }
  void OnSample(size_t event_index, const Sample& s, CommTable* comms) override;
  // A profile is no Prometheus family (Snapshot has no series; the pipeline leaves it off
  // /metrics): its self-metrics come through EngineStats: tracepoint_exporter_profile_samples_total,
  // _profile_stacks (distinct series held), _profile_other_context_frames_total and
  // _profile_sample_seconds_total (the reader thread's time in OnSample: the stack split, the
  // key and the table, timed with CLOCK_MONOTONIC around one call in 16 and scaled), by profile.
  MetricSnapshot Snapshot() const override;
  std::vector<EngineStat> EngineStats() const override;
  bool NeedsComm() const override { return labels_.needs_comm(); }
  bool is_profile() const override { return true; }

  const StackProfile* stack_profile() const override { return this; }
  // Where user frames are normalized, and the unwind tables a sample with user registers and a
  // stack copy (a "dwarf" profile's) is unwound with (Collector::set_user_stacks). Without
  // images, user frames are all kNoFile.
  void set_user_stacks(ProcessImages* images, unwind::CfiCache* tables) override {
    if (images != images_ || tables != tables_) span_memo_.Clear();
    images_ = images;
    tables_ = tables;
  }
  // User frames unwound at most (a "dwarf" profile; the kernel stops a callchain at its own
  // max_stack).
  void set_max_unwind_frames(size_t frames) { max_unwind_frames_ = frames; }

  // StackProfile.
  std::vector<StackCount> Stacks() const override;
  // The series' values by their keys (no stack decoded, no label rendered); StacksSince decodes
  // only the series that grew since.
  std::shared_ptr<const StackBaseline> Baseline() const override;
  std::vector<StackCount> StacksSince(const StackBaseline& baseline) const override;
  double scale() const override { return scale_; }
  uint64_t instance() const override { return instance_; }
  std::string value_type() const override {
    return clock_ ? "cpu" : off_cpu_ ? "off_cpu" : value_ ? value_->field().name : "samples";
  }
  std::string value_unit() const override { return clock_ || off_cpu_ ? "nanoseconds" : "count"; }

 private:
  std::string name_, help_;
  LabelSet labels_;
  std::optional<FieldExtractor> value_;
  double scale_ = 1;
  std::optional<ClockWeight> clock_;
  std::optional<OffCpuPairing> off_cpu_;
  struct Blocked {
    uint64_t since_ns = 0;
    std::string key;  // its series key: labels, pid, stack
  };
  std::unordered_map<uint32_t, Blocked> blocked_;  // by thread id, while switched out (reader thread)
  RelaxedCounter short_blocks_, dropped_blocks_, unpaired_, blocked_gauge_;
  // Builds key_ (labels, pid, stack) for `s`; false on a decode error (counted).
  bool BuildKey(const Sample& s, CommTable* comms);
  void OnSwitch(const Sample& s, CommTable* comms);
  // The series of `key` with `value` as a StackCount; `rendered`: label sets rendered so far.
  StackCount Decode(std::string_view key, uint64_t value,
                    std::unordered_map<std::string_view, LabelPairs>* rendered) const;
  uint64_t instance_;
  SeriesTable<WideSum> series_;  // a value profile's sums do not wrap past 2^64 (wide_sum.h)
  RelaxedCounter samples_, stacks_, other_frames_;
  RelaxedCounter sample_ns_;  // time in OnSample (CLOCK_MONOTONIC around one call in 16, times 16), ns
  uint64_t timed_calls_ = 0;
  ProcessImages* images_ = nullptr;
  unwind::CfiCache* tables_ = nullptr;
  unwind::SpanMemo span_memo_;  // reader thread: the spans of the last processes unwound
  size_t max_unwind_frames_ = 127;
  // How each "dwarf" unwind ended, by unwind::UnwindEnd.
  std::array<RelaxedCounter, unwind::kUnwindEnds> unwind_ends_;
  std::vector<uint64_t> regs_;          // reused scratch: the sample's user registers
  std::string key_;                     // reused scratch
  std::vector<uint64_t> ips_;           // reused scratch: the callchain copied out of the ring
  Callchain chain_;                     // reused scratch
  std::vector<UserFrame> user_frames_;  // reused scratch
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kProfileSamplesTotalDesc{
    "tracepoint_exporter_profile_samples_total", "Samples a profile counted into its stacks (/debug/pprof/<profile>).",
    MetricKind::kCounter};
inline constexpr MetricDesc kProfileStacksDesc{"tracepoint_exporter_profile_stacks",
                                               "Distinct (label set, stack) series a profile holds; at "
                                               "settings.max_stacks_per_profile new ones are dropped "
                                               "(tracepoint_exporter_series_dropped_total{metric}).",
                                               MetricKind::kGauge};
inline constexpr MetricDesc kProfileOtherContextFramesTotalDesc{
    "tracepoint_exporter_profile_other_context_frames_total",
    "Hypervisor and guest frames of callchains, left out of a profile's stacks.", MetricKind::kCounter};
inline constexpr MetricDesc kProfileSampleSecondsTotalDesc{
    "tracepoint_exporter_profile_sample_seconds_total",
    "Time the reader thread spent handling a perf-engine profile's samples (splitting the callchain, "
    "keying and counting the stack; CLOCK_MONOTONIC around one sample in 16, scaled), by profile. Rendering is "
    "tracepoint_exporter_profile_render_cpu_seconds_total.",
    MetricKind::kCounter};
inline constexpr MetricDesc kProfileUnwindEndsTotalDesc{
    "tracepoint_exporter_profile_unwind_ends_total",
    "How a \"dwarf\" profile's user stacks ended when unwound from the unwind tables, by "
    "reason: outermost (whole: the outermost frame reached), max_frames, no_mapping (a pc "
    "in no mapping known for the process), no_frame_pointer (code without a table whose "
    "frame pointer led nowhere), stack_copy (deeper than settings.profile_stack_bytes), "
    "bad_rule (a rule that cannot be evaluated), no_progress (a corrupt stack), "
    "no_registers (a kernel thread).",
    MetricKind::kCounter};
inline constexpr MetricDesc kProfileOffCpuShortBlocksTotalDesc{
    "tracepoint_exporter_profile_off_cpu_short_blocks_total",
    "Times a task of an off-CPU profile came back on CPU sooner than its min_block_seconds: "
    "counted here, left out of the profile.",
    MetricKind::kCounter};
inline constexpr MetricDesc kProfileOffCpuDroppedTotalDesc{
    "tracepoint_exporter_profile_off_cpu_dropped_total",
    "Switch-outs an off-CPU profile could not remember (100,000 tasks already off CPU): "
    "their time off CPU is lost.",
    MetricKind::kCounter};
inline constexpr MetricDesc kProfileOffCpuUnpairedTotalDesc{
    "tracepoint_exporter_profile_off_cpu_unpaired_total",
    "Blocks an off-CPU profile lost because the task's switch back in was never seen (it "
    "switched out again first): the kernel did not trace it. Seen on a kernel that traces "
    "no switch out of one CPU's idle task.",
    MetricKind::kCounter};
inline constexpr MetricDesc kProfileOffCpuTasksDesc{
    "tracepoint_exporter_profile_off_cpu_tasks",
    "Tasks an off-CPU profile holds as switched out (their time is added when they come back).", MetricKind::kGauge};

}  // namespace tpe
