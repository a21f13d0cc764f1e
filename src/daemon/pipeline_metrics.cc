// Pipeline::Snapshot: every metric of the current plan, then the self-metrics (per event,
// per metric, per CPU ring, per CPU).
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "bpf/bpf_metric.h"
#include "collectors/latency.h"
#include "common/file_util.h"
#include "daemon/pipeline.h"

#ifndef TPE_VERSION
#define TPE_VERSION "0.0.0"
#endif

namespace tpe {

namespace {

MetricSnapshot Family(const std::string& name, const std::string& help, MetricKind kind) {
  MetricSnapshot m;
  m.name = name;
  m.help = help;
  m.kind = kind;
  return m;
}

void Add(MetricSnapshot* m, LabelPairs labels, double v) {
  SeriesSnapshot s;
  s.labels = std::move(labels);
  s.value = v;
  m->series.push_back(std::move(s));
}

}  // namespace

std::optional<Pipeline::ProfileData> Pipeline::ProfileOf(const Plan& plan, const std::string& name) {
  for (const Collector* c : plan.Collectors()) {
    if (c && c->stack_profile() != nullptr && c->name() == name) {
      const StackProfile& p = *c->stack_profile();
      return ProfileData{p.value_type(), p.value_unit(), p.scale(), p.instance(), p.Stacks()};
    }
  }
  return std::nullopt;
}

std::optional<Pipeline::ProfileData> Pipeline::Profile(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!plan_) return std::nullopt;
  return ProfileOf(*plan_, name);
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
  AppendEventMetrics(&out);
  AppendCollectorMetrics(&out);
  AppendEngineMetrics(&out);
  AppendRingMetrics(&out);
  AppendCpuMetrics(&out);
  AppendProfileMetrics(&out);
  AppendReaderAndKernelMetrics(&out);

  return out;
}

// Per event as the config names it: the kernel's hits, samples, lost and unaccounted samples; pid perf events; kprobe
// misses.
void Pipeline::AppendEventMetrics(std::vector<MetricSnapshot>* out) const {
  auto hits = Family("tracepoint_exporter_event_hits_total",
                     "Times the tracepoint fired (after its filter), counted by the kernel.", MetricKind::kCounter);
  auto samples = Family("tracepoint_exporter_samples_total", "Samples decoded, per event.", MetricKind::kCounter);
  auto unaccounted = Family(
      "tracepoint_exporter_samples_unaccounted_total",
      "Hits the kernel counted that became neither a sample nor a lost sample (a lower bound, measured each second): "
      "samples + lost + unaccounted == hits once the rings are drained. Nonzero when the kernel drops samples "
      "without accounting for them.",
      MetricKind::kCounter);
  auto lost = Family("tracepoint_exporter_samples_lost_total",
                     "Samples the kernel dropped because the ring buffer was full, per event (PERF_FORMAT_LOST).",
                     MetricKind::kCounter);
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
    if (!g.clock) Add(&hits, g.labels, static_cast<double>(g.hits));
    if (!g.sampled) continue;
    Add(&samples, g.labels, static_cast<double>(g.samples));
    // Without PERF_FORMAT_LOST (before Linux 6.0) the kernel gives no per-event count: no series
    // rather than a false 0 (the rings' PERF_RECORD_LOST still count per CPU).
    if (g.lost_known) Add(&lost, g.labels, static_cast<double>(g.lost));
    if (!g.clock) Add(&unaccounted, g.labels, static_cast<double>(g.unaccounted));
  }
  out->push_back(std::move(hits));
  out->push_back(std::move(samples));
  out->push_back(std::move(lost));
  out->push_back(std::move(unaccounted));

  auto pid_events = Family("tracepoint_exporter_pid_perf_events",
                           "Perf events (file descriptors) a \"pid\" event holds: one per thread the process had when "
                           "they were opened, on every CPU for a sampled metric (threads it creates later inherit "
                           "them in the kernel). At most settings.max_pid_perf_events.",
                           MetricKind::kGauge);
  for (const auto& ep : plan_->events) {
    if (ep->pid > 0)
      Add(&pid_events, {{"event", ep->display}, {"filter", ep->filter}}, static_cast<double>(ep->OpenFdCount()));
  }
  if (!pid_events.series.empty()) out->push_back(std::move(pid_events));

  // Kprobe and kretprobe misses: hits the kernel skipped (recursion) and, for a kretprobe,
  // returns it could not catch because every MAXACTIVE instance was taken by a call in flight
  // (a latency ending there then misses those observations).
  auto probe_misses = Family("tracepoint_exporter_probe_misses_total",
                             "Hits of a kprobe or kretprobe event the kernel missed (<tracefs>/kprobe_profile, third "
                             "column): for a kretprobe mostly returns of calls beyond its maxactive calls in flight, "
                             "which its metrics never see. Raise the event's \"maxactive\" (at most 4096).",
                             MetricKind::kCounter);
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
    for (const auto& [event, n] : misses) Add(&probe_misses, {{"event", event}}, static_cast<double>(n));
    if (!probe_misses.series.empty()) out->push_back(std::move(probe_misses));
  }
}

// Per metric: decode errors, series dropped and removed, latency pairs unmatched and in flight.
void Pipeline::AppendCollectorMetrics(std::vector<MetricSnapshot>* out) const {
  auto decode = Family("tracepoint_exporter_decode_errors_total",
                       "Samples a metric could not decode (a field outside the record).", MetricKind::kCounter);
  auto dropped =
      Family("tracepoint_exporter_series_dropped_total",
             "Samples not counted because the metric reached settings.max_series_per_metric.", MetricKind::kCounter);
  auto removed = Family("tracepoint_exporter_series_removed_total",
                        "Series removed, by reason: idle (unchanged for settings.series_idle_timeout_seconds) or "
                        "task_exited (its pid/tid label names a task that exited; removed once its final value "
                        "was scraped, or at once when the metric is full and a new series needs the room).",
                        MetricKind::kCounter);
  for (Collector* c : plan_->Collectors()) {
    Add(&decode, {{"metric", c->name()}}, static_cast<double>(c->decode_errors()));
    Add(&dropped, {{"metric", c->name()}}, static_cast<double>(c->series_dropped()));
    auto [idle, exited] = c->series_removed();
    Add(&removed, {{"metric", c->name()}, {"reason", "idle"}}, static_cast<double>(idle));
    Add(&removed, {{"metric", c->name()}, {"reason", "task_exited"}}, static_cast<double>(exited));
  }
  out->push_back(std::move(decode));
  out->push_back(std::move(dropped));
  out->push_back(std::move(removed));

  auto unmatched = Family("tracepoint_exporter_latency_unmatched_total",
                          "Latency starts or ends that made no observation, by reason (replaced, no_start, "
                          "table_full, expired, series_limit).",
                          MetricKind::kCounter);
  auto inflight =
      Family("tracepoint_exporter_latency_inflight",
             "Latency starts waiting for their end (at most the metric's max_inflight).", MetricKind::kGauge);
  for (Collector* c : plan_->Collectors()) {
    if (c == nullptr || !c->is_latency()) continue;
    for (int r = 0; r < LatencyUnmatched::kReasonCount; ++r) {
      auto reason = static_cast<LatencyUnmatched::Reason>(r);
      Add(&unmatched, {{"metric", c->name()}, {"reason", LatencyUnmatched::Name(reason)}},
          static_cast<double>(c->unmatched(reason)));
    }
    Add(&inflight, {{"metric", c->name()}}, static_cast<double>(c->inflight()));
  }
  if (!unmatched.series.empty()) {
    out->push_back(std::move(unmatched));
    out->push_back(std::move(inflight));
  }
}

