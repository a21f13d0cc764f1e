// --print DURATION: trace for a while, then print tables and costs (commands.h).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bpf/program_cost.h"
#include "common/name_table.h"
#include "daemon/commands.h"
#include "daemon/daemon.h"
#include "daemon/profile_pages.h"
#include "plan/print_report.h"
#include "plan/probes.h"

namespace tpe {

Status PrintFor(const std::string& config_file, const std::string& duration_text, const Tracefs& tracefs,
                const KernelEnums& enums, const sigset_t& stop_signals, std::ostream& out) {
  // The report is `out`'s (stdout); log lines go to stderr beside it.
  spdlog::set_default_logger(spdlog::stderr_color_mt("tracepoint_exporter"));
  auto duration = ParseDuration(duration_text);
  if (!duration.ok()) return duration.status();
  auto opened = OpenPipeline(config_file, tracefs, enums);
  if (!opened.ok()) return opened.status();
  Pipeline& pipeline = **opened;
  const Plan& plan = pipeline.plan();
  for (const auto& n : plan.kernel_notes) std::fprintf(stderr, "kernel: %s\n", n.c_str());
  for (const MetricPlan& m : plan.metrics) {
    std::fprintf(stderr, "%s: %s engine (%s)\n", m.collector->name().c_str(), std::string(NameOf(m.engine)).c_str(),
                 m.engine_reason.c_str());
  }
  // The kernel times every BPF program run while this fd is held (a short, interactive run).
  auto stats = bpf::EnableRunTimeStats();
  TPE_RETURN_IF_ERROR(pipeline.Start());
  std::fprintf(stderr, "tracing for %s (Ctrl-C to stop early)...\n", duration_text.c_str());
  const auto started = std::chrono::steady_clock::now();
  const auto ms = duration->count();
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000};
  siginfo_t info;
  sigtimedwait(&stop_signals, &info, &ts);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  pipeline.Stop();
  std::vector<MetricCost> costs = MetricCosts(pipeline.plan(), stats.ok());
  auto snap = pipeline.Snapshot();
  const std::vector<std::string> profiles = pipeline.ProfileNames();
  snap.resize(pipeline.plan().metrics.size() - profiles.size());  // user metrics only
  PrintReport(snap, out);
  for (const std::string& name : profiles) {
    PrintTopStacks(name, RenderProfile(pipeline, name, "folded").body, 10, out);
    for (MetricCost& c : costs) {
      if (c.name == name) c.profile_render_ns = static_cast<double>(pipeline.RenderCpuNs(name));
    }
  }
  PrintCosts(costs, seconds, stats.ok() ? "" : stats.status().message(), out);
  opened->reset();
  if (auto* probes = ProbeRegistry::IfCreated()) probes->RemoveUnreferenced();
  return Status::Ok();
}

}  // namespace tpe
