// type: counter — how many times a tracepoint fired, per label set.
//
// Two modes:
//  * sampled: each sample's labels are packed into a key and the series' count incremented;
//    with a `value` field (config "value": {"field", "scale"}), the series adds the field's
//    value instead of 1 (bpftrace sum()). The series holds the integer sum of the raw field
//    values, 128 bits wide (WideSum: exact past 2^64, so a huge value never wraps it back), and
//    Snapshot() renders it as the nearest double times `scale` (> 0): exact, allocation-free on
//    the hot path, any positive scale (e.g. 512 for sectors, 1e-9 for ns), and never
//    decreasing. A negative value
//    (signed fields) is never subtracted: the sample is skipped and counted as a decode error
//    (tracepoint_exporter_decode_errors_total{metric}); so is a field outside the payload.
//  * counting mode (no labels): no samples at all — the kernel counts, and Snapshot() reads the
//    per-CPU perf event counts through `kernel_count` (perf_event_open(2) "Reading results").
//
// Thread-safety: OnSample from the reader thread only; Snapshot from any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "collectors/collector.h"
#include "collectors/label_set.h"
#include "collectors/series_table.h"
#include "collectors/wide_sum.h"

namespace tpe {

class CounterCollector : public Collector {
 public:
  // Sampled mode.
  CounterCollector(std::string name, std::string help, LabelSet labels, size_t max_series);
  // Sampled mode adding `value` × `scale` (scale > 0) per sample; `labels` may be empty.
  CounterCollector(std::string name, std::string help, LabelSet labels, size_t max_series, FieldExtractor value,
                   double scale);
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
  // Counting mode: the count so far (0 when not in counting mode). Same locking as Rebind.
  uint64_t KernelCount() const { return kernel_count_ ? kernel_count_() : 0; }

 private:
  std::string name_, help_;
  LabelSet labels_;
  std::function<uint64_t()> kernel_count_;
  std::optional<FieldExtractor> value_;  // value mode: the integer field summed per series
  double scale_ = 1;                     // value mode: applied at Snapshot
  SeriesTable<WideSum> series_;          // counts, or sums of raw values
  std::string key_;                      // reused scratch: no allocation per sample
};

}  // namespace tpe
