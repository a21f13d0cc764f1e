// Pipeline::Snapshot: every metric of the current plan, then the self-metrics (per event,
// per metric, per CPU ring, per CPU).
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "bpf/bpf_metric.h"
#include "bpf/bpf_profile.h"
#include "collectors/latency.h"
#include "common/file_util.h"
#include "daemon/pipeline.h"

#ifndef TPE_VERSION
#define TPE_VERSION "0.0.0"
#endif

namespace tpe {

namespace {

const StackProfile* FindProfile(const Plan& plan, const std::string& name) {
  for (const Collector* c : plan.Collectors()) {
    if (c && c->stack_profile() != nullptr && c->name() == name) return c->stack_profile();
  }
  return nullptr;
}

}  // namespace

std::optional<Pipeline::ProfileData> Pipeline::ProfileOf(const Plan& plan, const std::string& name,
                                                         const ProfileStart* since) {
  const StackProfile* p = FindProfile(plan, name);
  if (p == nullptr) return std::nullopt;
  const bool window = since != nullptr && since->instance == p->instance();
  return ProfileData{p->value_type(), p->value_unit(), p->scale(), p->instance(),
                     window ? p->StacksSince(*since->baseline) : p->Stacks()};
}

std::optional<Pipeline::ProfileData> Pipeline::Profile(const std::string& name, const ProfileStart* since) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!plan_) return std::nullopt;
  return ProfileOf(*plan_, name, since);
}

std::optional<Pipeline::ProfileStart> Pipeline::StartProfileOf(const Plan& plan, const std::string& name) {
  const StackProfile* p = FindProfile(plan, name);
  if (p == nullptr) return std::nullopt;
  return ProfileStart{p->instance(), p->Baseline()};
}

std::optional<Pipeline::ProfileStart> Pipeline::StartProfile(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!plan_) return std::nullopt;
  return StartProfileOf(*plan_, name);
}

void Pipeline::AddMark(uint64_t at_ns, std::function<void(const Plan&)> fn) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (reader_ && !flushed_) {
    reader_->AddMark(at_ns, std::move(fn));
    const uint64_t one = 1;
    if (wake_fd_.valid()) (void)!::write(wake_fd_.get(), &one, sizeof(one));  // before Start: the first round
    return;
  }
  if (plan_) fn(*plan_);
}

void Pipeline::RecordRender(const std::string& name, const RenderFrames& frames, uint64_t cpu_ns) const {
  std::lock_guard<std::mutex> lock(render_mu_);
  renders_[name] = frames;
  render_cpu_ns_[name] += cpu_ns;
}

uint64_t Pipeline::RenderCpuNs(const std::string& name) const {
  std::lock_guard<std::mutex> lock(render_mu_);
  auto it = render_cpu_ns_.find(name);
  return it == render_cpu_ns_.end() ? 0 : it->second;
}

std::optional<bool> Pipeline::ProfileStamped(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!plan_) return std::nullopt;
  for (Collector* c : plan_->Collectors()) {
    if (c && c->stack_profile() != nullptr && c->name() == name) return c->stack_profile()->stamped();
  }
  return std::nullopt;
}

std::vector<std::string> Pipeline::ProfileNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (!plan_) return out;
  for (Collector* c : plan_->Collectors()) {
    if (c && c->is_profile()) out.push_back(c->name());
  }
  return out;
}

std::vector<MetricSnapshot> Pipeline::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MetricSnapshot> out;
  if (!plan_) return out;
  for (Collector* c : plan_->Collectors()) {
    if (!c->is_profile()) out.push_back(c->Snapshot());
  }

  // The exporter's own metrics, each family beside what it reads.
  SelfMetrics self;
  AppendEventMetrics(&self);
  AppendCollectorMetrics(&self);
  AppendEngineMetrics(&self);
  AppendRingMetrics(&self);
  AppendCpuMetrics(&self);
  AppendProfileMetrics(&self);
  AppendReaderAndKernelMetrics(&self);
  self.MoveTo(&out);

  return out;
}

// Per event as the config names it: the kernel's hits, samples, lost and unaccounted samples; pid perf events; kprobe
// misses.
void Pipeline::AppendEventMetrics(SelfMetrics* m) const {
  for (const MetricDesc* d :
       {&kEventHitsTotalDesc, &kSamplesTotalDesc, &kSamplesLostTotalDesc, &kSamplesUnaccountedTotalDesc}) {
    m->Declare(*d);
  }
  // One series per (event as the config names it, filter, pid): a counting-mode and a sampled
  // perf event of the same tracepoint and filter count the same hits, so one of them counts
  // (samples and lost come from the sampled one); the events of a probe on replaced binaries,
  // and those a reload closed (Plan::draining), add theirs to their probe's series.
  struct Group {
    LabelPairs labels;
    uint64_t hits = 0, samples = 0, lost = 0, unaccounted = 0;
    bool sampled = false, lost_known = true;
    bool clock = false;  // a CPU profile's clock event: its kernel count is ns, not hits
  };
  std::vector<Group> groups;
  auto add_event = [&](const EventPlan& ep, const EventPlan& counted) {
    LabelPairs l = {{"event", ep.display}, {"filter", ep.filter}};
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.labels == l; });
    if (g == groups.end()) {
      groups.push_back(Group{l});
      g = groups.end() - 1;
    }
    const EventCount c = counted.ReadCounts();
    g->clock |= counted.clock();
    g->hits += c.count;
    if (!counted.sampled) return;
    g->sampled = true;
    g->samples += counted.samples.Get();
    g->lost += c.lost;
    g->lost_known &= c.lost_known;
    g->unaccounted += counted.unaccounted.Get();
  };
  for (size_t i = 0; i < plan_->events.size(); ++i) {
    const EventPlan& ep = *plan_->events[i];
    // No tracepoint: its side-band records lost with a full ring are the ring's
    // (tracepoint_exporter_ring_lost_records_total), it has no hits or samples. A bpf CPU
    // profile's clock writes no samples: its program's runs are its self-metrics.
    if (ep.mmap_tracker || !ep.bpf_profile.empty()) continue;
    const EventPlan* sampled = ep.sampled ? &ep : nullptr;
    bool seen = false;
    for (size_t j = 0; j < plan_->events.size(); ++j) {
      const EventPlan& o = *plan_->events[j];
      if (j == i || o.event != ep.event || o.filter != ep.filter || o.pid != ep.pid) continue;
      if (j < i) seen = true;
      if (o.sampled) sampled = &o;
    }
    if (!seen) add_event(ep, sampled ? *sampled : ep);
  }
  for (const auto& d : plan_->draining) {
    if (!d->mmap_tracker && d->bpf_profile.empty()) add_event(*d, *d);
  }
  for (Group& g : groups) {
    if (!g.clock) m->Add(kEventHitsTotalDesc, g.labels, static_cast<double>(g.hits));
    if (!g.sampled) continue;
    m->Add(kSamplesTotalDesc, g.labels, static_cast<double>(g.samples));
    // Without PERF_FORMAT_LOST (before Linux 6.0) the kernel gives no per-event count: no series
    // rather than a false 0 (the rings' PERF_RECORD_LOST still count per CPU).
    if (g.lost_known) m->Add(kSamplesLostTotalDesc, g.labels, static_cast<double>(g.lost));
    if (!g.clock) m->Add(kSamplesUnaccountedTotalDesc, g.labels, static_cast<double>(g.unaccounted));
  }

  for (const auto& ep : plan_->events) {
    if (ep->pid > 0)
      m->Add(kPidPerfEventsDesc, {{"event", ep->display}, {"filter", ep->filter}},
             static_cast<double>(ep->OpenFdCount()));
  }

  // Kprobe and kretprobe misses: hits the kernel skipped (recursion) and, for a kretprobe,
  // returns it could not catch because every MAXACTIVE instance was taken by a call in flight
  // (a latency ending there then misses those observations).
  std::map<std::string, std::string> kprobes;  // event name (without group) -> as the config names it
  for (const auto& h : plan_->probes) {
    const ProbeKind k = h->spec().kind;
    if (k != ProbeKind::kKprobe && k != ProbeKind::kKretprobe) continue;
    auto name = plan_->probe_names.find(h->event().ToString());
    kprobes[h->event().name] = name != plan_->probe_names.end() ? name->second : h->event().ToString();
  }
  if (!kprobes.empty() && tracefs_ != nullptr) {
    auto text = ReadFileToString(tracefs_->root() + "/kprobe_profile");
    std::map<std::string, uint64_t> misses;  // as the config names it -> misses
    if (text.ok()) {
      for (const KprobeProfileRow& row : ParseKprobeProfile(*text)) {
        auto it = kprobes.find(row.event);
        if (it != kprobes.end()) misses[it->second] += row.misses;
      }
    }
    for (const auto& [event, n] : misses) m->Add(kProbeMissesTotalDesc, {{"event", event}}, static_cast<double>(n));
  }
}

