// A metric of the bpf engine: counter, histogram, latency or gauge aggregated in the kernel by
// generated tracepoint programs (programs.h) into BPF maps, read at scrape.
//
// Gauges (collectors/gauge.h for what each kind means; the same pages as the perf engine's):
//  * inflight: the latency metric's start program and an end program that only takes its start
//    out of the starts map; the gauge is the starts map's entries counted by their start labels
//    at scrape (expired starts leave it at the sweep, as a latency metric's). A label set whose
//    count fell to 0 shows 0 until it has been 0 for idle_ns.
//  * up/down: the up and down programs add their raw values (or 1) to slots 0 and 1 of the label
//    set's per-CPU value; the gauge is up × scale - down × scale, each sum read as its field's
//    signedness says. A series goes idle only at 0. A change refused a series (the map full) is
//    kept aside in the refused map, and the series the label set later gets starts at it
//    (programs.h GaugeShape): a down whose up was refused never takes a series below 0. The
//    sweep deletes refused entries of exited tasks and those back at 0.
//  * max/min/last: each CPU keeps the extreme (last: latest, with its time) raw value of a window
//    in record window & 1 of its value (programs.h GaugeShape). A scrape raises the window number
//    in the epoch map, waits for an RCU grace period (loader.h WaitForProgramRuns: every program
//    run that read the old number has returned), then combines the CPUs' records of the closed
//    window, which no run writes again before the next scrape opens window + 2: no value of a
//    window is lost to a racing scrape or shown twice (the sweep's own race: MapSeries::SetMayIdle). A series goes when
//    it has been idle for idle_ns and holds no window after the last one a scrape read (MapSeries::SetMayIdle,
//    kWindowed).
//
// Lifecycle: Create() builds the maps and loads (verifies) the programs without attaching them
// — so a plan can be checked, and an unchanged metric kept across a reload keeps its maps and
// counts; Attach() attaches each program once (loader.h); Detach() (or destruction) detaches.
//
// Exactness: every run of a program is counted in its stats map (tracepoint_exporter_bpf_
// program_runs_total); runs the kernel skipped because another BPF program was running on that
// CPU are the program's recursion_misses (bpf_prog_info); a label set that does not fit the map
// is series_dropped_total; a negative counter value is a decode error; latency starts and ends
// that pair with nothing are counted by reason in the kernel (replaced, no_start, table_full,
// expired) and by the user-space sweep (expired). So runs == observed + filtered + counted
// drops, and hits == runs + misses.
//
// Preallocation: by default (Linux 6.1+ off PREEMPT_RT) a hash map allocates each element when a
// program inserts it, from per-CPU caches the kernel refills asynchronously; a burst of new
// series (or latency starts) on one CPU can empty them, and the insert fails with ENOMEM although
// memory is free (reproduced: 2 x 300,000 new series in a loop, 11 lost to ENOMEM). Maps whose
// full size is at most BpfMetricSpec::preallocate_max_bytes (settings.bpf_preallocate_max_bytes,
// default 64 MiB) are therefore created preallocated; larger ones stay dynamic, and their ENOMEMs
// are counted (bpf_map_no_memory_total), never silent.
//
// Series lifetime as for the perf engine (Collector::Sweep), in MapSeries (map_series.h): series
// unchanged for idle_ns, and series of exited tasks, leave the map at the sweep (no scrape
// needed) and their final values stay in user space until a scrape has exported them; latency
// starts older than the timeout are deleted and counted as expired.
//
// Thread-safety: Create/Attach/Detach on the owning (main) thread; Sweep on the sweeper thread;
// Snapshot and the counters from any thread (map reads are syscalls; user-space state is
// guarded by a mutex).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bpf/loader.h"
#include "bpf/map_series.h"
#include "bpf/program_cost.h"
#include "bpf/programs.h"
#include "bpf/start_sweep.h"
#include "collectors/buckets.h"
#include "collectors/collector.h"
#include "collectors/gauge.h"
#include "collectors/label_set.h"
#include "collectors/native_buckets.h"
#include "common/metric_desc.h"
#include "common/scoped_fd.h"
#include "filter/filter.h"

