// tracepoint_exporter: Linux kernel tracepoints as Prometheus metrics.
// The only place in the project that exits the process: parses the flags, then lists events or
// runs one command of daemon/commands.h (check, print, serve).
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "common/log.h"
#include "daemon/commands.h"
#include "daemon/list_events.h"
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

  // Block the signals we handle before any thread starts, so only the commands' sigwait gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  tpe::Status st;
  if (config_check) {
    st = tpe::CheckConfig(config_file, *tracefs, enums, std::cout);
  } else if (!print_for.empty()) {
    st = tpe::PrintFor(config_file, print_for, *tracefs, enums, signals, std::cout);
  } else {
    st = tpe::Serve({.config_file = config_file,
                     .listen = listen,
                     .telemetry = telemetry,
                     .web_config_file = web_config_file,
                     .drop_capabilities = drop_caps},
                    *tracefs, enums, signals);
  }
  return st.ok() ? 0 : Fail(st);
}