// Per metric: decode errors, series dropped and removed, latency pairs unmatched and in flight.
void Pipeline::AppendCollectorMetrics(SelfMetrics* m) const {
  for (const MetricDesc* d : {&kDecodeErrorsTotalDesc, &kSeriesDroppedTotalDesc, &kSeriesRemovedTotalDesc})
    m->Declare(*d);
  for (Collector* c : plan_->Collectors()) {
    m->Add(kDecodeErrorsTotalDesc, {{"metric", c->name()}}, static_cast<double>(c->decode_errors()));
    m->Add(kSeriesDroppedTotalDesc, {{"metric", c->name()}}, static_cast<double>(c->series_dropped()));
    auto [idle, exited] = c->series_removed();
    m->Add(kSeriesRemovedTotalDesc, {{"metric", c->name()}, {"reason", "idle"}}, static_cast<double>(idle));
    m->Add(kSeriesRemovedTotalDesc, {{"metric", c->name()}, {"reason", "task_exited"}}, static_cast<double>(exited));
  }

  for (Collector* c : plan_->Collectors()) {
    if (c == nullptr || !c->is_latency()) continue;
    for (int r = 0; r < LatencyUnmatched::kReasonCount; ++r) {
      auto reason = static_cast<LatencyUnmatched::Reason>(r);
      m->Add(kLatencyUnmatchedTotalDesc, {{"metric", c->name()}, {"reason", LatencyUnmatched::Name(reason)}},
             static_cast<double>(c->unmatched(reason)));
    }
    m->Add(kLatencyInflightDesc, {{"metric", c->name()}}, static_cast<double>(c->inflight()));
  }
}

// Per CPU ring: bytes read, lost samples, garbled batches.
void Pipeline::AppendRingMetrics(SelfMetrics* m) const {
  for (const MetricDesc* d : {&kRingBufferReadBytesTotalDesc, &kRingLostSamplesTotalDesc, &kRingErrorsTotalDesc}) {
    m->Declare(*d);
  }
  for (const auto& r : rings_) {
    LabelPairs l = {{"cpu", std::to_string(r.cpu)}};
    m->Add(kRingBufferReadBytesTotalDesc, l, static_cast<double>(r.bytes_read.Get()));
    m->Add(kRingLostSamplesTotalDesc, l, static_cast<double>(r.lost_samples.Get()));
    m->Add(kRingErrorsTotalDesc, l, static_cast<double>(r.errors.Get()));
  }
}

// Per CPU: online, reopens after hotplug, untraced seconds.
void Pipeline::AppendCpuMetrics(SelfMetrics* m) const {
  for (const MetricDesc* d : {&kCpuOnlineDesc, &kCpuReopensTotalDesc, &kCpuUntracedSecondsTotalDesc}) m->Declare(*d);
  for (size_t c = 0; c < cpus_.size(); ++c) {
    const CpuState& st = cpus_[c];
    LabelPairs l = {{"cpu", std::to_string(c)}};
    m->Add(kCpuOnlineDesc, l, st.open ? 1 : 0);
    m->Add(kCpuReopensTotalDesc, l, static_cast<double>(st.reopens.Get()));
    m->Add(kCpuUntracedSecondsTotalDesc, l, st.untraced_seconds.load());
  }
}

