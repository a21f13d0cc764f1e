#include "daemon/daemon.h"

#include <cstdlib>
#include <ctime>
#include <set>
#include <string>

#include "common/log.h"
#include "config/config.h"
#include "daemon/profile_pages.h"
#include "plan/bpf_parts.h"
#include "plan/plan.h"
#include "plan/probes.h"

namespace tpe {
namespace {
double NowUnix() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}
}  // namespace

Daemon::Daemon(std::string config_path, const Tracefs* tracefs, const KernelEnums* enums)
    : config_path_(std::move(config_path)), tracefs_(tracefs), enums_(enums) {}

Daemon::~Daemon() {
  Stop();
  pipeline_.reset();  // closes the perf events, so the probe events on them can go
  if (ProbeRegistry* probes = ProbeRegistry::IfCreated()) probes->RemoveUnreferenced();
}

namespace {
// The bpf metrics of `running` (null: none) as BuildPlan's running_bpf: each one's identity, and
// for a metric on probe events identity + "\n" + each part it runs (one per event of a replaced
// binary).
std::set<std::string> RunningBpfKeys(const Plan* running) {
  std::set<std::string> keys;
  if (running == nullptr) return keys;
  for (const MetricPlan& m : running->metrics) {
    if (m.engine != Engine::kBpf) continue;
    keys.insert(m.identity);
    if (auto* parts = dynamic_cast<const BpfPartsMetric*>(m.collector.get())) {
      for (const std::string& key : parts->keys()) keys.insert(m.identity + "\n" + key);
    }
  }
  return keys;
}

// `running`: the running plan on a reload (its bpf metrics are kept, not loaded again), or null.
StatusOr<std::unique_ptr<Plan>> PlanConfig(const Config& config, const Tracefs& tracefs, const KernelEnums& enums,
                                           const Plan* running) {
  // Filters are checked by the kernel when the perf events are opened (PERF_EVENT_IOC_SET_FILTER);
  // only a rejected one costs a tracefs instance, to tell the kernel's reason.
  // Once: privileges do not grow later, and the kernel does not change. The features first:
  // DetectBpfFeatures raises RLIMIT_MEMLOCK where BPF memory is charged to it.
  static const KernelFeatures probed = DetectKernelFeatures(tracefs.root());
  static const bpf::BpfSupport bpf = bpf::ProbeBpf();
  // Except what a sysctl or a dropped privilege changes meanwhile (perf_event_max_stack, kallsyms).
  KernelFeatures features = probed;
  RefreshRuntimeFacts(&features);
  TPE_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, BuildPlan(config, tracefs, enums, /*check_filters=*/false, bpf,
                                                             RunningBpfKeys(running), features));
  if (running == nullptr) {
    for (const auto& n : plan->kernel_notes) TPE_LOG_WARN("kernel: {}", n);
  }
  for (const auto& w : plan->warnings) TPE_LOG_WARN("{}", w);
  for (const MetricPlan& m : plan->metrics) {
    TPE_LOG_INFO("{}: {} engine ({})", m.collector->name(), NameOf(m.engine), m.engine_reason);
  }
  return plan;
}
}  // namespace

symbols::DebuginfodClient::Options DebuginfodOptions(const Settings& settings) {
  // The environment as the daemon started (the debuginfod client sets these variables itself).
  static const std::string env_urls = std::getenv("DEBUGINFOD_URLS") ? std::getenv("DEBUGINFOD_URLS") : "";
  const std::string env_cache = std::getenv("DEBUGINFOD_CACHE_PATH") ? std::getenv("DEBUGINFOD_CACHE_PATH") : "";
  const std::string systemd_cache = std::getenv("CACHE_DIRECTORY") ? std::getenv("CACHE_DIRECTORY") : "";
  symbols::DebuginfodClient::Options o;
  o.urls = settings.debuginfod_urls.value_or(env_urls);
  // DEBUGINFOD_CACHE_PATH as elfutils' tools read it; else systemd's CacheDirectory=; else ours.
  o.cache_dir = !env_cache.empty()       ? env_cache
                : !systemd_cache.empty() ? systemd_cache.substr(0, systemd_cache.find(':')) + "/debuginfod"
                                         : std::string(kDebuginfodCacheDir);
  return o;
}

StatusOr<std::unique_ptr<Pipeline>> OpenPipeline(const std::string& config_path, const Tracefs& tracefs,
                                                 const KernelEnums& enums, Config* loaded) {
  TPE_ASSIGN_OR_RETURN(Config config, LoadConfig(config_path));
  TPE_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, PlanConfig(config, tracefs, enums, nullptr));
  auto pipeline = std::make_unique<Pipeline>(&tracefs);
  TPE_RETURN_IF_ERROR(pipeline->Open(std::move(plan)));
  pipeline->renderer().SetDebuginfod(DebuginfodOptions(config.settings));
  if (loaded != nullptr) *loaded = std::move(config);
  return pipeline;
}

