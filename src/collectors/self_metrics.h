// The registry the exporter's own metrics are written through: series are added under the
// MetricDesc of the code that counts them, and come out as MetricSnapshots in one order — each
// family where it was first declared or added. A new self-metric is its Desc beside its counter
// and one Add where it is read.
//
// Thread-safety: one registry is filled and taken by one thread.
#pragma once

#include <utility>
#include <vector>

#include "collectors/snapshot.h"
#include "common/metric_desc.h"

namespace tpe {

class SelfMetrics {
 public:
  // Gives `desc`'s family its place (if it has none yet). `shown_when_empty`: the page shows the
  // family (HELP and TYPE) even with no series; else only once a series is added.
  void Declare(const MetricDesc& desc, bool shown_when_empty = true);
  // Shows `desc`'s family even with no series (placing it if it has no place yet).
  void ShowEmpty(const MetricDesc& desc);
  // Adds one series to `desc`'s family, placing the family if it has no place yet.
  void Add(const MetricDesc& desc, LabelPairs labels, double value);
  // Whether `desc`'s family has a series.
  bool HasSeries(const MetricDesc& desc) const;
  // Appends the families that have a series or are shown empty, in order, to `*out`; leaves
  // the registry empty.
  void MoveTo(std::vector<MetricSnapshot>* out);

 private:
  struct Family {
    const MetricDesc* desc;
    bool shown_when_empty;
    MetricSnapshot snapshot;
  };
  Family& Place(const MetricDesc& desc, bool shown_when_empty);
  std::vector<Family> families_;  // few (tens): found by a linear search on the Desc's address
};

}  // namespace tpe
