// The running daemon: owns the current pipeline, swaps it on reload, and serves snapshots.
//
// Reload (SIGHUP): the new config is read and planned against the kernel while the current
// plan keeps running; the pipeline then opens the new perf events and swaps exactly
// (Pipeline::Reload: unchanged metrics keep their values and their very perf events, so no
// event is counted twice or missed). Any error keeps the running plan and is counted
// (tracepoint_exporter_config_reloads_total{result="failure"},
// tracepoint_exporter_config_last_reload_successful 0).
//
// Thread-safety: Open/Start/Reload/Stop/metric_count/warnings from the main thread; Snapshot from
// scrape threads. `mu_` guards the reload state; the pipeline locks itself.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectors/self_metrics.h"
#include "collectors/snapshot.h"
#include "common/metric_desc.h"
#include "config/config.h"
#include "daemon/pipeline.h"
#include "exporter/http_server.h"
#include "symbols/debuginfod.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe {

// Loads the config file, plans it against the kernel (filters checked), logs the plan's
// warnings, and opens every perf event (not started). The one way a pipeline is made, for the
// daemon, --config.check and --print.
// `loaded`: when not null, the config that was loaded.
StatusOr<std::unique_ptr<Pipeline>> OpenPipeline(const std::string& config_path, const Tracefs& tracefs,
                                                 const KernelEnums& enums, Config* loaded = nullptr);

// Where fetched debug files are kept when neither DEBUGINFOD_CACHE_PATH nor systemd's
// CACHE_DIRECTORY (CacheDirectory= in the unit) says.
inline constexpr char kDebuginfodCacheDir[] = "/var/cache/tracepoint_exporter/debuginfod";
// The debuginfod client `settings` ask for: settings.debuginfod_urls, else the daemon's
// DEBUGINFOD_URLS (as it started); the cache in DEBUGINFOD_CACHE_PATH, else
// $CACHE_DIRECTORY/debuginfod, else kDebuginfodCacheDir.
symbols::DebuginfodClient::Options DebuginfodOptions(const Settings& settings);

class Daemon {
 public:
  // `tracefs` and `enums` outlive the daemon.
  Daemon(std::string config_path, const Tracefs* tracefs, const KernelEnums* enums);
  ~Daemon();

  // Loads, plans and opens every perf event and BPF program; starts no thread (so that
  // capabilities can be dropped for every thread after it: daemon/privileges.h). Errors as
  // LoadConfig/BuildPlan/Pipeline::Open.
  Status Open();
  // Open unless done, then starts the pipeline's threads (Pipeline::Start).
  Status Start();
  // Re-reads the config file; on any error keeps the running pipeline and returns why.
  Status Reload();
  // When a probed binary was replaced or the processes of a replaced one are gone
  // (ProbeRegistry::RefreshReason): plans the running config again (not the file, which may have
  // changed without a SIGHUP) and switches to it as a reload does. Returns whether it did; on
  // error the running pipeline stays, and the same change is not tried again until another one
  // (or a reload). Counted in tracepoint_exporter_probe_refreshes_total.
  StatusOr<bool> RefreshProbes();
  // settings.probe_refresh_seconds of the running config (0 before Start).
  double probe_refresh_seconds();
  void Stop();

  // The current pipeline's metrics plus the reload self-metrics.
  std::vector<MetricSnapshot> Snapshot();
  // GET /debug/pprof/<name>[?seconds=N] (daemon/profile_pages.h ServeProfile on the running
  // pipeline; a reply's `later` is valid for the daemon's life). Same threads as Snapshot.
  PprofReply Profile(const PprofRequest& request);
  // The running config's profile names, in config order (the landing page's links). Same threads.
  std::vector<std::string> ProfileNames();
  // Warnings of the last successful plan (e.g. symbolic names without BTF).
  std::vector<std::string> warnings();
  size_t metric_count();

 private:
  const std::string config_path_;
  const Tracefs* tracefs_;              // not owned
  const KernelEnums* enums_;            // not owned
  std::unique_ptr<Pipeline> pipeline_;  // set by Start, then for the daemon's life
  std::mutex mu_;                       // guards the reload state below
  Config config_;                       // the running config (the last one loaded successfully)
  uint64_t probe_refresh_success_ = 0, probe_refresh_failure_ = 0;
  std::string failed_refresh_;  // RefreshReason of the last refresh, when it failed
  uint64_t reload_success_ = 0, reload_failure_ = 0;
  bool last_reload_ok_ = true;
  double last_success_unix_ = 0;
};

// Self-metrics counted here (common/metric_desc.h; written by Daemon::Snapshot).
inline constexpr MetricDesc kConfigLastReloadSuccessfulDesc{
    "tracepoint_exporter_config_last_reload_successful",
    "Whether the last configuration reload succeeded (1) or the previous config still runs (0).", MetricKind::kGauge};
inline constexpr MetricDesc kConfigLastReloadSuccessTimestampSecondsDesc{
    "tracepoint_exporter_config_last_reload_success_timestamp_seconds",
    "Unix time of the last successful configuration load.", MetricKind::kGauge};
inline constexpr MetricDesc kConfigReloadsTotalDesc{"tracepoint_exporter_config_reloads_total",
                                                    "Configuration reloads (SIGHUP), by result.", MetricKind::kCounter};
inline constexpr MetricDesc kProbeRefreshesTotalDesc{
    "tracepoint_exporter_probe_refreshes_total",
    "Times the running config was planned again because a probed binary was replaced (a "
    "package upgrade) or the processes of a replaced one were gone "
    "(settings.probe_refresh_seconds), by result.",
    MetricKind::kCounter};

}  // namespace tpe
