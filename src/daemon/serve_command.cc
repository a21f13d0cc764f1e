// Serving: the daemon, its HTTP listener and the signal loop (commands.h).
#include <malloc.h>
#include <systemd/sd-daemon.h>

#include <string>

#include "common/log.h"
#include "daemon/commands.h"
#include "daemon/daemon.h"
#include "daemon/privileges.h"
#include "exporter/exporter.h"
#include "plan/probes.h"

namespace tpe {
namespace {

// Waits for a signal of `signals`, and between signals every `refresh` seconds (0: never) plans
// probed binaries replaced on disk again. Returns the signal.
int NextSignal(Daemon* daemon, const sigset_t& signals) {
  for (;;) {
    const double refresh = daemon->probe_refresh_seconds();
    if (refresh <= 0) {
      int sig = 0;
      sigwait(&signals, &sig);
      return sig;
    }
    const auto whole = static_cast<time_t>(refresh);
    timespec wait{whole, static_cast<long>((refresh - static_cast<double>(whole)) * 1e9)};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig >= 0) return sig;
    auto refreshed = daemon->RefreshProbes();
    if (!refreshed.ok()) {
      TPE_LOG_ERROR("probed binaries changed, but planning them failed; still running the previous plan: {}",
                    refreshed.status().message());
    }
  }
}

}  // namespace

Status Serve(const ServeOptions& options, const Tracefs& tracefs, const KernelEnums& enums,
             const sigset_t& stop_signals) {
  WebConfig web;
  if (!options.web_config_file.empty()) {
    auto w = LoadWebConfig(options.web_config_file);
    if (!w.ok()) return w.status();
    web = std::move(*w);
  }
  ProbeRegistry::Get(tracefs);  // removes probe events crashed runs left behind
  Daemon daemon(options.config_file, &tracefs, &enums);
  TPE_RETURN_IF_ERROR(daemon.Open());
  // Capabilities are per thread: dropped while this is the only one, so that the reader,
  // sweeper and HTTP threads started below begin with none (daemon/privileges.h).
  if (options.drop_capabilities) {
    TPE_RETURN_IF_ERROR(DropAllCapabilities());
    TPE_LOG_INFO("dropped all capabilities; a reload will need a restart");
  }
  TPE_RETURN_IF_ERROR(daemon.Start());
  auto http = HttpExporter::Start(
      options.listen, options.telemetry, [&daemon] { return daemon.Snapshot(); }, web,
      [&daemon](const PprofRequest& request) { return daemon.Profile(request); },
      [&daemon] { return daemon.ProfileNames(); });
  if (!http.ok()) return http.status();
  std::string ports;
  for (int p : (*http)->ports()) ports += (ports.empty() ? "" : ",") + std::to_string(p);
  TPE_LOG_INFO("serving {} metrics from {} on {} (port {}), path {}{}{} (tracefs {})", daemon.metric_count(),
               options.config_file, options.listen, ports, options.telemetry, web.tls() ? ", TLS" : "",
               web.users.empty() ? "" : ", basic auth", tracefs.root());
  sd_notifyf(0, "READY=1\nSTATUS=serving %zu metrics on port %s", daemon.metric_count(), ports.c_str());

  for (;;) {
    const int sig = NextSignal(&daemon, stop_signals);
    if (sig != SIGHUP) {
      TPE_LOG_INFO("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    sd_notify(0, "RELOADING=1");
    Status st = daemon.Reload();
    if (st.ok()) {
      TPE_LOG_INFO("reloaded {}: {} metrics", options.config_file, daemon.metric_count());
    } else {
      TPE_LOG_ERROR("reload of {} failed, still running the previous config: {}", options.config_file, st.message());
    }
    // A reload builds a whole new plan beside the old one; what the old one freed (and earlier
    // reloads' retired plans) goes back to the kernel instead of staying in malloc's arenas,
    // where the soak once saw 17 MiB held after a burst of reloads (malloc_trim(3)).
    malloc_trim(0);
    sd_notify(0, "READY=1");
  }
  sd_notify(0, "STOPPING=1");
  http->reset();
  daemon.Stop();
  return Status::Ok();
}

}  // namespace tpe
