// Content negotiation of the /metrics page (the Prometheus exposition formats,
// https://prometheus.io/docs/instrumenting/exposition_formats/, and RFC 9110 section 12.5.1 for
// the Accept header).
//
// Pure; reentrant.
#pragma once

#include <string_view>

namespace tpe {

// The exposition formats the exporter serves.
enum class ExpositionFormat {
  kText,      // text/plain; version=0.0.4
  kProtobuf,  // application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited
};

// Content-Type of each format's page.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr const char* kProtobufContentType =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

// The format a scrape with this Accept header gets (empty or absent: text). Protobuf only when
// the header names `application/vnd.google.protobuf` with `proto=io.prometheus.client.MetricFamily`
// and `encoding=delimited` (an absent encoding is taken as delimited, as Prometheus's clients
// do) at a quality (q, default 1) above 0 and at least that of any range that matches the text
// format (`text/plain`, `text/*`, `*/*`); `*/*` alone never picks protobuf. Parameters and
// media types compare case-insensitively, values of proto/encoding exactly; a malformed q counts
// as 0. Prometheus 2.42 sends, with --enable-feature=native-histograms (captured),
// "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,
// application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;
// q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1": protobuf; without it the same list minus
// the protobuf range: text.
ExpositionFormat NegotiateExposition(std::string_view accept);

}  // namespace tpe