// Per CPU ring: bytes read, lost samples, garbled batches.
void Pipeline::AppendRingMetrics(std::vector<MetricSnapshot>* out) const {
  auto bytes = Family("tracepoint_exporter_ring_buffer_read_bytes_total",
                      "Bytes read from each CPU's perf ring buffer.", MetricKind::kCounter);
  auto ring_lost =
      Family("tracepoint_exporter_ring_lost_samples_total",
             "Samples reported lost by PERF_RECORD_LOST/PERF_RECORD_LOST_SAMPLES, per CPU ring.", MetricKind::kCounter);
  auto ring_err = Family("tracepoint_exporter_ring_errors_total",
                         "Garbled ring buffer batches that were skipped, per CPU ring.", MetricKind::kCounter);
  for (const auto& r : rings_) {
    LabelPairs l = {{"cpu", std::to_string(r.cpu)}};
    Add(&bytes, l, static_cast<double>(r.bytes_read.Get()));
    Add(&ring_lost, l, static_cast<double>(r.lost_samples.Get()));
    Add(&ring_err, l, static_cast<double>(r.errors.Get()));
  }
  out->push_back(std::move(bytes));
  out->push_back(std::move(ring_lost));
  out->push_back(std::move(ring_err));
}

// Per CPU: online, reopens after hotplug, untraced seconds.
void Pipeline::AppendCpuMetrics(std::vector<MetricSnapshot>* out) const {
  auto online = Family("tracepoint_exporter_cpu_online",
                       "Whether the CPU's perf events are open and counting (0: offline, or its events are being "
                       "reopened after it came back).",
                       MetricKind::kGauge);
  auto reopens =
      Family("tracepoint_exporter_cpu_reopens_total",
             "Times the CPU's ring and perf events were (re)opened after it came online.", MetricKind::kCounter);
  auto untraced = Family("tracepoint_exporter_cpu_untraced_seconds_total",
                         "Seconds the CPU's perf events were dead, from finding it offline to reopening them once "
                         "it was back (events it ran in that time after coming back were not seen).",
                         MetricKind::kCounter);
  for (size_t c = 0; c < cpus_.size(); ++c) {
    const CpuState& st = cpus_[c];
    LabelPairs l = {{"cpu", std::to_string(c)}};
    Add(&online, l, st.open ? 1 : 0);
    Add(&reopens, l, static_cast<double>(st.reopens.Get()));
    Add(&untraced, l, st.untraced_seconds.load());
  }
  out->push_back(std::move(online));
  out->push_back(std::move(reopens));
  out->push_back(std::move(untraced));
}

