// What a collector hands to the exporter at scrape time: plain values, no Prometheus types,
// so that only src/exporter links prometheus-cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/metric_desc.h"  // MetricKind

namespace tpe {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// A native histogram series (collectors/native_buckets.h): counts per bucket (not cumulative) by
// bucket index, ascending, only populated buckets.
struct NativeSnapshot {
  int32_t schema = 0;
  double zero_threshold = 0;
  uint64_t zero_count = 0;
  std::vector<std::pair<int32_t, uint64_t>> positive, negative;
  // Adds `o` (same schema and zero threshold) bucket by bucket.
  void Add(const NativeSnapshot& o);
  size_t populated() const { return positive.size() + negative.size(); }
};

struct SeriesSnapshot {
  LabelPairs labels;
  double value = 0;                      // counter / gauge
  std::vector<uint64_t> bucket_counts;   // histogram: per bucket (not cumulative), +Inf last
  double sum = 0;                        // histogram
  uint64_t count = 0;                    // histogram
  std::optional<NativeSnapshot> native;  // histogram with native buckets
};

struct MetricSnapshot {
  std::string name;
  std::string help;
  MetricKind kind = MetricKind::kCounter;
  std::vector<double> bucket_bounds;  // histogram upper bounds, increasing, without +Inf
  // Histogram: whether it has classic buckets (else bucket_bounds is empty and bucket_counts the
  // +Inf bucket alone: the text page of a native-only histogram), and when its series carry
  // native buckets, how many may be populated before the exporter lowers the schema (0: none).
  bool classic = true;
  uint32_t native_max_buckets = 0;
  // Gauge: how two series of one label set combine (MergeSeriesByLabels): inflight and up/down
  // gauges add; a max or min gauge keeps the larger or smaller value; a last gauge keeps the
  // first series' value (which came later is not known here).
  enum class Combine { kAdd, kMax, kMin, kFirst } combine = Combine::kAdd;
  std::vector<SeriesSnapshot> series;
};

// Series identity is the rendered label set (docs/ARCHITECTURE.md): series whose label names and values
// are equal after rendering (e.g. comms "a\xff" and "a\xfe" both render "a\uFFFD"; a cgroup
// deleted and re-created at one path has a new id but the same path) are one series on the page.
// Merges such series of `*m` in place: counters and gauges add their values (a max, min or last
// gauge: MetricSnapshot::combine), histograms add count, sum and each bucket. The first series of each label set keeps
// its position. O(n log n) in the number of series; pure; not thread-safe on one `*m`.
void MergeSeriesByLabels(MetricSnapshot* m);

}  // namespace tpe