namespace tpe::bpf {

// One tracepoint side of a metric, as the plan describes it.
struct BpfEndpoint {
  std::string event;           // "system:name", for self-metrics and messages
  uint64_t tracepoint_id = 0;  // perf_event_attr.config
  std::optional<FilterExpr> filter;
  LabelSet labels;              // counter/histogram: all labels; latency: this side's labels
  std::vector<FieldRef> match;  // latency: the key fields
  // A probe event (uprobe, USDT, kprobe): its program is a BPF_PROG_TYPE_KPROBE one that
  // materializes this record (probe_record.h). Unset: a tracepoint.
  std::optional<ProbeRecord> probe;
  // An up/down gauge's side: the field it adds (unset: 1) and its scale.
  std::optional<FieldRef> value;
  double scale = 1;
  // A CPU profile's software clock (kProfile only; tracepoint_id, filter, match and probe
  // unused): its program is a BPF_PROG_TYPE_PERF_EVENT one, which the pipeline attaches to the
  // per-CPU clock events it opens (PERF_EVENT_IOC_SET_BPF at each open, CPU hotplug included;
  // plan/plan.h EventPlan::bpf_profile) and which returns 0, so the kernel writes no sample
  // for the overflow (bpf_overflow_handler, kernel/events/core.c). Attach() attaches nothing.
  bool clock = false;
};

struct BpfMetricSpec {
  // kProfile: a counter of samples keyed by labels ++ StackKey (programs.h), for BpfProfile
  // (bpf_profile.h), which reads it; never swept.
  // kGauge: starts = {the start} and end (inflight), starts = {up} and end = down (up/down), or
  // the event as `end` with `value` and `scale` (max/min/last).
  enum class Kind { kCounter, kHistogram, kLatency, kProfile, kGauge } kind = Kind::kCounter;
  using Gauge = GaugeCollector::Kind;  // the perf engine's kinds (collectors/gauge.h)
  Gauge gauge = Gauge::kInflight;
  std::string name, help;
  // counter and histogram: starts is empty and `end` is the event.
  std::vector<BpfEndpoint> starts;
  BpfEndpoint end;
  std::optional<FieldRef> value;  // counter (optional) and histogram: the field
  double scale = 1;
  std::optional<Buckets> buckets;  // histogram, latency (Buckets::None() for native buckets alone)
  // Native buckets (histogram, latency): the series' values are cells (programs.h NativeShape).
  std::optional<NativeLayout> native;
  size_t max_series = 10000;
  size_t max_inflight = 100000;  // latency
  uint64_t timeout_ns = 10'000'000'000ULL;
  // Hash maps of at most this many bytes when full (PreallocatedBytes) are preallocated: see
  // "Preallocation" above. 0: only where the kernel needs it (LoadOptions::preallocate_maps).
  uint64_t preallocate_max_bytes = 64ULL << 20;
  // kProfile: which stacks to take, the stack map's size (distinct stacks, each part's counted
  // apart) and depth (frames per stack, at most kernel.perf_event_max_stack: stack_map_alloc()
  // refuses deeper values with EINVAL).
  bool kernel_stack = true, user_stack = true;
  uint32_t max_stacks = 10000;
  uint32_t max_frames = 127;
  // kProfile with a user stack: the map of process image stamps (bpf/image_stamps.h; not owned,
  // lives as long as the process), or -1 (every key's image_ns 0: the image that predates).
  int image_stamps_fd = -1;
  // kProfile on a clock (end.clock): the ns of the clock each sample stands for (the events'
  // fixed sample_period), the profile's scale.
  uint64_t clock_period_ns = 0;
  // kProfile of off-CPU time (end is sched:sched_switch; programs.h OffCpuShape): the switch's
  // fields, the exporter's process (left out) and the shortest block added; the switched-out
  // tasks wait in a hash of at most max_inflight entries.
  struct OffCpu {
    FieldRef prev_pid, next_pid, prev_state;
    uint32_t own_tgid = 0;
    uint64_t min_block_ns = 0;
  };
  std::optional<OffCpu> off_cpu;
};

// The kernel memory of a hash map with every element allocated, as htab_map_alloc() preallocates
// it: max_entries elements of a header (struct htab_elem: 48 bytes on x86-64) + the key rounded
// to 8 + the value rounded to 8 (a per-CPU map: a pointer in the element and the value in each
// possible CPU's area). An estimate within a few percent of the memlock line (the bucket array is
// extra: 8 bytes per bucket).
uint64_t PreallocatedBytes(uint32_t key_size, uint32_t value_size, uint32_t max_entries, bool per_cpu, uint32_t cpus);

class BpfMetric : public Collector {
 public:
  using Reason = LatencyUnmatched::Reason;

