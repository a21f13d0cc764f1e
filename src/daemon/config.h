// The JSON config: the user-facing contract (../shared/DESIGN.md "Configuration"), parsed into
// typed structs. This is the only file in the project that links nlohmann/json.
//
// ParseConfig checks everything that needs no kernel: JSON syntax, unknown keys, types, metric
// and label names, counters ending in _total, duplicate names, one of field/source per label,
// decode/source values, settings ranges. Checks against the running kernel (events, fields,
// filters) happen when the pipeline is planned (daemon/pipeline.h). Every error names the file,
// the JSON path (e.g. metrics[2].labels[0].decode) and what would be valid.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tpe {

struct LabelConfig {
  std::string name;
  std::string field;            // a tracepoint field, or
  std::string source;           // comm | pid | tid | cpu
  std::string decode = "auto";  // auto | hex | inet | symbolic | syscall
  std::string from = "start";   // latency only: start | end
  std::string json_path;        // "metrics[0].labels[1]", for later error messages
};

// histogram: the observed value = field × scale.
struct ValueConfig {
  std::string field;
  double scale = 1;
};

// exp2 {min, max} | linear {start, width, count} | explicit {bounds}.
struct BucketsConfig {
  std::string type;
  double min = 0, max = 0, start = 0, width = 0;
  uint64_t count = 0;
  std::vector<double> bounds;
  std::string json_path;
};

// latency: one side of the pair.
struct EndpointConfig {
  std::string event;             // "system:event"
  std::vector<std::string> key;  // integer fields matched between start and end
  std::string filter;            // kernel filter for this side
  std::string json_path;         // "metrics[3].start[1]"
};

struct MetricConfig {
  std::string name;
  std::string help;
  std::string type;    // counter | histogram | latency
  std::string event;   // "system:event" (counter, histogram)
  std::string filter;  // kernel filter syntax; empty = none (counter, histogram)
  std::vector<LabelConfig> labels;
  ValueConfig value;                   // histogram
  BucketsConfig buckets;               // histogram, latency
  std::vector<EndpointConfig> starts;  // latency: "start" (an object, or an array of them)
  EndpointConfig end;                  // latency
  uint64_t max_inflight = 100000;      // latency: starts waiting for their end, at most
  double timeout_seconds = 10;         // latency: a start older than this expires
  std::string json_path;               // "metrics[0]"
  std::string canonical;               // the metric's JSON, normalized: equal iff unchanged
};

struct Settings {
  uint32_t ring_buffer_pages = 64;           // data pages per CPU ring; power of two, 1..4096
  uint64_t max_series_per_metric = 10000;    // cardinality limit per metric
  double series_idle_timeout_seconds = 600;  // a series unchanged this long is removed; 0 = never
};

struct Config {
  std::string path;  // the file it came from ("<string>" for ParseConfig on text)
  Settings settings;
  std::vector<MetricConfig> metrics;
};

// Parses config text. `path` names the file in errors.
StatusOr<Config> ParseConfig(const std::string& text, const std::string& path);
// Reads and parses a config file.
StatusOr<Config> LoadConfig(const std::string& path);

// True for [a-zA-Z_:][a-zA-Z0-9_:]* (Prometheus metric names).
bool IsValidMetricName(const std::string& s);
// True for [a-zA-Z_][a-zA-Z0-9_]* not starting with "__" (Prometheus label names).
bool IsValidLabelName(const std::string& s);

}  // namespace tpe
