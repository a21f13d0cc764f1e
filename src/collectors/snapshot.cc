#include "collectors/snapshot.h"

#include <algorithm>
#include <map>

namespace tpe {

void MergeSeriesByLabels(MetricSnapshot* m) {
  if (m->series.size() < 2) return;
  // Key: the rendered label set, names and values, in the metric's label order. A metric's
  // series all carry the same label names in one order; sorting the pairs makes the key
  // independent of order anyway.
  std::map<LabelPairs, size_t> first;  // label set -> index in `merged`
  std::vector<SeriesSnapshot> merged;
  merged.reserve(m->series.size());
  for (auto& s : m->series) {
    LabelPairs key = s.labels;
    std::sort(key.begin(), key.end());
    auto [it, inserted] = first.emplace(std::move(key), merged.size());
    if (inserted) {
      merged.push_back(std::move(s));
      continue;
    }
    SeriesSnapshot& into = merged[it->second];
    switch (m->combine) {
      case MetricSnapshot::Combine::kAdd:
        into.value += s.value;
        break;
      case MetricSnapshot::Combine::kMax:
        into.value = std::max(into.value, s.value);
        break;
      case MetricSnapshot::Combine::kMin:
        into.value = std::min(into.value, s.value);
        break;
      case MetricSnapshot::Combine::kFirst:
        break;
    }
    into.sum += s.sum;
    into.count += s.count;
    if (into.bucket_counts.size() < s.bucket_counts.size()) into.bucket_counts.resize(s.bucket_counts.size(), 0);
    for (size_t i = 0; i < s.bucket_counts.size(); ++i) into.bucket_counts[i] += s.bucket_counts[i];
    if (s.native) {
      if (into.native) {
        into.native->Add(*s.native);
      } else {
        into.native = std::move(s.native);
      }
    }
  }
  m->series = std::move(merged);
}

}  // namespace tpe