  // Checks that every part can be expressed (Unimplemented with the reason otherwise), creates
  // the maps and loads the programs (the verifier's errors are Internal with its log;
  // PermissionDenied names CAP_BPF). Nothing is attached yet.
  static StatusOr<std::unique_ptr<BpfMetric>> Create(BpfMetricSpec spec);
  // A metric checked like Create but with no maps and no programs (needs no privilege): for a
  // reload, where the running pipeline's metric of the same identity is kept in its place.
  // Attach() on it fails.
  static StatusOr<std::unique_ptr<BpfMetric>> CreateUnloaded(BpfMetricSpec spec);
  bool loaded() const { return values_.valid(); }
  ~BpfMetric() override;

  // Attaches every program (idempotent). Errors as AttachTracepoint's; on error nothing stays
  // attached. A clock's program (BpfEndpoint::clock) runs on the events the pipeline attaches it
  // to, from their open to their close: Attach and Detach only mark it.
  Status Attach() override;
  void Detach() override;
  bool attached() const override { return !attach_fds_.empty() || clock_attached_; }
  // The loaded program of the end event (its fd, owned by this metric), -1 when not loaded: for
  // a clock, what the pipeline attaches to its perf events.
  int end_program_fd() const { return programs_.empty() ? -1 : programs_.back().fd.get(); }

  const std::string& name() const override { return spec_.name; }
  void OnSample(size_t, const Sample&, CommTable*) override {}  // no samples: the kernel aggregates
  MetricSnapshot Snapshot() const override;
  bool NeedsComm() const override { return false; }
  bool NeedsOrdering() const override { return false; }
  void Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) override;
  bool SweepsOffReader() const override { return true; }
  // Measures each program's ns per run over the window (ProgramCost), for the self-metric
  // tracepoint_exporter_bpf_program_cpu_seconds_total.
  void OnCostWindow(bool open) override;
  std::pair<uint64_t, uint64_t> series_removed() const override;
  uint64_t series_dropped() const override;
  uint64_t decode_errors() const override;
  // Stats slot `slot` (programs.h Stat) summed over CPUs and programs. 0 when not loaded.
  uint64_t stat(Stat slot) const { return Stats()[slot]; }
  // Hits not counted because a map update failed with ENOMEM (the kernel could not allocate
  // the element; kNoMemory in every program): not a cardinality drop.
  uint64_t no_memory() const;
  // Kernel memory of this metric's maps (values, zero, starts, stack, epoch, stats and probe
  // record maps), bytes, as the
  // kernel charges it (MapMemoryBytes). 0 when not loaded.
  uint64_t map_memory_bytes() const;

  // A latency metric, or an inflight gauge (its unmatched starts and ends are reported alike).
  bool is_latency() const override { return latency() || inflight_gauge(); }
  uint64_t unmatched(Reason r) const override;
  size_t inflight() const override;
  // Program runs, misses and run time (per program), no_memory and map_memory_bytes.
  std::vector<EngineStat> EngineStats() const override;

