// What the executable does, one function per job: check a config (--config.check), trace for a
// while and print tables (--print), or serve /metrics until SIGTERM. main parses the flags and
// calls one of them; only main exits the process (these return a Status).
//
// Each expects `stop_signals` (SIGTERM, SIGINT, SIGHUP) blocked in every thread already, so that
// only its own sigwait/sigtimedwait takes them.
// Thread-safety: called from the main thread, once.
#pragma once

#include <signal.h>

#include <ostream>
#include <string>

#include "common/status.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe {

// --config.check: plans the config against this kernel and opens every perf event and BPF program
// (nothing started), then writes "PATH: OK (N metrics, M tracepoints, ...)" and each metric's
// engine and why, and the kernel notes, to `out`. Errors: those of OpenPipeline (daemon.h).
Status CheckConfig(const std::string& config_file, const Tracefs& tracefs, const KernelEnums& enums, std::ostream& out);

// --print DURATION ("10s", "500ms": print_report.h ParseDuration): traces with the config for
// DURATION or until a stop signal, then writes the counters and histograms as tables, each
// profile's top stacks and each metric's cost (BPF run time from the kernel's bpf_stats) to
// `out`; progress and the plan's notes go to stderr. Errors: a bad DURATION, OpenPipeline's,
// Pipeline::Start's.
Status PrintFor(const std::string& config_file, const std::string& duration, const Tracefs& tracefs,
                const KernelEnums& enums, const sigset_t& stop_signals, std::ostream& out);

struct ServeOptions {
  std::string config_file;
  std::string listen;           // [HOST]:PORT
  std::string telemetry;        // the metrics path, e.g. /metrics
  std::string web_config_file;  // "" for none (exporter-toolkit YAML: TLS, basic auth)
  bool drop_capabilities = false;
};
// The daemon: opens the config's plan, serves /metrics (and the profiles' pages) until SIGTERM or
// SIGINT; SIGHUP reloads the config (a failed reload keeps the running plan and is logged);
// between signals, every settings.probe_refresh_seconds, probed binaries replaced on disk are
// planned again. Tells systemd READY/RELOADING/STOPPING (sd_notify(3)). Errors (before serving):
// the web config's, OpenPipeline's, dropping capabilities, Start's, the HTTP listener's.
// `tracefs` and `enums` outlive the call.
Status Serve(const ServeOptions& options, const Tracefs& tracefs, const KernelEnums& enums,
             const sigset_t& stop_signals);

}  // namespace tpe