Status Daemon::Open() {
  Config config;
  TPE_ASSIGN_OR_RETURN(std::unique_ptr<Pipeline> p, OpenPipeline(config_path_, *tracefs_, *enums_, &config));
  std::lock_guard<std::mutex> lock(mu_);
  pipeline_ = std::move(p);
  config_ = std::move(config);
  last_success_unix_ = NowUnix();
  return Status::Ok();
}

Status Daemon::Start() {
  if (!pipeline_) TPE_RETURN_IF_ERROR(Open());
  return pipeline_->Start();
}

Status Daemon::Reload() {
  // The config is read and planned while the current plan keeps running; the pipeline then opens
  // the new perf events and swaps (Pipeline::Reload), keeping unchanged metrics' perf events.
  auto config = LoadConfig(config_path_);
  auto next = config.ok() ? PlanConfig(*config, *tracefs_, *enums_, &pipeline_->plan())
                          : StatusOr<std::unique_ptr<Plan>>(config.status());
  Status st = next.ok() ? pipeline_->Reload(std::move(*next)) : next.status();
  // Probe events the old plan had and the new one dropped (or a refused plan created).
  if (ProbeRegistry* probes = ProbeRegistry::IfCreated()) probes->RemoveUnreferenced();
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    ++reload_failure_;
    last_reload_ok_ = false;
    return st;
  }
  if (DebuginfodOptions(config->settings).urls != DebuginfodOptions(config_.settings).urls) {
    pipeline_->renderer().SetDebuginfod(DebuginfodOptions(config->settings));
  }
  config_ = std::move(*config);
  failed_refresh_.clear();
  ++reload_success_;
  last_reload_ok_ = true;
  last_success_unix_ = NowUnix();
  return Status::Ok();
}

double Daemon::probe_refresh_seconds() {
  std::lock_guard<std::mutex> lock(mu_);
  return pipeline_ ? config_.settings.probe_refresh_seconds : 0;
}

StatusOr<bool> Daemon::RefreshProbes() {
  ProbeRegistry* probes = ProbeRegistry::IfCreated();
  if (!pipeline_ || probes == nullptr) return false;
  const std::string reason = probes->RefreshReason();
  // The same change as a refresh that failed: not tried again until something else changes (or
  // a reload).
  if (reason.empty() || reason == failed_refresh_) return false;
  Config config;
  {
    std::lock_guard<std::mutex> lock(mu_);
    config = config_;
  }
  // The running config planned again: the probes' events on the files their paths name now, and
  // on replaced files that processes still run (ProbeRegistry::Acquire).
  auto next = PlanConfig(config, *tracefs_, *enums_, &pipeline_->plan());
  Status st = next.ok() ? pipeline_->Reload(std::move(*next)) : next.status();
  probes->RemoveUnreferenced();
  std::lock_guard<std::mutex> lock(mu_);
  ++(st.ok() ? probe_refresh_success_ : probe_refresh_failure_);
  failed_refresh_ = st.ok() ? "" : reason;
  if (!st.ok()) return st.WithContext(reason);
  TPE_LOG_INFO("{}: planned the running config again", reason);
  return true;
}

void Daemon::Stop() {
  if (pipeline_) pipeline_->Stop();
}

size_t Daemon::metric_count() { return pipeline_ ? pipeline_->plan().metrics.size() : 0; }

std::vector<std::string> Daemon::warnings() {
  return pipeline_ ? pipeline_->plan().warnings : std::vector<std::string>{};
}

PprofReply Daemon::Profile(const PprofRequest& request) {
  if (!pipeline_)
    return PprofReply{HttpAnswer{503, "text/plain; charset=utf-8", "not started\n"}, {}, nullptr, nullptr};
  return ServeProfile(*pipeline_, request);
}

std::vector<std::string> Daemon::ProfileNames() {
  return pipeline_ ? pipeline_->ProfileNames() : std::vector<std::string>{};
}

std::vector<MetricSnapshot> Daemon::Snapshot() {
  std::vector<MetricSnapshot> out;
  if (pipeline_) out = pipeline_->Snapshot();
  std::lock_guard<std::mutex> lock(mu_);
  SelfMetrics m;
  m.Add(kConfigLastReloadSuccessfulDesc, {}, last_reload_ok_ ? 1.0 : 0.0);
  m.Add(kConfigLastReloadSuccessTimestampSecondsDesc, {}, last_success_unix_);
  m.Add(kConfigReloadsTotalDesc, {{"result", "success"}}, static_cast<double>(reload_success_));
  m.Add(kConfigReloadsTotalDesc, {{"result", "failure"}}, static_cast<double>(reload_failure_));
  m.Add(kProbeRefreshesTotalDesc, {{"result", "success"}}, static_cast<double>(probe_refresh_success_));
  m.Add(kProbeRefreshesTotalDesc, {{"result", "failure"}}, static_cast<double>(probe_refresh_failure_));
  m.MoveTo(&out);
  return out;
}

}  // namespace tpe