  // Per program ("event", or "start", "start1", ..., "end"): its tracepoint, runs counted by
  // the program, and the kernel's stats.
  struct ProgramReport {
    std::string role, event;
    uint64_t runs = 0;
    ProgramStats kernel;
    uint64_t busy = 0;           // probe programs: runs skipped preempting another run (kBusy; probe_record.h)
    uint64_t string_faults = 0;  // probe programs: string arguments left empty (kStringFaults)
    bool probe = false;          // a probe event's program (busy and string_faults apply)
  };
  std::vector<ProgramReport> Programs() const;
  // The generated instructions of each program, disassembled (for --print and tests).
  std::string Disassembly() const;
  // The map of series (program key → per-CPU values), for tests and benchmarks that fill it.
  int values_fd() const { return values_.get(); }
  // kProfile: the stack map (stack id → max_frames u64 instruction pointers, zero-padded), and
  // the program key's layout (labels; a profile's StackKey follows at stack_key_offset()).
  int stacks_fd() const { return stacks_.get(); }
  const KeyLayout& key_layout() const { return key_; }
  uint32_t key_size() const { return key_size_; }
  // kProfile: where the StackKey is in the key (the labels' size rounded up to 8 bytes).
  uint32_t stack_key_offset() const { return cell_off_; }
  const BpfMetricSpec& spec() const { return spec_; }

 private:
  struct Program {
    std::string role;
    const BpfEndpoint* endpoint = nullptr;
    std::vector<bpf_insn> insns;
    ScopedFd fd;
    ScopedFd stats;   // this program's stats map
    ScopedFd record;  // a probe program's record (per-CPU array of one ProbeRecord::size value)
    std::unique_ptr<ProgramCost> cost = std::make_unique<ProgramCost>();
  };
  explicit BpfMetric(BpfMetricSpec spec) : spec_(std::move(spec)) {}
  bool latency() const { return spec_.kind == BpfMetricSpec::Kind::kLatency; }
  bool gauge(BpfMetricSpec::Gauge g) const { return spec_.kind == BpfMetricSpec::Kind::kGauge && spec_.gauge == g; }
  bool inflight_gauge() const { return gauge(BpfMetricSpec::Gauge::kInflight); }
  bool extreme_gauge() const {
    return spec_.kind == BpfMetricSpec::Kind::kGauge && spec_.gauge != BpfMetricSpec::Gauge::kInflight &&
           spec_.gauge != BpfMetricSpec::Gauge::kUpDown;
  }
  // Gauges' snapshots (see the header).
  void InflightSeries(MetricSnapshot* s) const;
  void UpDownSeries(const std::map<std::string, std::vector<uint64_t>>& merged, MetricSnapshot* s) const;
  void ExtremeSeries(MetricSnapshot* s) const;
  // An up/down series' value: slot 0 (up) × its scale - slot 1 (down) × its scale, each sum read
  // as signed when its side's field is.
  double UpDownValue(const std::vector<uint64_t>& v) const;
  // The labels a non-latency metric's series render with: an up/down gauge's up side's (as the
  // perf engine's), else the event's.
  const LabelSet& OwnLabels() const {
    return gauge(BpfMetricSpec::Gauge::kUpDown) ? spec_.starts.front().labels : spec_.end.labels;
  }
  // Lays out keys, emits the programs and (with `create`) creates the maps and loads them
  // (bpf_metric_build.cc), by steps:
  Status Build(bool create);
  bool pairs() const { return latency() || inflight_gauge(); }  // starts paired with ends (starts map)
  // 1. The key layouts, thresholds and value slots: every Unimplemented, before any map exists.
  //    `native`: the native buckets' shape for the programs (none without native buckets).
  Status LayOut(std::optional<NativeShape>* native);
  // 2. Emits the programs into programs_ with the maps of `fds` (placeholders the first time:
  //    shape errors only): the event's (counter, histogram, profile), a gauge's sides, or the
  //    starts' and the end's (latency, inflight gauge).
  Status EmitPrograms(const MapFds& fds, const std::optional<NativeShape>& native);
  Status EmitGaugePrograms(const MapFds& fds);
  Status EmitPairPrograms(const MapFds& fds, const std::optional<NativeShape>& native);
  Status AddProgram(std::string role, const BpfEndpoint* ep, StatusOr<std::vector<bpf_insn>> insns);
  // The values map's entries: the series (native: their cells, within 2^22); 1 for an inflight
  // gauge (its end observes nothing).
  uint32_t ValueEntries() const;
  // 3. Creates the maps (preallocated when small enough: "Preallocation" in the header) and
  //    returns their fds (the stats and record maps are each program's: step 4).
  StatusOr<MapFds> CreateMaps();
  // 4. Emits each program again with the real maps and its own stats (and record) map, and loads
  //    it (the verifier's errors are Internal with its log).
  Status LoadPrograms(MapFds fds, const std::optional<NativeShape>& native);
  // 5. The reader of the values map's series (series_).
  void OpenSeries();
  // The endpoints: the starts, then the end.
  std::vector<BpfEndpoint*> Endpoints();
  // Sums the per-CPU stats slots of every program.
  std::array<uint64_t, kStatCount> Stats() const;
  // The label key of a program key; a native cell's key keeps its cell as the last 8 bytes.
  std::string LabelKey(std::string_view bpf_key) const;
  std::string LabelKeyOfLabels(std::string_view bpf_key) const;
  // Native buckets: adds to *s one series per label set of `cells` (label key with its cell ->
  // {count, raw sum}), its classic buckets, native buckets and sum (raw × scale) added up.
  void AddNativeSeries(const std::map<std::string, std::vector<uint64_t>>& cells, bool signed_sum, double scale,
                       MetricSnapshot* s) const;
  LabelPairs Render(std::string_view bpf_key) const;

