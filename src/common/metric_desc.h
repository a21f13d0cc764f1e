// A metric family's identity as /metrics shows it — name, help and type — declared once, beside
// the code that counts it (as client_golang's Desc is), and used wherever the family is written.
// The values are the counting code's; which series and labels a page shows is the page's
// (collectors/self_metrics.h).
#pragma once

#include <string_view>

namespace tpe {

enum class MetricKind { kCounter, kGauge, kHistogram };

struct MetricDesc {
  std::string_view name;  // e.g. "tracepoint_exporter_samples_total"
  std::string_view help;  // the HELP text
  MetricKind kind = MetricKind::kCounter;
};

}  // namespace tpe