// When the plan has profiles: learnt processes and images, refused files, unwind tables, debug info, renders.
void Pipeline::AppendProfileMetrics(std::vector<MetricSnapshot>* out) const {
  const std::vector<Collector*> collectors = plan_->Collectors();
  if (std::any_of(collectors.begin(), collectors.end(), [](const Collector* c) { return c && c->is_profile(); })) {
    const ProcessImages::Stats images = process_images_.stats();
    auto learnt = Family("tracepoint_exporter_profile_learnt_processes",
                         "Processes whose mappings are known (from PERF_RECORD_MMAP2 and the task records, or read "
                         "from /proc/PID/maps), to name profiles' user frames with the mappings of their time.",
                         MetricKind::kGauge);
    Add(&learnt, {}, static_cast<double>(images.processes));
    out->push_back(std::move(learnt));
    auto learnt_images = Family("tracepoint_exporter_profile_learnt_images",
                                "Process images (what a process maps from one exec or fork to the next) held, and "
                                "the bytes they hold (bound: 64 MiB).",
                                MetricKind::kGauge);
    Add(&learnt_images, {{"unit", "images"}}, static_cast<double>(images.images));
    Add(&learnt_images, {{"unit", "bytes"}}, static_cast<double>(images.bytes));
    out->push_back(std::move(learnt_images));
    auto evicted = Family("tracepoint_exporter_profile_learnt_processes_evicted_total",
                          "Process images forgotten to stay within the bound: ended ones no sample used first, then "
                          "ended ones with samples, then live ones (read again from /proc when needed).",
                          MetricKind::kCounter);
    Add(&evicted, {}, static_cast<double>(images.evicted));
    out->push_back(std::move(evicted));
    auto files =
        Family("tracepoint_exporter_profile_mapped_files",
               "Distinct files (path, device, inode, size, mtime) profiles' user frames lie in.", MetricKind::kGauge);
    Add(&files, {}, static_cast<double>(mapped_files_.size()));
    out->push_back(std::move(files));
    auto refusals =
        Family("tracepoint_exporter_profile_file_refusals_total",
               "Files other users control that were refused (source elf or perf_map: a render's reads; unwind: "
               "the unwind tables of a \"dwarf\" profile's samples), by "
               "reason: fifo, not_regular, symlink, too_large, owner. Each reason is logged once.",
               MetricKind::kCounter);
    for (const FileRefusalCounts* counts :
         {&renderer_.elf_refusals(), &renderer_.perf_map_refusals(), &cfi_tables_.refusals()}) {
      for (size_t r = 1; r < kFileRefusalReasons; ++r) {
        const auto reason = static_cast<FileRefusal>(r);
        Add(&refusals, {{"source", counts->source()}, {"reason", FileRefusalName(reason)}},
            static_cast<double>(counts->Get(reason)));
      }
    }
    out->push_back(std::move(refusals));
    const unwind::CfiCache::Stats cfi = cfi_tables_.stats();
    if (cfi.reads > 0 || cfi.unreadable > 0) {
      auto tables = Family("tracepoint_exporter_profile_unwind_tables",
                           "The unwind tables (.eh_frame, .debug_frame) \"dwarf\" profiles hold, one per file: "
                           "files, and their bytes (bound: 256 MiB).",
                           MetricKind::kGauge);
      Add(&tables, {{"unit", "files"}}, static_cast<double>(cfi.files));
      Add(&tables, {{"unit", "bytes"}}, static_cast<double>(cfi.bytes));
      out->push_back(std::move(tables));
      auto reads = Family("tracepoint_exporter_profile_unwind_table_reads_total",
                          "Files read for their unwind tables, by result: read, unreadable (gone, refused, not "
                          "x86-64 ELF, or no call frame information: its frames are walked by frame pointer; tried "
                          "again after 10 s), evicted (to stay within the bound).",
                          MetricKind::kCounter);
      Add(&reads, {{"result", "read"}}, static_cast<double>(cfi.reads));
      Add(&reads, {{"result", "unreadable"}}, static_cast<double>(cfi.unreadable));
      Add(&reads, {{"result", "evicted"}}, static_cast<double>(cfi.evictions));
      out->push_back(std::move(reads));
    }
    auto debuginfo = Family("tracepoint_exporter_profile_debuginfo_total",
                            "Lookups of stripped binaries' debug information by source (build_id_dir, debuglink, "
                            "debugdata, debuginfod) and result: found, missing, build_id_mismatch (refused), "
                            "crc_mismatch (refused), invalid (not ELF, corrupt), refused (untrusted file), pending "
                            "(a debuginfod fetch still running: named by a later render), failed (debuginfod: "
                            "timeout, connection, server error). One per binary and source while it is cached.",
                            MetricKind::kCounter);
    for (size_t s = 0; s < symbols::kDebugSources; ++s) {
      for (size_t r = 0; r < symbols::kDebugResults; ++r) {
        const auto source = static_cast<symbols::DebugSource>(s);
        const auto result = static_cast<symbols::DebugResult>(r);
        Add(&debuginfo, {{"source", symbols::DebugSourceName(source)}, {"result", symbols::DebugResultName(result)}},
            static_cast<double>(renderer_.debug_counts().Get(source, result)));
      }
    }
    out->push_back(std::move(debuginfo));
    auto rendered = Family("tracepoint_exporter_profile_render_frames",
                           "Frames of a profile's last render (/debug/pprof/<profile>): all, and those left as an "
                           "offset: no_symbol (a known mapping, no ELF or perf-map symbol holds it), unknown_mapping "
                           "(no mapping known for the process: exited before its mappings were learnt, or not "
                           "readable); file_changed counts the files not read because they are no longer the ones "
                           "sampled (replaced or overwritten since) or are gone. Absent until the profile is "
                           "rendered.",
                           MetricKind::kGauge);
    {
      std::lock_guard<std::mutex> lock(render_mu_);
      for (const auto& [name, f] : renders_) {
        Add(&rendered, {{"profile", name}, {"frames", "all"}}, static_cast<double>(f.frames));
        Add(&rendered, {{"profile", name}, {"frames", "no_symbol"}}, static_cast<double>(f.no_symbol));
        Add(&rendered, {{"profile", name}, {"frames", "unknown_mapping"}}, static_cast<double>(f.unknown_mapping));
        Add(&rendered, {{"profile", name}, {"frames", "file_changed"}}, static_cast<double>(f.file_changed));
      }
    }
    if (!rendered.series.empty()) out->push_back(std::move(rendered));
    auto render_cpu = Family("tracepoint_exporter_profile_render_cpu_seconds_total",
                             "CPU time the exporter spent rendering a profile for its requests (symbolization, "
                             "pprof, flame graph, gzip), by profile. Its sample handling is "
                             "tracepoint_exporter_profile_sample_seconds_total (perf engine) or "
                             "tracepoint_exporter_bpf_program_cpu_seconds_total (bpf).",
                             MetricKind::kCounter);
    {
      std::lock_guard<std::mutex> lock(render_mu_);
      for (const auto& [name, ns] : render_cpu_ns_)
        Add(&render_cpu, {{"profile", name}}, static_cast<double>(ns) * 1e-9);
    }
    if (!render_cpu.series.empty()) out->push_back(std::move(render_cpu));
  }
}