  BpfMetricSpec spec_;
  KeyLayout key_;        // counter/histogram labels; latency: the end labels
  KeyLayout start_key_;  // latency: the start labels
  uint32_t key_size_ = 8, value_slots_ = 1;
  // Where the values' wide sums begin (slot) and how many (MapShape::wide_at, wide_sums).
  uint32_t wide_at_ = 0, wide_sums_ = 0;
  bool keyless_ = false;  // no labels, not latency: the values map is a 1-entry per-CPU array
  // The program does not count its runs (CountsRuns): they are the key-less value's count.
  bool runs_in_value_ = false;
  uint64_t KeylessCount() const;
  bool per_cpu_ = true;
  std::vector<uint64_t> thresholds_;
  uint32_t cell_off_ = 0;  // native: where a key's cell begins (its labels rounded up to 8 bytes)
  ScopedFd values_, zero_, starts_, stacks_, epoch_map_;
  ScopedFd refused_, lost_;  // up/down gauges: changes refused a series (programs.h GaugeShape)
  // Up/down: deletes the refused map's entries of exited tasks (`dead`, null: no label names a
  // task) and those back at 0 (sweep thread).
  void SweepRefused(const std::function<bool(const std::string&)>& dead);
  std::vector<Program> programs_;
  std::vector<TracepointAttachment> attach_fds_;
  bool clock_attached_ = false;

