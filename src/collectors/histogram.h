// type: histogram — the distribution of a tracepoint field's value (value = field × scale), per
// label set, e.g. net:net_dev_xmit `len`, syscalls:sys_exit_read `ret`.
//
// Also the series type that type: latency (latency.h) observes into. Exported with Prometheus
// histogram semantics (_bucket{le} cumulative, +Inf, _sum, _count).
//
// Thread-safety: Observe/OnSample from the reader thread only; Snapshot from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "collectors/buckets.h"
#include "collectors/collector.h"
#include "collectors/label_set.h"
#include "collectors/native_buckets.h"
#include "collectors/series_table.h"
#include "collectors/wide_sum.h"
#include "decode/field_extractor.h"

namespace tpe {

// One histogram series: per-bucket counts (+Inf last) and the sum, written by one thread.
//
// The sum is kept as the exact integer sum of the raw values (the field's, or a latency's ns),
// 128 bits wide (wide_sum.h): values >= 0 in `sum`, the magnitudes of negative ones in
// `negative_sum`; _sum is that integer rounded once to a double, times the scale. The bpf engine
// keeps the same integers, so both engines export the same _sum for the same observations — at
// any magnitude (a double accumulated per observation drops small values added to a large sum,
// and a 64-bit integer wraps).
struct HistogramSeries {
  std::unique_ptr<RelaxedCounter[]> buckets;
  size_t n = 0;
  WideSum sum, negative_sum;
  std::unique_ptr<NativeCounts> native;  // when the metric has native buckets
  void Init(size_t count, const NativeLayout* layout) {
    n = count;
    buckets.reset(new RelaxedCounter[count]);
    if (layout != nullptr) native = std::make_unique<NativeCounts>(layout->options().schema);
  }
  // `raw`: two's complement when `is_signed`, else the u64 bit pattern.
  void Observe(size_t index, int64_t raw, bool is_signed) {
    buckets[index].Add(1);
    if (is_signed && raw < 0) {
      negative_sum.Add(0 - static_cast<uint64_t>(raw));  // INT64_MIN: 2^63
    } else {
      sum.Add(static_cast<uint64_t>(raw));
    }
  }
  // The exact sum of the raw values observed (a value it held during the call).
  int128 RawSum() const { return static_cast<int128>(sum.Get()) - static_cast<int128>(negative_sum.Get()); }
  // Observations so far (how SeriesTable sees a series change): derived from the buckets at
  // sweep/scrape time rather than kept as one more counter written per event.
  uint64_t Count() const {
    uint64_t c = 0;
    for (size_t i = 0; i < n; ++i) c += buckets[i].Get();
    return c;
  }
};

// A table of histogram series sharing one bucket layout: classic buckets (Buckets::None() for a
// native-only histogram: the +Inf bucket alone), native buckets when `native` is set, or both.
class HistogramTable {
 public:
  // `scale`: what a raw value is multiplied by (the value's scale; a latency's 1e-9 s per ns).
  HistogramTable(Buckets buckets, std::optional<NativeLayout> native, double scale, size_t max_series)
      : buckets_(std::move(buckets)), native_(std::move(native)), scale_(scale), series_(max_series) {}
  // Adds `v` (= raw × scale; raw read as signed when `is_signed`) to the series of `key`: its
  // classic bucket by `v`, its native bucket and its sum by `raw`. False when the cardinality
  // limit drops it.
  bool Observe(std::string_view key, double v, int64_t raw, bool is_signed);
  // Fills name/help/kind/bounds and one SeriesSnapshot per series (labels from `render`).
  template <typename Render>
  MetricSnapshot Snapshot(const std::string& name, const std::string& help, Render&& render) const {
    MetricSnapshot m;
    m.name = name;
    m.help = help;
    m.kind = MetricKind::kHistogram;
    m.bucket_bounds = buckets_.bounds();
    m.classic = !buckets_.bounds().empty();
    if (native_) m.native_max_buckets = native_->options().max_buckets;
    const size_t n = buckets_.bounds().size() + 1;
    series_.ForEach([&](std::string_view key, const HistogramSeries& h) {
      SeriesSnapshot s;
      s.labels = render(key);
      s.bucket_counts.resize(n);
      for (size_t i = 0; i < n; ++i) {
        s.bucket_counts[i] = h.buckets[i].Get();
        s.count += s.bucket_counts[i];  // _count is the +Inf bucket, consistent by construction
      }
      s.sum = ToDouble(h.RawSum()) * scale_;
      if (h.native) {
        // The native buckets are read after the classic ones and the writer adds to them second,
        // so they may hold an observation more: the count is theirs, as Prometheus checks it
        // against them (a count below the buckets fails the whole scrape).
        s.native = h.native->Snapshot(*native_);
        s.count = s.native->zero_count;
        for (const auto& [i, c] : s.native->positive) s.count += c;
        for (const auto& [i, c] : s.native->negative) s.count += c;
      }
      m.series.push_back(std::move(s));
    });
    return m;
  }
  const Buckets& buckets() const { return buckets_; }
  template <typename IsExited>
  void Sweep(uint64_t now_ns, uint64_t idle_ns, IsExited&& is_exited) {
    series_.Sweep(now_ns, idle_ns, is_exited);
  }
  std::pair<uint64_t, uint64_t> series_removed() const { return {series_.removed_idle(), series_.removed_exited()}; }

 private:
  Buckets buckets_;
  std::optional<NativeLayout> native_;
  double scale_;
  SeriesTable<HistogramSeries> series_;
};

class HistogramCollector : public Collector {
 public:
  // `value` must be a numeric field (FieldFormat::IsNumeric()); observed value = field × scale.
  HistogramCollector(std::string name, std::string help, LabelSet labels, FieldExtractor value, double scale,
                     Buckets buckets, std::optional<NativeLayout> native, size_t max_series);

  const std::string& name() const override { return name_; }
  void OnSample(size_t event_index, const Sample& s, CommTable* comms) override;
  MetricSnapshot Snapshot() const override;
  bool NeedsComm() const override { return labels_.needs_comm(); }
  void Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) override {
    table_.Sweep(now_ns, idle_ns, [&](std::string_view key) { return labels_.NamesExitedTask(key, exited); });
  }
  std::pair<uint64_t, uint64_t> series_removed() const override { return table_.series_removed(); }

 private:
  std::string name_, help_;
  LabelSet labels_;
  FieldExtractor value_;
  double scale_;
  HistogramTable table_;
  std::string key_;  // reused scratch
};

}  // namespace tpe
