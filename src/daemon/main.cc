// tracepoint_exporter: Linux kernel tracepoints as Prometheus metrics.
// The only place in the project that exits the process.
#include <malloc.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "bpf/program_cost.h"
#include "common/log.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/list_events.h"
#include "daemon/pipeline.h"
#include "daemon/plan.h"
#include "daemon/print_report.h"
#include "daemon/privileges.h"
#include "daemon/probes.h"
#include "daemon/profiles.h"
#include "exporter/exporter.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace {

// SIGHUP's default action ends the process. systemd (ExecReload) or a user may send it while the
// daemon is still starting (reading the kernel's enums and the config, opening perf events: tens
// of ms), so it is blocked before any of main's work: from .preinit_array, which the dynamic
// loader runs before the shared libraries' initializers (System V gABI, "Initialization and
// Termination Functions"), so only the loading and relocation of the libraries come before it.
// main's sigwait() picks up a pending SIGHUP as a reload once the daemon serves. SIGTERM and
// SIGINT keep their default action until main blocks them: a stop request during start-up ends
// the process, as it should.
void BlockSighupBeforeMain(int, char**, char**) {
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, nullptr);
}
__attribute__((section(".preinit_array"), used)) void (*const kBlockSighup)(int, char**,
                                                                            char**) = BlockSighupBeforeMain;

