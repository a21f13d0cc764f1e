// --print=DURATION: a quick look without Prometheus. Renders counters as "name{labels} value"
// lines and histograms as bucket tables with ASCII bars, the way bpftrace prints hist().
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "collectors/snapshot.h"
#include "common/status.h"
#include "plan/plan.h"

namespace tpe {

// Parses "500ms", "10s", "2m", "1h" (or a bare number of seconds). InvalidArgument otherwise.
StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text);

// Writes every metric of `metrics`. Bounds of metrics named *_seconds print as durations.
void PrintReport(const std::vector<MetricSnapshot>& metrics, std::ostream& out);

// What one metric cost during a --print run.
struct MetricCost {
  std::string name;
  Engine engine = Engine::kPerf;  // kBpf or kPerf
  // bpf: runs of the metric's programs (every hit, before its filter; a latency's start and end
  // runs added up). perf: hits of its perf events that passed the kernel filter (samples, or the
  // counting-mode count; a latency's start and end events added up).
  uint64_t events = 0;
  // bpf: kernel CPU time of the programs over the run (bpf_prog_info run_time_ns while
  // BPF_ENABLE_STATS was held), ns; absent when the stats could not be turned on.
  std::optional<double> kernel_ns;
  // A profile: the exporter's own time on it, ns: handling its samples in the reader (perf
  // engine: tracepoint_exporter_profile_sample_seconds_total) and rendering it (CPU time,
  // tracepoint_exporter_profile_render_cpu_seconds_total). Absent for other metrics.
  std::optional<double> profile_sample_ns, profile_render_ns;
};

// A profile's `top` heaviest stacks, bpftrace-style (frames leaf first, one per line, then the
// count), from its folded stacks ("root;...;leaf count" lines, daemon/profile_pages.h), after a header
// with the profile's name, its distinct stacks and samples.
void PrintTopStacks(const std::string& name, const std::string& folded, size_t top, std::ostream& out);

// Writes one line per metric: events, events/s over `seconds`, and for bpf metrics ns/event and
// the share of one CPU the programs took (kernel_ns / seconds); for perf metrics a pointer to
// the per-hit costs of docs/PERFORMANCE.md (the kernel does not time perf output per event). `why_no_stats`:
// why kernel_ns is absent ("" when present). Pure.
void PrintCosts(const std::vector<MetricCost>& costs, double seconds, const std::string& why_no_stats,
                std::ostream& out);

// One MetricCost per metric of `plan` (config order) with its engine: bpf metrics get their
// programs' runs and, when `stats_on`, kernel time (Collector::EngineStats); perf metrics the
// samples of the events they consume (EventPlan::consumers) or their counting-mode count. Call
// while the plan's perf events and programs are open (before the pipeline is destroyed).
std::vector<MetricCost> MetricCosts(const Plan& plan, bool stats_on);

}  // namespace tpe
