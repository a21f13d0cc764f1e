// The running daemon: owns the current pipeline, swaps it on reload, and serves snapshots.
//
// Reload (SIGHUP): the new config is read, validated against the kernel (events, fields,
// filters) and its perf events opened while the old pipeline keeps running. Any error keeps
// the old one and is counted (tracepoint_exporter_config_reloads_total{result="failure"},
// tracepoint_exporter_config_last_reload_successful 0). On success the old pipeline is stopped
// and drained, unchanged metrics move to the new one with their values (Pipeline::AdoptFrom),
// and the new one starts: nothing counted is lost; only events in the milliseconds between the
// old events' disable and the new ones' enable are seen by neither.
//
// Thread-safety: Start/Reload/Stop from the main thread; Snapshot from scrape threads. One
// mutex guards the pipeline pointer and is held for a snapshot and for a swap (never per event).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectors/snapshot.h"
#include "daemon/pipeline.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe {

// Loads the config file, plans it against the kernel (filters checked), logs the plan's
// warnings, and opens every perf event (not started). The one way a pipeline is made, for the
// daemon, --config.check and --print.
StatusOr<std::unique_ptr<Pipeline>> OpenPipeline(const std::string& config_path, const Tracefs& tracefs,
                                                 const KernelEnums& enums);

class Daemon {
 public:
  // `tracefs` and `enums` outlive the daemon.
  Daemon(std::string config_path, const Tracefs* tracefs, const KernelEnums* enums);
  ~Daemon();

  // Loads, plans, opens and starts. Errors as LoadConfig/BuildPlan/Pipeline::Open.
  Status Start();
  // Re-reads the config file; on any error keeps the running pipeline and returns why.
  Status Reload();
  void Stop();

  // The current pipeline's metrics plus the reload self-metrics.
  std::vector<MetricSnapshot> Snapshot();
  // Warnings of the last successful plan (e.g. symbolic names without BTF).
  std::vector<std::string> warnings();
  size_t metric_count();

 private:
  const std::string config_path_;
  const Tracefs* tracefs_;    // not owned
  const KernelEnums* enums_;  // not owned
  std::mutex mu_;             // guards pipeline_ and the reload state below
  std::unique_ptr<Pipeline> pipeline_;
  uint64_t reload_success_ = 0, reload_failure_ = 0;
  bool last_reload_ok_ = true;
  double last_success_unix_ = 0;
};

}  // namespace tpe