int Fail(const tpe::Status& st) {
  std::string msg = st.message();
  // EMFILE can come from any step (tracefs files, perf events, BPF maps, sockets): say once
  // what to do about it, whichever step ran out.
  if (msg.find("Too many open files") != std::string::npos && msg.find("ulimit -n") == std::string::npos) {
    rlimit nofile{};
    ::getrlimit(RLIMIT_NOFILE, &nofile);
    msg += "; raise LimitNOFILE / ulimit -n (now " + std::to_string(nofile.rlim_cur) + ")";
  }
  std::fprintf(stderr, "tracepoint_exporter: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tracepoint_exporter: Linux kernel tracepoints as Prometheus metrics"};
  std::string config_file = "/etc/tracepoint_exporter/config.json";
  std::string listen = ":9478";
  std::string telemetry = "/metrics";
  std::string log_level = "info";
  std::string tracefs_path = "auto";
  bool config_check = false;
  std::string list_glob;
  std::string print_for;
  std::string web_config_file;
  bool drop_caps = false;
  app.add_option("--config.file", config_file, "Path to the JSON config")->capture_default_str();
  app.add_option("--web.listen-address", listen, "[HOST]:PORT to serve /metrics on")->capture_default_str();
  app.add_option("--web.telemetry-path", telemetry, "Path under which to expose metrics")->capture_default_str();
  app.add_option("--log.level", log_level, "debug, info, warn or error")->capture_default_str();
  app.add_option("--tracefs.path", tracefs_path, "tracefs mount point, or auto")->capture_default_str();
  app.add_flag("--config.check", config_check, "Validate the config against the running kernel, then exit 0/1");
  auto* list = app.add_option("--list-events", list_glob, "List tracepoints matching GLOB with their fields, then exit")
                   ->expected(0, 1)
                   ->default_str("*");
  app.add_option("--web.config.file", web_config_file,
                 "Prometheus exporter-toolkit web config (YAML): TLS and basic auth with bcrypt hashes");
  app.add_flag("--security.drop-capabilities", drop_caps,
               "Drop every capability once the perf events are open (a SIGHUP reload then fails; restart instead)");
  app.add_option("--print", print_for,
                 "Run the config for DURATION (e.g. 10s), print counters and histograms as tables, exit");
  app.set_version_flag("--version", TPE_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (auto st = tpe::SetLogLevel(log_level); !st.ok()) return Fail(st);

  auto tracefs = tpe::Tracefs::Discover(tracefs_path);
  if (!tracefs.ok()) return Fail(tracefs.status());

  tpe::KernelEnums enums = tpe::KernelEnums::LoadFromKernel();

  if (list->count() > 0) {
    if (list_glob.empty()) list_glob = "*";
    tpe::Status st = tpe::ListEvents(*tracefs, list_glob, std::cout, enums);
    return st.ok() ? 0 : Fail(st);
  }

  // Block the signals we handle before any thread starts, so only sigwait() below gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (config_check || !print_for.empty()) {
    // The report is stdout's; log lines go to stderr beside it.
    if (!print_for.empty()) spdlog::set_default_logger(spdlog::stderr_color_mt("tracepoint_exporter"));
    std::chrono::milliseconds duration{0};
    if (!print_for.empty()) {
      auto d = tpe::ParseDuration(print_for);
      if (!d.ok()) return Fail(d.status());
      duration = *d;
    }
    auto opened = tpe::OpenPipeline(config_file, *tracefs, enums);
    if (!opened.ok()) return Fail(opened.status());
    tpe::Pipeline& pipeline = **opened;
    const tpe::Plan& plan = pipeline.plan();
    if (config_check) {
      const size_t tracepoints = static_cast<size_t>(
          std::count_if(plan.events.begin(), plan.events.end(), [](const auto& ep) { return !ep->mmap_tracker; }));
      std::printf("%s: OK (%zu metrics, %zu tracepoints, every perf event opened and BPF program attached)\n",
                  config_file.c_str(), plan.collectors.size(), tracepoints);
      for (size_t i = 0; i < plan.collectors.size(); ++i) {
        std::printf("  %s: %s engine (%s)\n", plan.collectors[i]->name().c_str(),
                    std::string(tpe::NameOf(plan.engines[i])).c_str(), plan.engine_reasons[i].c_str());
      }
      for (const auto& n : plan.kernel_notes) std::printf("  kernel: %s\n", n.c_str());
      opened->reset();
      if (auto* probes = tpe::ProbeRegistry::IfCreated()) probes->RemoveUnreferenced();
      return 0;
    }
    for (const auto& n : plan.kernel_notes) std::fprintf(stderr, "kernel: %s\n", n.c_str());
    for (size_t i = 0; i < plan.collectors.size(); ++i) {
      std::fprintf(stderr, "%s: %s engine (%s)\n", plan.collectors[i]->name().c_str(),
                   std::string(tpe::NameOf(plan.engines[i])).c_str(), plan.engine_reasons[i].c_str());
    }
    // The kernel times every BPF program run while this fd is held (a short, interactive run).
    auto stats = tpe::bpf::EnableRunTimeStats();
    if (auto st = pipeline.Start(); !st.ok()) return Fail(st);
    std::fprintf(stderr, "tracing for %s (Ctrl-C to stop early)...\n", print_for.c_str());
    const auto started = std::chrono::steady_clock::now();
    timespec ts{static_cast<time_t>(duration.count() / 1000), static_cast<long>(duration.count() % 1000) * 1000000};
    siginfo_t info;
    sigtimedwait(&signals, &info, &ts);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    pipeline.Stop();
    std::vector<tpe::MetricCost> costs = tpe::MetricCosts(pipeline.plan(), stats.ok());
    auto snap = pipeline.Snapshot();
    const std::vector<std::string> profiles = pipeline.ProfileNames();
    snap.resize(pipeline.plan().collectors.size() - profiles.size());  // user metrics only
    tpe::PrintReport(snap, std::cout);
    for (const std::string& name : profiles) {
      tpe::PrintTopStacks(name, tpe::RenderProfile(pipeline, name, "folded").body, 10, std::cout);
      for (tpe::MetricCost& c : costs) {
        if (c.name == name) c.profile_render_ns = static_cast<double>(pipeline.RenderCpuNs(name));
      }
    }
    tpe::PrintCosts(costs, seconds, stats.ok() ? "" : stats.status().message(), std::cout);
    opened->reset();
    if (auto* probes = tpe::ProbeRegistry::IfCreated()) probes->RemoveUnreferenced();
    return 0;
  }

  tpe::WebConfig web;
  if (!web_config_file.empty()) {
    auto w = tpe::LoadWebConfig(web_config_file);
    if (!w.ok()) return Fail(w.status());
    web = std::move(*w);
  }
  tpe::ProbeRegistry::Get(*tracefs);  // removes probe events crashed runs left behind
  tpe::Daemon daemon(config_file, &*tracefs, &enums);
  if (auto st = daemon.Open(); !st.ok()) return Fail(st);
  // Capabilities are per thread: dropped while this is the only one, so that the reader,
  // sweeper and HTTP threads started below begin with none (daemon/privileges.h).
  if (drop_caps) {
    if (auto st = tpe::DropAllCapabilities(); !st.ok()) return Fail(st);
    TPE_LOG_INFO("dropped all capabilities; a reload will need a restart");
  }
  if (auto st = daemon.Start(); !st.ok()) return Fail(st);
  auto http = tpe::HttpExporter::Start(
      listen, telemetry, [&daemon] { return daemon.Snapshot(); }, web,
      [&daemon](const tpe::PprofRequest& request) { return daemon.Profile(request); },
      [&daemon] { return daemon.ProfileNames(); });
  if (!http.ok()) return Fail(http.status());
  std::string ports;
  for (int p : (*http)->ports()) ports += (ports.empty() ? "" : ",") + std::to_string(p);
  TPE_LOG_INFO("serving {} metrics from {} on {} (port {}), path {}{}{} (tracefs {})", daemon.metric_count(),
               config_file, listen, ports, telemetry, web.tls() ? ", TLS" : "", web.users.empty() ? "" : ", basic auth",
               tracefs->root());
  sd_notifyf(0, "READY=1\nSTATUS=serving %zu metrics on port %s", daemon.metric_count(), ports.c_str());

  for (;;) {
    int sig = 0;
    // Between signals, every settings.probe_refresh_seconds: probed binaries replaced meanwhile.
    const double refresh = daemon.probe_refresh_seconds();
    if (refresh > 0) {
      const auto whole = static_cast<time_t>(refresh);
      timespec wait{whole, static_cast<long>((refresh - static_cast<double>(whole)) * 1e9)};
      sig = sigtimedwait(&signals, nullptr, &wait);
      if (sig < 0) {
        auto refreshed = daemon.RefreshProbes();
        if (!refreshed.ok()) {
          TPE_LOG_ERROR("probed binaries changed, but planning them failed; still running the previous plan: {}",
                        refreshed.status().message());
        }
        continue;
      }
    } else {
      sigwait(&signals, &sig);
    }
    if (sig != SIGHUP) {
      TPE_LOG_INFO("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    sd_notify(0, "RELOADING=1");
    tpe::Status st = daemon.Reload();
    if (st.ok()) {
      TPE_LOG_INFO("reloaded {}: {} metrics", config_file, daemon.metric_count());
    } else {
      TPE_LOG_ERROR("reload of {} failed, still running the previous config: {}", config_file, st.message());
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
  return 0;
}
