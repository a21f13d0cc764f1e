#include "collectors/self_metrics.h"

#include <string>

namespace tpe {

SelfMetrics::Family& SelfMetrics::Place(const MetricDesc& desc, bool shown_when_empty) {
  for (Family& f : families_) {
    if (f.desc == &desc) return f;
  }
  Family f{&desc, shown_when_empty, MetricSnapshot{}};
  f.snapshot.name = std::string(desc.name);
  f.snapshot.help = std::string(desc.help);
  f.snapshot.kind = desc.kind;
  families_.push_back(std::move(f));
  return families_.back();
}

void SelfMetrics::Declare(const MetricDesc& desc, bool shown_when_empty) { Place(desc, shown_when_empty); }

void SelfMetrics::ShowEmpty(const MetricDesc& desc) { Place(desc, true).shown_when_empty = true; }

void SelfMetrics::Add(const MetricDesc& desc, LabelPairs labels, double value) {
  SeriesSnapshot s;
  s.labels = std::move(labels);
  s.value = value;
  Place(desc, false).snapshot.series.push_back(std::move(s));
}

bool SelfMetrics::HasSeries(const MetricDesc& desc) const {
  for (const Family& f : families_) {
    if (f.desc == &desc) return !f.snapshot.series.empty();
  }
  return false;
}

void SelfMetrics::MoveTo(std::vector<MetricSnapshot>* out) {
  for (Family& f : families_) {
    if (f.shown_when_empty || !f.snapshot.series.empty()) out->push_back(std::move(f.snapshot));
  }
  families_.clear();
}

}  // namespace tpe
