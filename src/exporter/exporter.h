// The /metrics endpoint: a prometheus::Collectable that snapshots every collector at scrape
// time (prometheus-cpp's extension point: no Prometheus object is touched per event), the
// standard process_* metrics, and the HTTP server (prometheus-cpp's civetweb Exposer) with a
// landing page at "/".
//
// This folder is the only one that links prometheus-cpp.
//
// Thread-safety: Collect() runs on the exposer's HTTP threads; the snapshot source must be
// callable from them concurrently with the reader thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectors/snapshot.h"
#include "common/status.h"
#include "exporter/web_config.h"

namespace prometheus {
class Exposer;
}

namespace tpe {

// Returns every metric family to expose (user metrics first, then self-metrics).
using SnapshotSource = std::function<std::vector<MetricSnapshot>()>;

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds, process_max_fds — from /proc/self (proc(5)).
std::vector<MetricSnapshot> ProcessMetrics();

// The HTML landing page served at "/", linking `telemetry_path`.
std::string LandingPageHtml(const std::string& telemetry_path);

// Renders snapshots in the Prometheus text exposition format (prometheus-cpp's serializer).
std::string SerializeText(const std::vector<MetricSnapshot>& metrics);

class HttpExporter {
 public:
  // Starts serving. `listen_address` is "[HOST]:PORT" (":9478" = every interface,
  // "127.0.0.1:0" = a free port on loopback). `telemetry_path` e.g. "/metrics".
  // Errors: InvalidArgument for a malformed address; Unavailable when the port is in use.
  // `web` (default: none) turns on TLS (served by cpp-httplib over OpenSSL) and/or basic auth
  // for the telemetry path. A certificate/key OpenSSL rejects is InvalidArgument.
  static StatusOr<std::unique_ptr<HttpExporter>> Start(const std::string& listen_address,
                                                       const std::string& telemetry_path, SnapshotSource source,
                                                       const WebConfig& web = WebConfig());
  ~HttpExporter();

  // The TCP ports actually bound (useful with port 0).
  std::vector<int> ports() const;

 private:
  HttpExporter() = default;
  Status StartTls(const std::string& host, const std::string& port, const std::string& telemetry_path,
                  const WebConfig& web);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpe
