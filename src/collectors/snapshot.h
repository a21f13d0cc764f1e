// What a collector hands to the exporter at scrape time: plain values, no Prometheus types,
// so that only src/exporter links prometheus-cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tpe {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

enum class MetricKind { kCounter, kGauge, kHistogram };

struct SeriesSnapshot {
  LabelPairs labels;
  double value = 0;                     // counter / gauge
  std::vector<uint64_t> bucket_counts;  // histogram: per bucket (not cumulative), +Inf last
  double sum = 0;                       // histogram
  uint64_t count = 0;                   // histogram
};

struct MetricSnapshot {
  std::string name;
  std::string help;
  MetricKind kind = MetricKind::kCounter;
  std::vector<double> bucket_bounds;  // histogram upper bounds, increasing, without +Inf
  std::vector<SeriesSnapshot> series;
};

// Series identity is the rendered label set (DESIGN.md): series whose label names and values
// are equal after rendering (e.g. comms "a\xff" and "a\xfe" both render "a\uFFFD"; a cgroup
// deleted and re-created at one path has a new id but the same path) are one series on the page.
// Merges such series of `*m` in place: counters and gauges add their values, histograms add
// count, sum and each bucket. The first series of each label set keeps its position. O(n log n)
// in the number of series; pure; not thread-safe on one `*m`.
void MergeSeriesByLabels(MetricSnapshot* m);

}  // namespace tpe
