// --print=DURATION: a quick look without Prometheus. Renders counters as "name{labels} value"
// lines and histograms as bucket tables with ASCII bars, the way bpftrace prints hist().
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include "collectors/snapshot.h"
#include "common/status.h"

namespace tpe {

// Parses "500ms", "10s", "2m", "1h" (or a bare number of seconds). InvalidArgument otherwise.
StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text);

// Writes every metric of `metrics`. Bounds of metrics named *_seconds print as durations.
void PrintReport(const std::vector<MetricSnapshot>& metrics, std::ostream& out);

}  // namespace tpe
