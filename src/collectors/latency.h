// type: latency — the time from a start event to the matching end event, in seconds, as a
// histogram: run-queue latency (sched_waking(pid) → sched_switch(next_pid)), syscall latency
// (sys_enter(common_pid) → sys_exit(common_pid)), block I/O latency (block_rq_issue(dev, sector)
// → block_rq_complete(dev, sector)).
//
// Starts and ends are matched by a key of one or more integer fields. Samples must arrive in
// timestamp order across CPUs (the reader merges the rings by timestamp); observed value =
// (end.time_ns - start.time_ns) · 1e-9 seconds. Several start events may feed one latency (e.g.
// runqlat also starts the clock when a task is preempted while runnable).
//
// Every start or end that does not become an observation is counted by reason, never lost
// silently: replaced (a second start for a key before its end; the first is dropped), no_start
// (an end without a start), table_full (a start when max_inflight starts are pending), expired
// (a start older than the timeout: swept about once a second of trace time, and an end more than
// timeout_ns after its start is never observed, as on the bpf engine), series_limit (the label set was over the
// cardinality limit).
//
// Thread-safety: OnSample/OnRoundEnd from the reader thread only; Snapshot and unmatched() from
// any thread.
#pragma once

#include <array>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectors/histogram.h"
#include "collectors/inflight_table.h"
#include "common/metric_desc.h"

namespace tpe {

// One side of a latency: its key fields and the labels taken from it.
struct LatencyEndpoint {
  std::vector<FieldExtractor> key;  // integer fields; same count and sizes on every endpoint
  LabelSet labels;                  // labels with "from" this side
};

class LatencyCollector : public Collector {
 public:
  using Reason = LatencyUnmatched::Reason;
  using enum LatencyUnmatched::Reason;
  static const char* ReasonName(Reason r) { return LatencyUnmatched::Name(r); }

  // Event index i < starts.size() is starts[i]; index starts.size() is the end. Labels render
  // as the start labels (those of starts[0]; all starts must have the same ones) then the end's.
  LatencyCollector(std::string name, std::string help, std::vector<LatencyEndpoint> starts, LatencyEndpoint end,
                   Buckets buckets, std::optional<NativeLayout> native, size_t max_series, size_t max_inflight,
                   uint64_t timeout_ns);

  const std::string& name() const override { return name_; }
  void OnSample(size_t event_index, const Sample& s, CommTable* comms) override;
  void OnRoundEnd() override;
  MetricSnapshot Snapshot() const override;
  bool NeedsComm() const override;
  bool NeedsOrdering() const override { return true; }
  void Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) override;
  std::pair<uint64_t, uint64_t> series_removed() const override { return table_.series_removed(); }

  bool is_latency() const override { return true; }
  uint64_t unmatched(Reason r) const override { return unmatched_[r].Get(); }
  size_t inflight() const override { return inflight_gauge_.load(std::memory_order_relaxed); }

 private:
  uint32_t InternStartLabels(std::string_view key);

  std::string name_, help_;
  std::vector<LatencyEndpoint> starts_;
  LatencyEndpoint end_;
  HistogramTable table_;
  InflightTable inflight_;
  uint64_t timeout_ns_;
  uint64_t last_time_ns_ = 0;
  uint64_t last_expiry_ns_ = 0;
  size_t max_series_;
  // Start label sets, interned: the in-flight table stores a small id, not the labels.
  std::unordered_map<std::string_view, uint32_t> start_label_ids_;
  std::deque<std::string> start_label_keys_;
  std::string key_, labels_, series_key_;  // reused scratch
  std::array<RelaxedCounter, kReasonCount> unmatched_;
  std::atomic<size_t> inflight_gauge_{0};  // inflight_.size(), readable from scrape threads
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kLatencyUnmatchedTotalDesc{
    "tracepoint_exporter_latency_unmatched_total",
    "Latency starts or ends that made no observation, by reason (replaced, no_start, "
    "table_full, expired, series_limit).",
    MetricKind::kCounter};
inline constexpr MetricDesc kLatencyInflightDesc{
    "tracepoint_exporter_latency_inflight", "Latency starts waiting for their end (at most the metric's max_inflight).",
    MetricKind::kGauge};

}  // namespace tpe