// When the plan has profiles: learnt processes and images, refused files, unwind tables, debug info, renders.
void Pipeline::AppendProfileMetrics(SelfMetrics* m) const {
  const std::vector<Collector*> collectors = plan_->Collectors();
  if (std::any_of(collectors.begin(), collectors.end(), [](const Collector* c) { return c && c->is_profile(); })) {
    const ProcessImages::Stats images = process_images_.stats();
    m->Add(kProfileLearntProcessesDesc, {}, static_cast<double>(images.processes));
    m->Add(kProfileLearntImagesDesc, {{"unit", "images"}}, static_cast<double>(images.images));
    m->Add(kProfileLearntImagesDesc, {{"unit", "bytes"}}, static_cast<double>(images.bytes));
    m->Add(kProfileLearntProcessesEvictedTotalDesc, {}, static_cast<double>(images.evicted));
    m->Add(kProfileMappedFilesDesc, {}, static_cast<double>(mapped_files_.size()));
    for (const FileRefusalCounts* counts :
         {&renderer_.elf_refusals(), &renderer_.perf_map_refusals(), &cfi_tables_.refusals()}) {
      for (size_t r = 1; r < kFileRefusalReasons; ++r) {
        const auto reason = static_cast<FileRefusal>(r);
        m->Add(kProfileFileRefusalsTotalDesc, {{"source", counts->source()}, {"reason", FileRefusalName(reason)}},
               static_cast<double>(counts->Get(reason)));
      }
    }
    const unwind::CfiCache::Stats cfi = cfi_tables_.stats();
    if (cfi.reads > 0 || cfi.unreadable > 0) {
      m->Add(unwind::kProfileUnwindTablesDesc, {{"unit", "files"}}, static_cast<double>(cfi.files));
      m->Add(unwind::kProfileUnwindTablesDesc, {{"unit", "bytes"}}, static_cast<double>(cfi.bytes));
      m->Add(unwind::kProfileUnwindTableReadsTotalDesc, {{"result", "read"}}, static_cast<double>(cfi.reads));
      m->Add(unwind::kProfileUnwindTableReadsTotalDesc, {{"result", "unreadable"}},
             static_cast<double>(cfi.unreadable));
      m->Add(unwind::kProfileUnwindTableReadsTotalDesc, {{"result", "evicted"}}, static_cast<double>(cfi.evictions));
    }
    for (size_t s = 0; s < symbols::kDebugSources; ++s) {
      for (size_t r = 0; r < symbols::kDebugResults; ++r) {
        const auto source = static_cast<symbols::DebugSource>(s);
        const auto result = static_cast<symbols::DebugResult>(r);
        m->Add(symbols::kProfileDebuginfoTotalDesc,
               {{"source", symbols::DebugSourceName(source)}, {"result", symbols::DebugResultName(result)}},
               static_cast<double>(renderer_.debug_counts().Get(source, result)));
      }
    }
    {
      std::lock_guard<std::mutex> lock(render_mu_);
      for (const auto& [name, f] : renders_) {
        m->Add(kProfileRenderFramesDesc, {{"profile", name}, {"frames", "all"}}, static_cast<double>(f.frames));
        m->Add(kProfileRenderFramesDesc, {{"profile", name}, {"frames", "no_symbol"}},
               static_cast<double>(f.no_symbol));
        m->Add(kProfileRenderFramesDesc, {{"profile", name}, {"frames", "unknown_mapping"}},
               static_cast<double>(f.unknown_mapping));
        m->Add(kProfileRenderFramesDesc, {{"profile", name}, {"frames", "file_changed"}},
               static_cast<double>(f.file_changed));
      }
    }
    {
      std::lock_guard<std::mutex> lock(render_mu_);
      for (const auto& [name, ns] : render_cpu_ns_)
        m->Add(kProfileRenderCpuSecondsTotalDesc, {{"profile", name}}, static_cast<double>(ns) * 1e-9);
    }
  }
}

