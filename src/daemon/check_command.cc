// --config.check: plan and open everything, say what each metric runs on, close (commands.h).
#include <algorithm>
#include <string>

#include "common/name_table.h"
#include "daemon/commands.h"
#include "daemon/daemon.h"
#include "plan/probes.h"

namespace tpe {

Status CheckConfig(const std::string& config_file, const Tracefs& tracefs, const KernelEnums& enums,
                   std::ostream& out) {
  auto opened = OpenPipeline(config_file, tracefs, enums);
  if (!opened.ok()) return opened.status();
  const Plan& plan = (*opened)->plan();
  const size_t tracepoints = static_cast<size_t>(
      std::count_if(plan.events.begin(), plan.events.end(), [](const auto& ep) { return !ep->mmap_tracker; }));
  out << config_file << ": OK (" << plan.metrics.size() << " metrics, " << tracepoints
      << " tracepoints, every perf event opened and BPF program attached)\n";
  for (const MetricPlan& m : plan.metrics) {
    out << "  " << m.collector->name() << ": " << NameOf(m.engine) << " engine (" << m.engine_reason << ")\n";
  }
  for (const auto& n : plan.kernel_notes) out << "  kernel: " << n << "\n";
  out.flush();
  opened->reset();
  if (auto* probes = ProbeRegistry::IfCreated()) probes->RemoveUnreferenced();
  return Status::Ok();
}

}  // namespace tpe
