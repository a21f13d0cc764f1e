// The /metrics endpoint: every collector snapshotted at scrape time (no Prometheus object is
// touched per event) and written one family at a time from its snapshot (exposition.h) — as
// text, or, for a scrape whose Accept header asks for it (content_negotiation.h), as
// length-delimited protobuf messages — the standard process_* metrics, and the HTTP(S) server
// (HttpServer: libmicrohttpd, TLS by GnuTLS) with a landing page at "/".
//
// Scrapes share renders (PageCache): at most one render per 100 ms, one at a time; every
// concurrent response references the one rendered page (RenderedPage), never a copy; at most 3
// pages are alive at once. So concurrent scrapes of a page of P bytes cost at most 3 P plus one
// render's working memory (the source's snapshot and one MetricFamily), whatever the number of
// scrapers; that working memory is handed back to the kernel after each render (malloc_trim).
//
// This folder is the only one that links prometheus-cpp.
//
// Thread-safety: the snapshot source runs on one of the HTTP server's threads at a time,
// concurrently with the reader thread. ProcessMetrics and LandingPageHtml are reentrant. An HttpExporter is started and
// destroyed by one thread; ports() may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectors/snapshot.h"
#include "common/metric_desc.h"
#include "common/status.h"
#include "exporter/exposition.h"  // SerializeText, SerializeProtobuf: the pages
#include "exporter/http_server.h"
#include "exporter/web_config.h"

namespace tpe {

// Returns every metric family to expose (user metrics first, then self-metrics).
using SnapshotSource = std::function<std::vector<MetricSnapshot>()>;
// Answers "/debug/pprof/<name>[?format=folded][&seconds=N]" and "/flamegraph/<name>[?seconds=N]"
// (see HttpServerOptions::pprof).
using ProfileSource = std::function<PprofReply(const PprofRequest& request)>;
// The profiles' names, for the landing page's links.
using ProfileNamesSource = std::function<std::vector<std::string>()>;

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds, process_max_fds — from /proc/self (proc(5)).
std::vector<MetricSnapshot> ProcessMetrics();

// The HTML landing page served at "/", linking `telemetry_path` and, for each of `profiles`
// (names, as the config has them), its flame graph and pprof; names are HTML- and URL-escaped.
std::string LandingPageHtml(const std::string& telemetry_path, const std::vector<std::string>& profiles = {});

class HttpExporter {
 public:
  // Binds and starts serving on background threads; returns once the socket listens.
  // `listen_address` is "[HOST]:PORT": ":9478" = every interface (IPv6 dual-stack),
  // "127.0.0.1:9478", "[::1]:9478", "localhost:9478", port 0 = a free port (see ports()).
  // `telemetry_path` e.g. "/metrics" serves `source` (plus process_* metrics); "/" the landing
  // page; GET and HEAD only. `web` (default: none) turns on TLS (cert_file/key_file; then HTTPS
  // only) and/or bcrypt basic auth for the telemetry path. Slow clients cannot starve scrapes:
  // see http_server.h for the deadlines, limits and the auth thread.
  // Errors (never an exception, never an exit): InvalidArgument for a malformed address, a
  // host that does not resolve or is not local (with the resolver/errno text), a bad telemetry
  // path, or a certificate/key GnuTLS rejects (naming the file); Unavailable when the port is
  // in use; PermissionDenied for a privileged port; NotFound/PermissionDenied for an unreadable
  // certificate or key; Internal when libmicrohttpd cannot start.
  // `profiles` (optional) serves /debug/pprof/<name> and /flamegraph/<name> behind the same TLS
  // and basic auth; `profile_names` (optional, called per request of "/") lists them on the
  // landing page.
  static StatusOr<std::unique_ptr<HttpExporter>> Start(const std::string& listen_address,
                                                       const std::string& telemetry_path, SnapshotSource source,
                                                       const WebConfig& web = WebConfig(),
                                                       ProfileSource profiles = nullptr,
                                                       ProfileNamesSource profile_names = nullptr);
  // Stops serving: waiting password checks are answered 503, the threads joined (this may wait
  // for one bcrypt in progress).
  ~HttpExporter();

  // The TCP port actually bound (useful with port 0); one element.
  std::vector<int> ports() const;

 private:
  HttpExporter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Self-metrics counted here (common/metric_desc.h): each page's scrapes and snapshot time.
inline constexpr MetricDesc kScrapesTotalDesc{
    "tracepoint_exporter_scrapes_total",
    "Requests of the telemetry path, by the exposition format they were answered in.", MetricKind::kCounter};
inline constexpr MetricDesc kScrapeDurationSecondsDesc{
    "tracepoint_exporter_scrape_duration_seconds",
    "Time the previous scrape took to snapshot every metric, in seconds.", MetricKind::kGauge};

}  // namespace tpe