// The reader's other records and wakeups, build information, kernel features.
void Pipeline::AppendReaderAndKernelMetrics(SelfMetrics* m) const {
  m->Add(kRingOtherRecordsTotalDesc, {},
         reader_ ? static_cast<double>(reader_->other_records() + reader_->sample_errors()) : 0.0);
  m->Add(kReaderWakeupsTotalDesc, {}, static_cast<double>(wakeups_.Get()));

  utsname u{};
  ::uname(&u);
  m->Add(kBuildInfoDesc, {{"version", TPE_VERSION}, {"kernel", u.release}}, 1);
  for (const auto& row : DescribeFeatures(plan_->features)) {
    m->Add(kKernelFeatureDesc, {{"feature", row.feature}, {"since", row.since}}, row.available ? 1 : 0);
  }
  if (plan_->features.kallsyms_hidden.has_value()) {  // unknown: no series rather than a false 0
    m->Add(kKallsymsHiddenDesc, {}, *plan_->features.kallsyms_hidden ? 1 : 0);
  }
}

void Pipeline::AppendEngineMetrics(SelfMetrics* m) const {
  // The families' places on the page; a profile's and a bpf program's appear with their first
  // series, some of them then shown even empty.
  m->Declare(kMetricInfoDesc);
  for (const MetricDesc* d :
       {&kProfileSamplesTotalDesc, &kProfileStacksDesc, &kProfileOtherContextFramesTotalDesc,
        &bpf::kProfileStacksLostTotalDesc, &kProfileSampleSecondsTotalDesc, &kProfileUnwindEndsTotalDesc,
        &kProfileOffCpuShortBlocksTotalDesc, &kProfileOffCpuDroppedTotalDesc, &kProfileOffCpuUnpairedTotalDesc,
        &kProfileOffCpuTasksDesc, &bpf::kBpfProgramRunsTotalDesc, &bpf::kBpfProgramMissesTotalDesc,
        &bpf::kBpfProbeBusyTotalDesc, &bpf::kBpfProbeStringFaultsTotalDesc, &bpf::kBpfProgramRunSecondsTotalDesc,
        &bpf::kBpfProgramCpuSecondsTotalDesc, &bpf::kBpfMapNoMemoryTotalDesc, &bpf::kBpfMapMemoryBytesDesc}) {
    m->Declare(*d, /*shown_when_empty=*/false);
  }
  for (const MetricPlan& mp : plan_->metrics) {
    const Collector* c = mp.collector.get();
    if (c == nullptr) continue;
    m->Add(kMetricInfoDesc, {{"metric", c->name()}, {"engine", std::string(NameOf(mp.engine))}}, 1);
    for (EngineStat& st : c->EngineStats()) {
      // Before Linux 6.7 the kernel does not count a tracepoint program's misses: no series
      // rather than a false 0 (tracepoint_exporter_kernel_feature{feature="bpf_tracepoint_misses"}).
      if (st.desc == &bpf::kBpfProgramMissesTotalDesc && !plan_->features.bpf.tracepoint_misses) continue;
      if (st.desc != nullptr) m->Add(*st.desc, std::move(st.labels), st.value);
    }
  }
  if (m->HasSeries(kProfileSamplesTotalDesc)) {
    m->ShowEmpty(kProfileStacksDesc);
    m->ShowEmpty(kProfileOtherContextFramesTotalDesc);
    if (m->HasSeries(kProfileOffCpuShortBlocksTotalDesc)) {
      for (const MetricDesc* d :
           {&kProfileOffCpuDroppedTotalDesc, &kProfileOffCpuUnpairedTotalDesc, &kProfileOffCpuTasksDesc}) {
        m->ShowEmpty(*d);
      }
    }
  }
  if (m->HasSeries(bpf::kBpfProgramRunsTotalDesc)) {
    for (const MetricDesc* d :
         {&bpf::kBpfProgramRunSecondsTotalDesc, &bpf::kBpfMapNoMemoryTotalDesc, &bpf::kBpfMapMemoryBytesDesc}) {
      m->ShowEmpty(*d);
    }
  }
}

}  // namespace tpe
