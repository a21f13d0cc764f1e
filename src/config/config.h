// The JSON config: the user-facing contract (docs/ARCHITECTURE.md; every key: docs/CONFIGURATION.md), parsed into
// typed structs. This is the only file in the project that links nlohmann/json.
//
// ParseConfig checks everything that needs no kernel, and every error names the file, the JSON
// path (e.g. metrics[2].labels[0].decode) and what would be valid:
// - JSON syntax (with line and column), unknown and repeated keys, types;
// - numbers: ranges; whole numbers where a count is meant (a fraction is an error, never
//   truncated); bucket layouts the collectors accept;
// - strings: no control characters (tab and newline allowed in help and filter);
// - names: metric and label names, counters ending in _total, reserved prefixes, le reserved on
//   histogram and latency metrics, names that collide in the exposition (a histogram "h" also
//   exports h_bucket, h_sum and h_count);
// - labels: one of field/source, decode/source values.
// Checks against the running kernel (events, fields, filters) happen when the pipeline is
// planned (daemon/pipeline.h).
//
// No exception leaves ParseConfig or LoadConfig: whatever the input, they return a Status.
//
// Thread-safety: values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/config_names.h"

namespace tpe {

// Limits of the config (docs/CONFIGURATION.md documents them).
inline constexpr size_t kMaxConfigBytes = 4 << 20;  // a larger file is refused unread
// settings.max_series_per_metric: at this many series one metric's scrape is already ~100 MB of
// text and a 256-bucket histogram's series ~2 GB of counters (the former cap, 1e7, ten times
// that); no per-host metric needs more.
inline constexpr uint64_t kMaxSeriesPerMetric = 1000000;
// latency max_inflight: the in-flight table has a power-of-two capacity of at least twice this,
// 64 bytes a slot, and the periodic expiry scan walks all of it. At 1e8 that was 17 GB of
// address space and 0.6 CPU-seconds per second scanning an idle table; at 1e6 it is 128 MiB of
// (untouched until used) address space and a scan 100 times cheaper, and still more starts than
// a host has tasks waiting for anything.
inline constexpr uint64_t kMaxInflight = 1000000;
// latency timeout_seconds: converted to whole nanoseconds by the collector, so at least 1 µs
// (never 0 ns, which would expire every start at once); at most a day.
inline constexpr double kMinTimeoutSeconds = 1e-6;
inline constexpr double kMaxTimeoutSeconds = 86400;
// settings.series_idle_timeout_seconds: 0 (never), or 1 ms up to a year.
inline constexpr double kMinSeriesIdleTimeoutSeconds = 0.001;
inline constexpr double kMaxSeriesIdleTimeoutSeconds = 31536000;
// settings.max_pid_perf_events: file descriptors (LimitNOFILE in the systemd unit is 65536).
inline constexpr uint64_t kMaxPidPerfEvents = 1000000;
inline constexpr double kMinCostWindowSeconds = 0.01;
inline constexpr double kMaxCostPeriodSeconds = 86400;

struct LabelConfig {
  std::string name;
  std::string field;                         // a tracepoint field (source kField), or
  LabelSource source = LabelSource::kField;  // a property of the sample
  LabelDecode decode = LabelDecode::kAuto;   // how a field label's value is rendered
  LabelFrom from = LabelFrom::kStart;        // latency and inflight gauge only: the side read
  std::string json_path;                     // "metrics[0].labels[1]", for later error messages
};

// histogram: the observed value = field × scale. counter (optional): each event adds
// field × scale instead of 1 (empty field = count events); scale > 0.
struct ValueConfig {
  std::string field;
  double scale = 1;
};

// exp2 {min, max} | linear {start, width, count} | explicit {bounds} | native {schema,
// zero_threshold, max_buckets}; "native": true (or an object of those keys) beside classic buckets
// adds native buckets to them (collectors/native_buckets.h).
struct BucketsConfig {
  BucketType type = BucketType::kNone;  // kNone: the metric has no buckets
  double min = 0, max = 0, start = 0, width = 0;
  uint64_t count = 0;
  std::vector<double> bounds;
  bool native = false;  // native buckets: type "native", or the metric's "native" key
  uint64_t schema = 3;
  double zero_threshold = 0x1p-128;
  uint64_t max_buckets = 160;
  bool classic() const { return type != BucketType::kNative; }
  std::string json_path;
};

// latency: one side of the pair.
struct EndpointConfig {
  std::string event;             // "system:event"
  std::vector<std::string> key;  // integer fields matched between start and end
  std::string filter;            // kernel filter for this side
  // Probe events (plan/probes.h): field name -> "argN[:TYPE]" | "retval[:TYPE]", in config order.
  std::vector<std::pair<std::string, std::string>> args;
  int pid = 0;  // uprobe/usdt: only this process (0: every process)
  // kretprobe: MAXACTIVE, calls in flight whose return is caught (0: kDefaultMaxactive,
  // plan/probes.h; at most 4096, the kernel's KRETPROBE_MAXACTIVE_MAX).
  uint32_t maxactive = 0;
  std::string json_path;  // "metrics[3].start[1]"
};

// gauge: an "up" or "down" side (or, for max/min/last, the one event) of a gauge.
struct GaugeSideConfig {
  std::string event, filter;
  ValueConfig value;                // field empty: 1 per event (up/down only)
  std::vector<LabelConfig> labels;  // up/down: this side's labels (else the metric's)
  bool has_labels = false;
  std::string json_path;
};

struct MetricConfig {
  std::string name;
  std::string help;
  MetricType type = MetricType::kCounter;  // a "profiles" entry: kProfile
  // gauge: kInflight (starts/end, max_inflight, timeout_seconds as for latency), kUpDown (up,
  // down) or kMax | kMin | kLast (event, filter, value as for a histogram). kNone: not a gauge.
  GaugeKind gauge = GaugeKind::kNone;
  GaugeSideConfig up, down;
  // Which engine aggregates it (plan/plan.h says how kAuto chooses).
  Engine engine = Engine::kAuto;
  std::string event;   // "system:event" (counter, histogram)
  std::string filter;  // kernel filter syntax; empty = none (counter, histogram)
  // Probe events (plan/probes.h): field name -> "argN[:TYPE]" | "retval[:TYPE]" (counter, histogram).
  std::vector<std::pair<std::string, std::string>> args;
  int pid = 0;             // uprobe/usdt (counter, histogram): only this process (0: every process)
  uint32_t maxactive = 0;  // kretprobe (counter, histogram): as EndpointConfig::maxactive
  // Set by planning: some event of the metric is a probe event (uprobe, usdt, kprobe...).
  bool probe = false;
  std::vector<LabelConfig> labels;
  ValueConfig value;                   // histogram; counter (optional, field empty = none)
  BucketsConfig buckets;               // histogram, latency
  std::vector<EndpointConfig> starts;  // latency: "start" (an object, or an array of them)
  EndpointConfig end;                  // latency
  uint64_t max_inflight = 100000;      // latency: starts waiting for their end, at most
  double timeout_seconds = 10;         // latency: a start older than this expires
  // profile (a "profiles" entry, type kProfile): which stacks a sample carries (kNone: not a
  // profile).
  ProfileStack stack = ProfileStack::kNone;
  // profile with a user stack: how it is unwound: "dwarf" (the default: from the unwind tables
  // of the code, with the sample's registers and a copy of its stack, settings.
  // profile_stack_bytes) or "frame_pointer" (the kernel's frame-pointer walk: cheaper, but whole
  // only through code built with frame pointers). kNone for a kernel-only profile (and not a profile).
  // `unwind_given`: the config said which (else the default was taken).
  UnwindMethod unwind = UnwindMethod::kNone;
  bool unwind_given = false;
  // A CPU profile (a profile whose "event" is a software clock, IsClockEvent): "frequency_hz",
  // samples per second on each CPU (kDefaultProfileFrequencyHz when neither is given,
  // 1..kMaxProfileFrequencyHz), or "period", every this many ns of the clock
  // (kMinProfilePeriodNs..kMaxProfilePeriodNs); one of the two is 0. "include_idle": keep the
  // samples of the CPUs' idle task (left out by default).
  uint64_t frequency_hz = 0;
  uint64_t period_ns = 0;
  bool include_idle = false;
  // An off-CPU profile ("type": "off_cpu" in a "profiles" entry; its event is sched:sched_switch):
  // the time a task spends switched out, under the stack it switched out with. Blocks shorter
  // than min_block_seconds (0..kMaxMinBlockSeconds) are left out and counted.
  bool off_cpu = false;
  double min_block_seconds = 0;
  std::string json_path;  // "metrics[0]"
  // Every field above that changes what the metric counts or exports (all but json_path), with
  // defaults filled in and numbers normalized, plus the settings a collector uses
  // (max_series_per_metric, series_idle_timeout_seconds), as one string: equal across a reload
  // iff the metric is unchanged and may keep its values. A field added here must be added to
  // Canonical() in config.cc.
  std::string canonical;
};

struct Settings {
  uint32_t ring_buffer_pages = 64;         // data pages per CPU ring; power of two, 1..4096
  uint64_t max_series_per_metric = 10000;  // cardinality limit per metric; 1..kMaxSeriesPerMetric
  // A series (label set) of a metric that has seen no sample for this many seconds is removed,
  // so that dead tasks' series do not hold the cardinality limit forever. 0 = never. Seconds,
  // possibly fractional: 0, or kMinSeriesIdleTimeoutSeconds..kMaxSeriesIdleTimeoutSeconds.
  double series_idle_timeout_seconds = 600;
  // The bpf engine's cost windows (bpf/program_cost.h): every bpf_cost_period_seconds the
  // kernel's BPF run-time stats are on for bpf_cost_window_seconds, to price each program's runs
  // (tracepoint_exporter_bpf_program_cpu_seconds_total). Period 0 = never; otherwise
  // kMinCostWindowSeconds <= window <= period <= kMaxCostPeriodSeconds.
  double bpf_cost_window_seconds = 1;
  double bpf_cost_period_seconds = 60;
  // A bpf-engine map whose every element fits in this many bytes of kernel memory is allocated
  // whole when it is created (bpf_metric.h "Preallocation"): a burst of new series or latency
  // starts then never meets the kernel's allocator empty (ENOMEM, counted in
  // tracepoint_exporter_bpf_map_no_memory_total). 0 = only where the kernel needs it. Bytes,
  // 0..kMaxBpfPreallocateBytes.
  uint64_t bpf_preallocate_max_bytes = 64ULL << 20;
  // The perf events one "pid" event may hold open (file descriptors): a perf event per thread of
  // the process, on every CPU for a sampled metric (threads x CPUs), one per thread for a
  // label-less counter. A process with more threads is refused with this reason. 1..kMaxPidPerfEvents.
  uint64_t max_pid_perf_events = 8192;
  // Every this many seconds the daemon looks whether a probed binary was replaced (a package
  // upgrade) or whether the processes of a replaced one are gone, and then re-plans the running
  // config (as a reload does, without re-reading the file). 0 = only at a reload; else 1..86400.
  double probe_refresh_seconds = 10;
  // A profile keeps at most this many distinct (label set, stack) series; more are dropped and
  // counted. 1..kMaxSeriesPerMetric.
  uint64_t max_stacks_per_profile = 10000;
  // Frames of each stack at most (attr.sample_max_stack), kernel and user parts together.
  // 1..kMaxProfileFrames (the kernel's default kernel.perf_event_max_stack).
  uint64_t profile_max_frames = 127;
  // Bytes of user stack each sample of a "dwarf" profile copies for unwinding
  // (attr.sample_stack_user: perf record's default 8 KiB); a deeper stack is unwound as far as
  // the copy reaches. kMinProfileStackBytes..kMaxProfileStackBytes, a multiple of 8.
  uint64_t profile_stack_bytes = 8192;
  // Debuginfod servers that profiles' stripped binaries' debug files are fetched from (by build
  // id; cached on disk), with the meaning of elfutils' DEBUGINFOD_URLS: space-separated http:// or
  // https:// base URLs; "" none. Unset: the daemon's DEBUGINFOD_URLS environment variable.
  std::optional<std::string> debuginfod_urls;
};
inline constexpr uint64_t kMinProfileStackBytes = 512;
// perf_event_open refuses sample_stack_user above USHRT_MAX, or not a multiple of 8
// (perf_copy_attr, kernel/events/core.c).
inline constexpr uint64_t kMaxProfileStackBytes = 65528;
inline constexpr uint64_t kMaxProfileFrames = 127;
// A CPU profile's sampling: 19 Hz by default, the prime continuous profilers use so that samples
// do not fall in step with timers; the kernel's hrtimer-based clock events run at most every
// 10 us (perf_swevent_init_hrtimer), and kernel.perf_event_max_sample_rate caps the frequency.
inline constexpr uint64_t kDefaultProfileFrequencyHz = 19;
inline constexpr uint64_t kMaxProfileFrequencyHz = 10000;
inline constexpr uint64_t kMinProfilePeriodNs = 10000;
inline constexpr uint64_t kMaxProfilePeriodNs = 10000000000;  // 10 s
inline constexpr double kMaxMinBlockSeconds = 3600;
// The event of an off-CPU profile.
inline constexpr char kOffCpuEvent[] = "sched:sched_switch";

// True for the perf software clock events a profile may sample instead of a tracepoint (a CPU
// profile): "cpu-clock" (PERF_COUNT_SW_CPU_CLOCK) and "task-clock" (PERF_COUNT_SW_TASK_CLOCK).
inline bool IsClockEvent(std::string_view event) { return event == "cpu-clock" || event == "task-clock"; }
inline constexpr uint64_t kMaxBpfPreallocateBytes = 1ULL << 40;

struct Config {
  std::string path;  // the file it came from ("<string>" for ParseConfig on text)
  Settings settings;
  // "metrics" then "profiles" (type "profile", json_path "profiles[i]"): a profile is a metric
  // whose series key includes stacks (docs/ARCHITECTURE.md), planned the same way.
  std::vector<MetricConfig> metrics;
};

// Parses config text (at most kMaxConfigBytes). `path` names the file in errors.
StatusOr<Config> ParseConfig(const std::string& text, const std::string& path);
// Reads and parses a config file. Only a regular file of at most kMaxConfigBytes is read (a
// FIFO, device or directory is refused at once, without blocking; symlinks are followed).
StatusOr<Config> LoadConfig(const std::string& path);

// True for [a-zA-Z_:][a-zA-Z0-9_:]* (Prometheus metric names).
bool IsValidMetricName(const std::string& s);
// True for [a-zA-Z_][a-zA-Z0-9_]* not starting with "__" (Prometheus label names).
bool IsValidLabelName(const std::string& s);

}  // namespace tpe