// The reader's other records and wakeups, build information, kernel features.
void Pipeline::AppendReaderAndKernelMetrics(std::vector<MetricSnapshot>* out) const {
  auto other = Family("tracepoint_exporter_ring_other_records_total",
                      "Ring records of types not used (stepped over) or samples of unknown ids.", MetricKind::kCounter);
  Add(&other, {}, reader_ ? static_cast<double>(reader_->other_records() + reader_->sample_errors()) : 0.0);
  out->push_back(std::move(other));
  auto wake = Family(
      "tracepoint_exporter_reader_wakeups_total",
      "Reader thread wakeups (watermark, mark, or timeout: 100 ms while a metric counts ring samples, else 1 s).",
      MetricKind::kCounter);
  Add(&wake, {}, static_cast<double>(wakeups_.Get()));
  out->push_back(std::move(wake));

  utsname u{};
  ::uname(&u);
  auto info = Family("tracepoint_exporter_build_info", "Build and kernel information; always 1.", MetricKind::kGauge);
  Add(&info, {{"version", TPE_VERSION}, {"kernel", u.release}}, 1);
  out->push_back(std::move(info));
  auto feature = Family("tracepoint_exporter_kernel_feature",
                        "Whether the running kernel has a feature the exporter uses (1) or not (0; the log and "
                        "--config.check say which fallback runs and what it costs). since: the first kernel with it.",
                        MetricKind::kGauge);
  for (const auto& row : DescribeFeatures(plan_->features)) {
    Add(&feature, {{"feature", row.feature}, {"since", row.since}}, row.available ? 1 : 0);
  }
  out->push_back(std::move(feature));
  if (plan_->features.kallsyms_hidden.has_value()) {  // unknown: no series rather than a false 0
    auto hidden = Family("tracepoint_exporter_kallsyms_hidden",
                         "Whether /proc/kallsyms lists every kernel address as 0 to the exporter (1: kernel frames "
                         "of profiles stay raw addresses; it needs CAP_SYSLOG) or not (0), as found when the "
                         "running config was planned.",
                         MetricKind::kGauge);
    Add(&hidden, {}, *plan_->features.kallsyms_hidden ? 1 : 0);
    out->push_back(std::move(hidden));
  }
}

