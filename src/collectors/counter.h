// type: counter — how many times a tracepoint fired, per label set.
//
// Two modes:
//  * sampled: each sample's labels are packed into a key and the series' count incremented;
//  * counting mode (no labels): no samples at all — the kernel counts, and Snapshot() reads the
//    per-CPU perf event counts through `kernel_count` (perf_event_open(2) "Reading results").
//
// Thread-safety: OnSample from the reader thread only; Snapshot from any thread.
#pragma once

#include <functional>
#include <string>

#include "collectors/collector.h"
#include "collectors/label_set.h"
#include "collectors/series_table.h"

namespace tpe {

class CounterCollector : public Collector {
 public:
  // Sampled mode.
  CounterCollector(std::string name, std::string help, LabelSet labels, size_t max_series);
  // Counting mode: `kernel_count` returns the event's total count summed over CPUs.
  CounterCollector(std::string name, std::string help, std::function<uint64_t()> kernel_count);

  const std::string& name() const override { return name_; }
  void OnSample(size_t event_index, const Sample& s, CommTable* comms) override;
  MetricSnapshot Snapshot() const override;
  bool NeedsComm() const override { return labels_.needs_comm(); }
  bool counting_mode() const { return static_cast<bool>(kernel_count_); }
  void Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) override;
  std::pair<uint64_t, uint64_t> series_removed() const override {
    return {series_.removed_idle(), series_.removed_exited()};
  }
  // Counting mode, across a reload that kept this metric's perf events (they moved to the new
  // plan): reads the same kernel count through `kernel_count` from now on. Not concurrent with
  // Snapshot (the caller holds the pipeline's lock).
  void RebindKernelCount(std::function<uint64_t()> kernel_count) { kernel_count_ = std::move(kernel_count); }

 private:
  std::string name_, help_;
  LabelSet labels_;
  std::function<uint64_t()> kernel_count_;
  SeriesTable<RelaxedCounter> series_;
  std::string key_;  // reused scratch: no allocation per sample
};

}  // namespace tpe