  std::unique_ptr<MapSeries> series_;  // the values map's series, live and retired
  mutable std::mutex mu_;              // guards the counts below
  uint64_t removed_idle_ = 0, removed_exited_ = 0;
  StartSweepCounts swept_;                 // latency: the sweeps' expired, replaced and table_full; inflight: the last
  std::unique_ptr<KernelMap> starts_map_;  // latency: the starts map, for start_sweeper_
  std::unique_ptr<StartSweeper> start_sweeper_;  // latency; sweep thread only
  // Inflight gauge: label key -> when its count was last seen above 0 (CLOCK_MONOTONIC ns).
  // At most max_series; label sets beyond are refused (series_dropped: once per label set while
  // it has starts).
  mutable std::map<std::string, uint64_t> inflight_seen_;
  mutable std::set<std::string> inflight_refused_;
  mutable uint64_t inflight_refused_total_ = 0;
  bool start_names_tasks_ = false;  // a start label names a task (pid/tid)
  // Max/min/last: the open window (the epoch map's value); scrapes close it one at a time.
  mutable std::mutex window_mu_;
  mutable std::atomic<uint64_t> window_{1};
  mutable std::atomic<uint64_t> read_through_{0};  // the last window a scrape read (0: none)
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kBpfProgramRunsTotalDesc{
    "tracepoint_exporter_bpf_program_runs_total",
    "Runs of each bpf-engine program (every hit of its tracepoint, before its filter), counted "
    "by the program.",
    MetricKind::kCounter};
inline constexpr MetricDesc kBpfProgramMissesTotalDesc{
    "tracepoint_exporter_bpf_program_misses_total",
    "Hits of the tracepoint the kernel did not run the program for, because another BPF program "
    "was running on that CPU (bpf_prog_info.recursion_misses; Linux 6.7 for tracepoint and probe "
    "programs). hits = runs + misses (+ busy for probe programs).",
    MetricKind::kCounter};
inline constexpr MetricDesc kBpfProbeBusyTotalDesc{
    "tracepoint_exporter_bpf_probe_busy_total",
    "Runs of a probe event's program (uprobe, USDT, kprobe) that preempted another run of it on "
    "the same CPU and skipped the event, counted by the program on every kernel.",
    MetricKind::kCounter};
inline constexpr MetricDesc kBpfProbeStringFaultsTotalDesc{
    "tracepoint_exporter_bpf_probe_string_faults_total",
    "String arguments a probe event's program could not read and counted as the empty "
    "string: a bad pointer, or a user page not resident (a BPF program cannot fault it "
    "in; the perf engine's fetch does, which is why \"auto\" puts metrics that read a "
    "uprobe's string on perf).",
    MetricKind::kCounter};
inline constexpr MetricDesc kBpfProgramRunSecondsTotalDesc{
    "tracepoint_exporter_bpf_program_run_seconds_total",
    "Kernel CPU time spent in the program (bpf_prog_info.run_time_ns; counted only while the "
    "sysctl kernel.bpf_stats_enabled is 1).",
    MetricKind::kCounter};
inline constexpr MetricDesc kBpfProgramCpuSecondsTotalDesc{
    "tracepoint_exporter_bpf_program_cpu_seconds_total",
    "Kernel CPU time spent in the program, estimated without leaving BPF run-time stats on: "
    "its runs priced at the ns per run measured in the latest cost window "
    "(settings.bpf_cost_window_seconds every settings.bpf_cost_period_seconds). Absent until a "
    "window has measured it, and where stats cannot be turned on (CAP_SYS_ADMIN, Linux 5.8).",
    MetricKind::kCounter};
inline constexpr MetricDesc kBpfMapNoMemoryTotalDesc{
    "tracepoint_exporter_bpf_map_no_memory_total",
    "Hits a bpf-engine metric could not count because the kernel failed to allocate a map "
    "element (ENOMEM from the map update; not the cardinality limit, which is "
    "series_dropped_total, nor the in-flight limit, which is latency_unmatched_total "
    "{reason=\"table_full\"}).",
    MetricKind::kCounter};
inline constexpr MetricDesc kBpfMapMemoryBytesDesc{
    "tracepoint_exporter_bpf_map_memory_bytes",
    "Kernel memory of a bpf-engine metric's maps, as the kernel charges it (the memlock line "
    "of /proc/self/fdinfo: a hash map's bucket array is allocated up front for "
    "max_series_per_metric, elements as series appear).",
    MetricKind::kGauge};

}  // namespace tpe::bpf
