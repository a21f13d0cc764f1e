// The two pages of /metrics, written from one typed model: a collector's MetricSnapshot
// (collectors/snapshot.h: kind, series, classic and native buckets), as client_golang writes
// both formats from one dto.Metric. Both pages first make the snapshot what a page shows
// (PrepareForExposition: series that render one label set merged) and show the same series,
// values and classic buckets (cumulative, the +Inf one last); the protobuf page adds native
// buckets (spans and deltas, the schema lowered to the metric's bound), which the text format
// cannot carry. The text page goes through prometheus-cpp's TextSerializer; the protobuf page is
// one io.prometheus.client.MetricFamily (client_model's metrics.proto) per family.
//
// Thread-safety: every function is reentrant. Source: Prometheus "Exposition formats" (text
// format 0.0.4; protobuf: length-delimited MetricFamily messages, each after its varint size).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "collectors/snapshot.h"

namespace tpe {

// What both pages do to a snapshot before writing it: series whose rendered label sets are equal
// merged, in place (MergeSeriesByLabels), the first of each keeping its position.
void PrepareForExposition(MetricSnapshot* m);

// Writes `m` (prepared here) in the text exposition format: HELP with `\` and line feeds
// escaped; a histogram's classic buckets, or its +Inf bucket alone when it is native-only. The
// snapshot's strings are moved into the page's family and its series freed as they are written.
void WriteText(MetricSnapshot m, std::ostream* out);
// Writes `m` (prepared here) as one length-delimited MetricFamily message; a histogram's classic
// buckets (the +Inf one included) when it has them, and its native buckets, at most
// m.native_max_buckets populated (the schema lowered as client_golang does; logged once per
// metric). False when the stream refused the write.
bool WriteProtobuf(MetricSnapshot m, std::ostream* out);

// Pages of `metrics`, each family written in turn.
std::string SerializeText(const std::vector<MetricSnapshot>& metrics);
std::string SerializeProtobuf(const std::vector<MetricSnapshot>& metrics);

}  // namespace tpe