void Pipeline::AppendEngineMetrics(std::vector<MetricSnapshot>* out) const {
  auto info = Family("tracepoint_exporter_metric_info",
                     "The engine each metric runs on (bpf: in-kernel aggregation; perf: perf events and rings); "
                     "always 1. --config.check says why.",
                     MetricKind::kGauge);
  auto runs = Family("tracepoint_exporter_bpf_program_runs_total",
                     "Runs of each bpf-engine program (every hit of its tracepoint, before its filter), counted "
                     "by the program.",
                     MetricKind::kCounter);
  auto misses = Family("tracepoint_exporter_bpf_program_misses_total",
                       "Hits of the tracepoint the kernel did not run the program for, because another BPF program "
                       "was running on that CPU (bpf_prog_info.recursion_misses; Linux 6.7 for tracepoint and probe "
                       "programs). hits = runs + misses (+ busy for probe programs).",
                       MetricKind::kCounter);
  auto busy = Family("tracepoint_exporter_bpf_probe_busy_total",
                     "Runs of a probe event's program (uprobe, USDT, kprobe) that preempted another run of it on "
                     "the same CPU and skipped the event, counted by the program on every kernel.",
                     MetricKind::kCounter);
  auto string_faults = Family("tracepoint_exporter_bpf_probe_string_faults_total",
                              "String arguments a probe event's program could not read and counted as the empty "
                              "string: a bad pointer, or a user page not resident (a BPF program cannot fault it "
                              "in; the perf engine's fetch does, which is why \"auto\" puts metrics that read a "
                              "uprobe's string on perf).",
                              MetricKind::kCounter);
  auto seconds = Family("tracepoint_exporter_bpf_program_run_seconds_total",
                        "Kernel CPU time spent in the program (bpf_prog_info.run_time_ns; counted only while the "
                        "sysctl kernel.bpf_stats_enabled is 1).",
                        MetricKind::kCounter);
  auto cpu = Family("tracepoint_exporter_bpf_program_cpu_seconds_total",
                    "Kernel CPU time spent in the program, estimated without leaving BPF run-time stats on: "
                    "its runs priced at the ns per run measured in the latest cost window "
                    "(settings.bpf_cost_window_seconds every settings.bpf_cost_period_seconds). Absent until a "
                    "window has measured it, and where stats cannot be turned on (CAP_SYS_ADMIN, Linux 5.8).",
                    MetricKind::kCounter);
  auto no_memory = Family("tracepoint_exporter_bpf_map_no_memory_total",
                          "Hits a bpf-engine metric could not count because the kernel failed to allocate a map "
                          "element (ENOMEM from the map update; not the cardinality limit, which is "
                          "series_dropped_total, nor the in-flight limit, which is latency_unmatched_total "
                          "{reason=\"table_full\"}).",
                          MetricKind::kCounter);
  auto map_memory = Family("tracepoint_exporter_bpf_map_memory_bytes",
                           "Kernel memory of a bpf-engine metric's maps, as the kernel charges it (the memlock line "
                           "of /proc/self/fdinfo: a hash map's bucket array is allocated up front for "
                           "max_series_per_metric, elements as series appear).",
                           MetricKind::kGauge);
  auto profile_samples =
      Family("tracepoint_exporter_profile_samples_total",
             "Samples a profile counted into its stacks (/debug/pprof/<profile>).", MetricKind::kCounter);
  auto profile_stacks = Family("tracepoint_exporter_profile_stacks",
                               "Distinct (label set, stack) series a profile holds; at "
                               "settings.max_stacks_per_profile new ones are dropped "
                               "(tracepoint_exporter_series_dropped_total{metric}).",
                               MetricKind::kGauge);
  auto profile_other =
      Family("tracepoint_exporter_profile_other_context_frames_total",
             "Hypervisor and guest frames of callchains, left out of a profile's stacks.", MetricKind::kCounter);
  auto profile_sample_seconds = Family(
      "tracepoint_exporter_profile_sample_seconds_total",
      "Time the reader thread spent handling a perf-engine profile's samples (splitting the callchain, "
      "keying and counting the stack; CLOCK_MONOTONIC around one sample in 16, scaled), by profile. Rendering is "
      "tracepoint_exporter_profile_render_cpu_seconds_total.",
      MetricKind::kCounter);
  auto off_short = Family("tracepoint_exporter_profile_off_cpu_short_blocks_total",
                          "Times a task of an off-CPU profile came back on CPU sooner than its min_block_seconds: "
                          "counted here, left out of the profile.",
                          MetricKind::kCounter);
  auto off_dropped = Family("tracepoint_exporter_profile_off_cpu_dropped_total",
                            "Switch-outs an off-CPU profile could not remember (100,000 tasks already off CPU): "
                            "their time off CPU is lost.",
                            MetricKind::kCounter);
  auto off_unpaired = Family("tracepoint_exporter_profile_off_cpu_unpaired_total",
                             "Blocks an off-CPU profile lost because the task's switch back in was never seen (it "
                             "switched out again first): the kernel did not trace it. Seen on a kernel that traces "
                             "no switch out of one CPU's idle task.",
                             MetricKind::kCounter);
  auto off_tasks = Family("tracepoint_exporter_profile_off_cpu_tasks",
                          "Tasks an off-CPU profile holds as switched out (their time is added when they come back).",
                          MetricKind::kGauge);
  auto profile_lost = Family("tracepoint_exporter_profile_stacks_lost_total",
                             "Samples of a bpf-engine profile whose kernel or user stack (part) the stack map could "
                             "not hold, by reason: stack_map_full (settings.max_stacks_per_profile distinct stacks "
                             "in use), hash_collision (another stack holds the id's bucket). The samples are counted "
                             "under a frame naming the reason. An off-CPU profile counts ns blocked instead, its "
                             "unit.",
                             MetricKind::kCounter);
  auto unwind_ends = Family("tracepoint_exporter_profile_unwind_ends_total",
                            "How a \"dwarf\" profile's user stacks ended when unwound from the unwind tables, by "
                            "reason: outermost (whole: the outermost frame reached), max_frames, no_mapping (a pc "
                            "in no mapping known for the process), no_frame_pointer (code without a table whose "
                            "frame pointer led nowhere), stack_copy (deeper than settings.profile_stack_bytes), "
                            "bad_rule (a rule that cannot be evaluated), no_progress (a corrupt stack), "
                            "no_registers (a kernel thread).",
                            MetricKind::kCounter);
  for (const MetricPlan& m : plan_->metrics) {
    const Collector* c = m.collector.get();
    if (c == nullptr) continue;
    const std::string engine(NameOf(m.engine));
    Add(&info, {{"metric", c->name()}, {"engine", engine}}, 1);
    for (EngineStat& st : c->EngineStats()) {
      for (MetricSnapshot* f :
           {&runs, &misses, &busy, &string_faults, &seconds, &cpu, &no_memory, &map_memory, &profile_samples,
            &profile_stacks, &profile_other, &profile_lost, &profile_sample_seconds, &off_short, &off_dropped,
            &off_unpaired, &off_tasks, &unwind_ends}) {
        if (f->name != st.family) continue;
        // Before Linux 6.7 the kernel does not count a tracepoint program's misses: no series
        // rather than a false 0 (tracepoint_exporter_kernel_feature{feature="bpf_tracepoint_misses"}).
        if (f == &misses && !plan_->features.bpf.tracepoint_misses) continue;
        Add(f, std::move(st.labels), st.value);
      }
    }
  }
  out->push_back(std::move(info));
  if (!profile_samples.series.empty()) {
    out->push_back(std::move(profile_samples));
    out->push_back(std::move(profile_stacks));
    out->push_back(std::move(profile_other));
    if (!profile_lost.series.empty()) out->push_back(std::move(profile_lost));
    if (!profile_sample_seconds.series.empty()) out->push_back(std::move(profile_sample_seconds));
    if (!unwind_ends.series.empty()) out->push_back(std::move(unwind_ends));
    if (!off_short.series.empty()) {
      out->push_back(std::move(off_short));
      out->push_back(std::move(off_dropped));
      out->push_back(std::move(off_unpaired));
      out->push_back(std::move(off_tasks));
    }
  }
  if (!runs.series.empty()) {
    out->push_back(std::move(runs));
    if (!misses.series.empty()) out->push_back(std::move(misses));
    if (!busy.series.empty()) out->push_back(std::move(busy));
    if (!string_faults.series.empty()) out->push_back(std::move(string_faults));
    out->push_back(std::move(seconds));
    if (!cpu.series.empty()) out->push_back(std::move(cpu));
    out->push_back(std::move(no_memory));
    out->push_back(std::move(map_memory));
  }
}

}  // namespace tpe
