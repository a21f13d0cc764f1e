// Planning of the bpf engine (see plan.h "Engines"): the same events, formats, labels and
// buckets as the perf engine's planning, turned into a bpf::BpfMetricSpec.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include "bpf/bpf_metric.h"
#include "bpf/bpf_profile.h"
#include "bpf/filter_compiler.h"
#include "bpf/image_stamps.h"
#include "common/file_util.h"
#include "common/utf8.h"
#include "filter/filter.h"
#include "perf/perf_event.h"
#include "plan/bpf_parts.h"
#include "plan/plan_internal.h"

namespace tpe::plan_internal {
namespace {

// For a probe event of `plan` (ProbeRegistry; a plain tracepoint leaves `out` unset), the record
// its KPROBE program materializes (bpf/probe_record.h), from the event's fetch args and format.
// Errors: Unimplemented when the metric reads a __probe_* field (the program does not fill them)
// or a fetch arg the program cannot compute; unless `forced`, Unavailable when it reads a string
// from user memory (a label, the filter): a BPF program cannot fault in a page that is not
// resident, the kernel's fetch for the perf engine does (measured: 200 calls whose string lay
// in a freshly mapped page read "" on bpf). Under "bpf" the metric runs and such reads are
// counted (tracepoint_exporter_bpf_probe_string_faults_total).
Status ProbeRecordOf(const Plan& plan, const EventPlan& ep, const MetricConfig& m, const std::string& filter,
                     const std::vector<std::string>& key, bool forced, std::optional<bpf::ProbeRecord>* out) {
  const ProbeHandle* handle = nullptr;
  for (const auto& h : plan.probes) {
    if (h->event() == ep.event) handle = h.get();
  }
  if (handle == nullptr) return Status::Ok();
  bool probe_fields = filter.find("__probe_") != std::string::npos || m.value.field.rfind("__probe_", 0) == 0;
  for (const auto& l : m.labels) probe_fields = probe_fields || l.field.rfind("__probe_", 0) == 0;
  for (const auto& k : key) probe_fields = probe_fields || k.rfind("__probe_", 0) == 0;
  if (probe_fields) {
    return Unimplemented("the __probe_ip/__probe_func/__probe_ret_ip fields of " + ep.display +
                         " (a probe program computes only the \"args\" fields)");
  }
  const ProbeKind kind = handle->spec().kind;
  auto record = bpf::BuildProbeRecord(handle->spec().args, ep.format,
                                      kind == ProbeKind::kUprobe || kind == ProbeKind::kUretprobe);
  if (!record.ok()) return Unimplemented(record.status().message());
  // A kprobe's ustring is fetched without faulting by the kernel too (fetch_store_string_user:
  // strncpy_from_user_nofault): only uprobes' strings are better on perf.
  if (!forced && record->user) {
    for (const std::string& field : record->UserStringFields()) {
      bool read = filter.find(field) != std::string::npos;  // conservative: any mention
      for (const auto& l : m.labels) read = read || l.field == field;
      if (read) {
        return Unavailable("its string argument \"" + field + "\" of " + ep.display +
                           " is read from user memory, where bpf_probe_read_user_str cannot fault in a page that "
                           "is not resident (the value would be empty) and the kernel's own fetch on the perf engine "
                           "can");
      }
    }
  }
  *out = std::move(*record);
  return Status::Ok();
}

// The process image stamps' map (bpf/image_stamps.h), made at the first call of the daemon:
// sched:sched_process_exec and sched:sched_process_fork from tracefs.
StatusOr<int> ImageStampsFd(const Tracefs& tracefs) {
  TPE_ASSIGN_OR_RETURN(uint64_t exec_id, tracefs.ReadId({"sched", "sched_process_exec"}));
  TPE_ASSIGN_OR_RETURN(uint64_t fork_id, tracefs.ReadId({"sched", "sched_process_fork"}));
  TPE_ASSIGN_OR_RETURN(std::string text, tracefs.ReadFormat({"sched", "sched_process_fork"}));
  TPE_ASSIGN_OR_RETURN(EventFormat fork, ParseFormat(text, "sched:sched_process_fork"));
  const FieldFormat* child = fork.FindField("child_pid");
  if (child == nullptr || child->size != 4) {
    return Unimplemented("sched:sched_process_fork has no 4-byte child_pid field on this kernel");
  }
  TPE_ASSIGN_OR_RETURN(const bpf::ImageStamps* stamps, bpf::ImageStamps::Get(exec_id, fork_id, child->offset));
  return stamps->map_fd();
}

// The plan's one mmap tracking event (EventPlan::mmap_tracker), added at the first call.
void AddMmapTracker(Plan* plan) {
  plan->needs_ordering = true;
  for (const auto& ep : plan->events) {
    if (ep->mmap_tracker) return;
  }
  auto ep = std::make_unique<EventPlan>();
  ep->event = EventName{"tracepoint_exporter", "mmap_tracker"};
  ep->display = "mmap records for bpf profiles";
  ep->sampled = true;
  ep->mmap_tracker = true;
  plan->events.push_back(std::move(ep));
}

}  // namespace

StatusOr<bool> PlanBpfMetric(const PlanContext& ctx, const MetricConfig& m, const bpf::BpfSupport& bpf,
                             const std::set<std::string>& running_bpf, std::string* why) {
  const bool running = running_bpf.count(m.canonical) > 0;
  using bpf::BpfEndpoint;
  using bpf::BpfMetricSpec;
  const bool forced = m.engine == Engine::kBpf;
  const std::string where = ctx.path + ": " + m.json_path + ".engine";
  if (m.engine == Engine::kPerf) {
    *why = "\"engine\": \"perf\" in the config";
    return false;
  }
  if (m.type == MetricType::kGauge && m.probe) {
    const std::string perf_only = "a gauge of probe events runs on the perf engine in this release";
    if (forced)
      return InvalidArgument(where + ": \"bpf\" for " + m.name + ": " + perf_only + "; use \"auto\" or \"perf\"");
    *why = perf_only;
    return false;
  }
  if (m.type == MetricType::kProfile) {
    // "auto": perf. A callchain is taken whole with each sample, so its stacks are exact; a
    // stack map loses a stack to a hash collision or a full map (counted, but lost), at a lower
    // cost per hit (no sample, no ring traffic): the user's choice.
    if (!forced) {
      *why = m.stack != ProfileStack::kKernel && m.unwind == UnwindMethod::kDwarf
                 ? "a profile with \"unwind\": \"dwarf\" (the default): user stacks are unwound from the code's "
                   "unwind tables with each sample's registers and stack copy, on the perf engine"
                 : "a profile: perf callchains record every stack exactly (a bpf stack map can lose stacks to hash "
                   "collisions; \"engine\": \"bpf\" takes them there)";
      return false;
    }
    // User stacks on the bpf engine come from the kernel's frame-pointer walk
    // (bpf_get_stackid(BPF_F_USER_STACK)); "dwarf" unwinding is the perf engine's.
    if (m.stack != ProfileStack::kKernel && m.unwind == UnwindMethod::kDwarf) {
      const std::string fp =
          "user stacks on the bpf engine are walked by frame pointers (bpf_get_stackid), which stop at the first "
          "function built without them (most of a distribution's binaries)";
      if (m.unwind_given) {
        return InvalidArgument(where + ": \"bpf\" for " + m.name + ": \"unwind\": \"dwarf\" runs on the perf engine; " +
                               fp + "; use \"auto\" or \"perf\" for dwarf, or \"unwind\": \"frame_pointer\"");
      }
      ctx.plan->warnings.push_back(ctx.path + ": " + m.json_path + ": " + m.name + " on the bpf engine: " + fp +
                                   "; \"engine\": \"auto\" unwinds them with the code's unwind tables (dwarf) on the "
                                   "perf engine; \"unwind\": \"frame_pointer\" silences this");
    }
    if (!m.value.field.empty()) {
      return InvalidArgument(where + ": \"bpf\" for " + m.name +
                             ": a profile that sums a \"value\" field runs on the perf engine in this release; use "
                             "\"perf\" or \"auto\"");
    }
    // The stack map is preallocated whatever its size (stack_map_alloc): bounded like the
    // other maps. An element is a header (struct stack_map_bucket: ~24 bytes) and the frames.
    TPE_ASSIGN_OR_RETURN(const uint32_t frames, ProfileFrames(ctx, m));
    const uint64_t bytes =
        ctx.settings.max_stacks_per_profile * (8ULL * frames + 24) + 8ULL * ctx.settings.max_stacks_per_profile;
    if (bytes > ctx.settings.bpf_preallocate_max_bytes) {
      return InvalidArgument(where + ": \"bpf\" for " + m.name + ": its stack map of " +
                             std::to_string(ctx.settings.max_stacks_per_profile) + " stacks of " +
                             std::to_string(frames) + " frames preallocates " + std::to_string(bytes >> 20) +
                             " MiB, over settings.bpf_preallocate_max_bytes (" +
                             std::to_string(ctx.settings.bpf_preallocate_max_bytes >> 20) +
                             " MiB): lower settings.max_stacks_per_profile or profile_max_frames, or raise it");
    }
  }
  if (!forced && m.type == MetricType::kCounter && m.labels.empty() && m.value.field.empty()) {
    *why = "counting mode: the kernel counts a label-less counter exactly, with no samples and no program";
    return false;
  }
  // Programs skipped while a map syscall of ours is preempted on their CPU (PREEMPT_RT, full
  // preemption), and counted nowhere before Linux 6.7 — unless the map syscalls run at SCHED_FIFO
  // 99, where no task preempts them (bpf/map_syscall_priority.h). Else perf, which accounts every
  // sample.
  const bpf::BpfFeatures& kf = ctx.plan->features.bpf;
  const bool fifo_syscalls = kf.preemptible_syscalls && kf.fifo_map_syscalls;
  if (!kf.tracepoint_misses && kf.preemptible_syscalls && !kf.fifo_map_syscalls) {
    const std::string skips =
        "on " + kf.release +
        " (kernel code preemptible, before Linux 6.7) the kernel skips a bpf program, "
        "uncounted, while one of the exporter's map syscalls is preempted on its CPU, and the exporter " +
        (kf.fifo_map_syscalls_note.empty() ? std::string("does not run them at SCHED_FIFO")
                                           : kf.fifo_map_syscalls_note);
    if (!forced) {
      *why = skips + "; the perf engine accounts every sample";
      return false;
    }
    ctx.plan->warnings.push_back(where + ": \"bpf\" for " + m.name + ": " + skips + ": its counts may fall short");
  }
  const bool one_process = m.pid > 0 || m.end.pid > 0 ||
                           std::any_of(m.starts.begin(), m.starts.end(), [](const auto& e) { return e.pid > 0; });
  if (one_process) {
    const std::string pid =
        "\"pid\" (one process) runs on the perf engine: its perf events are opened for that process";
    if (forced) return InvalidArgument(where + ": \"bpf\" for " + m.name + ": " + pid + "; use \"auto\" or \"perf\"");
    *why = pid;
    return false;
  }
  if (!bpf.available && !running) {
    if (forced) return PermissionDenied(where + ": \"bpf\" for " + m.name + ": " + bpf.reason);
    *why = "the bpf engine is not available: " + bpf.reason;
    return false;
  }
  // Unimplemented: a feature the program generator lacks. Other errors are the config's: the
  // perf planning that follows reports them (in the same words as without the bpf engine).
  auto not_bpf = [&](const Status& st) -> StatusOr<bool> {
    if (st.code() == StatusCode::kUnimplemented && forced) {
      return InvalidArgument(where + ": \"bpf\" cannot run " + m.name + ": " + st.message() +
                             "; use \"auto\" (falls back to the perf engine) or \"perf\"");
    }
    *why = st.code() == StatusCode::kUnimplemented ? "the bpf engine cannot express it: " + st.message() : st.message();
    return false;
  };

  auto base_spec = [&] {
    BpfMetricSpec spec;
    spec.name = m.name;
    spec.help = m.help;
    spec.max_series = ctx.settings.max_series_per_metric;
    spec.preallocate_max_bytes = ctx.settings.bpf_preallocate_max_bytes;
    spec.max_inflight = m.max_inflight;
    spec.timeout_ns = static_cast<uint64_t>(m.timeout_seconds * 1e9);
    spec.scale = m.value.scale;
    switch (m.type) {
      case MetricType::kCounter:
        spec.kind = BpfMetricSpec::Kind::kCounter;
        break;
      case MetricType::kHistogram:
        spec.kind = BpfMetricSpec::Kind::kHistogram;
        break;
      case MetricType::kLatency:
        spec.kind = BpfMetricSpec::Kind::kLatency;
        break;
      case MetricType::kGauge:
        spec.kind = BpfMetricSpec::Kind::kGauge;
        break;
      case MetricType::kProfile:
        spec.kind = BpfMetricSpec::Kind::kProfile;
        break;
    }
    spec.gauge = CollectorGaugeKind(m);
    if (m.type == MetricType::kProfile) {
      spec.kernel_stack = m.stack != ProfileStack::kUser;
      spec.user_stack = m.stack != ProfileStack::kKernel;
      spec.max_series = ctx.settings.max_stacks_per_profile;
      spec.max_stacks = static_cast<uint32_t>(ctx.settings.max_stacks_per_profile);
      // ProfileFrames succeeded above (m is a profile): the frames stack_map_alloc accepts.
      auto frames = ProfileFrames(ctx, m);
      spec.max_frames = frames.ok() ? *frames : 0;
      // A user stack is named with the mappings of its process image (bpf/image_stamps.h);
      // without the stamps, with those of the image that predates the daemon, or the latest.
      if (spec.user_stack) {
        if (auto fd = ImageStampsFd(ctx.tracefs); fd.ok()) {
          spec.image_stamps_fd = *fd;
        } else {
          ctx.plan->warnings.push_back(
              ctx.path + ": " + m.json_path + ": " + m.name +
              ": user frames named with the mappings processes have at render time, not those of "
              "the sample's time: " +
              fd.status().message());
        }
      }
    }
    return spec;
  };
  // One side: its event (format), filter (parsed and compilable), labels and key fields.
  // `labels`: the side's own (an up/down gauge's side); null: the metric's.
  auto side = [&](const std::string& event, const std::string& filter, const std::vector<std::string>& key,
                  const std::string& json_path, std::optional<LabelFrom> from, BpfEndpoint* out,
                  std::unique_ptr<EventPlan>* ep_out, const std::vector<LabelConfig>* labels = nullptr) -> Status {
    TPE_ASSIGN_OR_RETURN(std::unique_ptr<EventPlan> ep, LoadEvent(ctx, event, filter, true, json_path));
    // A probe event is named as the config names it (EventPlan::display): labels stay the same
    // across restarts.
    NameAsConfigured(*ctx.plan, ep.get());
    out->event = ep->display;
    out->tracepoint_id = ep->tracepoint_id;
    if (m.probe) TPE_RETURN_IF_ERROR(ProbeRecordOf(*ctx.plan, *ep, m, filter, key, forced, &out->probe));
    if (!filter.empty()) {
      auto expr = ParseFilter(filter, ep->format);
      if (!expr.ok()) {
        return Unimplemented("filter \"" + Abbreviate(filter) + "\" on " + out->event + ": " + expr.status().message());
      }
      // The kernel's verdict on CPUS{...} (the perf engine gets it from the kernel): refused
      // before Linux 6.6, and for CPUs the machine does not have.
      const auto& k = ctx.plan->features.bpf;
      if (UsesCpus(*expr) && k.major != 0 && (k.major < 6 || (k.major == 6 && k.minor < 6))) {
        return InvalidArgument(ctx.path + ": " + json_path + ".filter \"" + Abbreviate(filter) +
                               "\": CPUS{...} filters need Linux 6.6; this kernel (" + k.release + ") refuses them");
      }
      if (auto cpus = PossibleCpus(); cpus.ok() && !cpus->empty()) {
        TPE_RETURN_IF_ERROR(CheckFilterCpus(*expr, static_cast<uint32_t>(cpus->back() + 1))
                                .WithContext(ctx.path + ": " + json_path + ".filter \"" + Abbreviate(filter) + "\""));
      }
      TPE_RETURN_IF_ERROR(bpf::CheckFilterCompiles(*expr).WithContext("filter on " + out->event));
      out->filter = std::move(*expr);
    }
    TPE_ASSIGN_OR_RETURN(out->labels, BuildLabels(ctx, labels != nullptr ? *labels : m.labels, from, ep.get()));
    for (size_t i = 0; i < key.size(); ++i) {
      TPE_ASSIGN_OR_RETURN(const FieldFormat* f,
                           GetField(ctx, *ep, key[i], json_path + ".key[" + std::to_string(i) + "]"));
      TPE_ASSIGN_OR_RETURN(bpf::FieldRef ref, bpf::IntegerField(*f));
      out->match.push_back(ref);
    }
    *ep_out = std::move(ep);
    return Status::Ok();
  };

  // The events of an endpoint: its event and, for a probe, the same probe's events on replaced
  // binaries that processes still run (Plan::probe_replaced).
  auto variants = [&](const std::string& event) {
    std::vector<std::string> out{event};
    auto it = ctx.plan->probe_replaced.find(event);
    if (it != ctx.plan->probe_replaced.end()) out.insert(out.end(), it->second.begin(), it->second.end());
    return out;
  };
  auto identity_of = [&](const std::string& event) {
    auto it = ctx.plan->probe_identity.find(event);
    return it == ctx.plan->probe_identity.end() ? std::string() : it->second;
  };
  // The parts (bpf_parts.h): one spec per combination of events. A counter or histogram: one per
  // event of its probe. A latency metric whose end has one event: one part, each start's events
  // as starts of it. One whose end has several (a replaced binary): one part per end event, whose
  // starts on the same binaries take that file's event (a process runs one file: its start and
  // end pair within the part) and whose other starts are in every part.
  struct PartPlan {
    std::string key;
    BpfMetricSpec spec;
  };
  std::vector<PartPlan> parts;
  std::unique_ptr<EventPlan> end_ep;
  std::unique_ptr<EventPlan> clock_ep;  // a CPU profile's own clock event (EventPlan::bpf_profile)
  if (m.type == MetricType::kProfile && IsClockEvent(m.event)) {
    // A CPU profile: a BPF_PROG_TYPE_PERF_EVENT program on per-CPU clock events of its own
    // (no tracefs, no format: labels from the current task), each sample weighing the period.
    clock_ep = MakeClockEvent(m);
    clock_ep->display += " (bpf profile " + m.name + ")";
    clock_ep->sampled = false;  // its overflows run the program; no sample, no ring
    PartPlan part;
    part.spec = base_spec();
    part.key = "end:" + m.event;
    part.spec.end.event = clock_ep->display;
    part.spec.end.clock = true;
    part.spec.clock_period_ns = ClockSamplePeriodNs(m.frequency_hz, m.period_ns);
    auto labels = BuildLabels(ctx, m.labels, std::nullopt, clock_ep.get());
    if (!labels.ok()) return not_bpf(labels.status());
    part.spec.end.labels = std::move(*labels);
    parts.push_back(std::move(part));
  } else if (m.type == MetricType::kGauge) {
    // One part (no probe events: refused above). The value field of a side, as a counter's.
    auto value_of = [&](const EventPlan& ep, const ValueConfig& v, const std::string& json_path,
                        std::optional<bpf::FieldRef>* out) -> Status {
      if (v.field.empty()) return Status::Ok();
      TPE_ASSIGN_OR_RETURN(const FieldFormat* f, GetField(ctx, ep, v.field, json_path + ".value.field"));
      if (f->kind != FieldKind::kInteger) return InvalidArgument("value field");  // the perf planning says why
      TPE_ASSIGN_OR_RETURN(*out, bpf::IntegerField(*f));
      return Status::Ok();
    };
    PartPlan part;
    part.spec = base_spec();
    part.key = "gauge";
    std::unique_ptr<EventPlan> ep;
    Status st = Status::Ok();
    if (m.gauge == GaugeKind::kInflight) {
      const EndpointConfig& sc = m.starts.at(0);
      BpfEndpoint s;
      st = side(sc.event, sc.filter, sc.key, sc.json_path, LabelFrom::kStart, &s, &ep);
      part.spec.starts.push_back(std::move(s));
      const std::vector<LabelConfig> none;  // labels come from the start
      if (st.ok()) {
        st = side(m.end.event, m.end.filter, m.end.key, m.end.json_path, LabelFrom::kEnd, &part.spec.end, &end_ep,
                  &none);
      }
      const auto& a = part.spec.starts.front().match;
      const auto& b = part.spec.end.match;
      for (size_t i = 0; st.ok() && i < a.size(); ++i) {
        if (a.size() != b.size() || a[i].size != b[i].size) st = InvalidArgument("key fields differ");
      }
    } else if (m.gauge == GaugeKind::kUpDown) {
      BpfEndpoint up;
      const GaugeSideConfig* sides[] = {&m.up, &m.down};
      BpfEndpoint* outs[] = {&up, &part.spec.end};
      std::unique_ptr<EventPlan> eps[2];
      for (int i = 0; i < 2 && st.ok(); ++i) {
        const GaugeSideConfig& sc = *sides[i];
        st = side(sc.event, sc.filter, {}, sc.json_path, std::nullopt, outs[i], &eps[i],
                  sc.has_labels ? &sc.labels : nullptr);
        if (st.ok()) st = value_of(*eps[i], sc.value, sc.json_path, &outs[i]->value);
        outs[i]->scale = sc.value.scale;
      }
      // As the perf planning checks them (a mismatch is the config's error: reported by it).
      if (st.ok()) st = CheckUpDownLabels(ctx, m, eps[0]->format, eps[1]->format);
      part.spec.starts.push_back(std::move(up));
    } else {
      st = side(m.event, m.filter, {}, m.json_path, std::nullopt, &part.spec.end, &end_ep);
      if (st.ok()) st = value_of(*end_ep, m.value, m.json_path, &part.spec.value);
    }
    if (!st.ok()) return not_bpf(st);
    parts.push_back(std::move(part));
  } else if (m.type == MetricType::kLatency) {
    const std::vector<std::string> ends = variants(m.end.event);
    std::vector<std::string> end_identities;
    for (const auto& e : ends) end_identities.push_back(identity_of(e));
    bool shared = false;
    for (size_t k = 0; k < ends.size(); ++k) {
      PartPlan part;
      part.spec = base_spec();
      std::string starts_key;
      for (const auto& sc : m.starts) {
        const std::vector<std::string> evs = variants(sc.event);
        const bool follows =
            ends.size() > 1 && std::any_of(evs.begin(), evs.end(), [&](const std::string& e) {
              const std::string id = identity_of(e);
              return !id.empty() && std::find(end_identities.begin(), end_identities.end(), id) != end_identities.end();
            });
        shared |= ends.size() > 1 && !follows;
        for (const auto& ev : evs) {
          if (follows && identity_of(ev) != end_identities[k]) continue;
          BpfEndpoint s;
          std::unique_ptr<EventPlan> ep;
          if (Status st = side(ev, sc.filter, sc.key, sc.json_path, LabelFrom::kStart, &s, &ep); !st.ok())
            return not_bpf(st);
          part.spec.starts.push_back(std::move(s));
          starts_key += (starts_key.empty() ? "" : ",") + ev;
        }
      }
      if (part.spec.starts.empty()) continue;  // no start of this file: its processes pair nothing
      if (Status st = side(ends[k], m.end.filter, m.end.key, m.end.json_path, LabelFrom::kEnd, &part.spec.end, &end_ep);
          !st.ok()) {
        return not_bpf(st);
      }
      for (const auto& s : part.spec.starts) {
        for (size_t i = 0; i < s.match.size() && i < part.spec.end.match.size(); ++i) {
          if (s.match.size() != part.spec.end.match.size() || s.match[i].size != part.spec.end.match[i].size) {
            return not_bpf(InvalidArgument("latency key fields differ"));  // the perf planning says how
          }
        }
      }
      part.key = "start:" + starts_key + ";end:" + ends[k];
      parts.push_back(std::move(part));
    }
    if (shared && parts.size() > 1) {
      ctx.plan->warnings.push_back(ctx.path + ": " + m.json_path + ": " + m.name + " on the bpf engine: its end " +
                                   m.end.event + " runs in a replaced binary too, and a start of another event is in " +
                                   "each of its " + std::to_string(parts.size()) +
                                   " parts: pairs whose start and end are in different parts show as unmatched");
    }
  } else {
    for (const std::string& ev : variants(m.event)) {
      PartPlan part;
      part.spec = base_spec();
      part.key = "end:" + ev;
      if (Status st = side(ev, m.filter, {}, m.json_path, std::nullopt, &part.spec.end, &end_ep); !st.ok())
        return not_bpf(st);
      if (m.off_cpu) {
        // The switch's fields, read in the program (programs.h OffCpuShape); the switched-out
        // tasks wait in a map of at most 100,000, as on the perf engine (OffCpuPairing).
        BpfMetricSpec::OffCpu o;
        const std::pair<const char*, bpf::FieldRef*> fields[] = {
            {"prev_pid", &o.prev_pid}, {"next_pid", &o.next_pid}, {"prev_state", &o.prev_state}};
        for (const auto& [field, into] : fields) {
          auto f = GetField(ctx, *end_ep, field, m.json_path + ".type");
          if (!f.ok()) return not_bpf(f.status());
          auto ref = bpf::IntegerField(**f);
          if (!ref.ok()) return not_bpf(ref.status().WithContext(field));
          *into = *ref;
        }
        o.own_tgid = static_cast<uint32_t>(::getpid());
        // The program sees pids of the initial PID namespace (bpf_get_current_pid_tgid): in a
        // namespace of its own getpid() is another number, and the exporter's own switches
        // cannot be told apart. (deploy/ runs it with hostPID.)
        struct stat ns {};
        constexpr ino_t kInitPidNamespaceInode = 0xEFFFFFFCU;  // PROC_PID_INIT_INO
        if (::stat("/proc/self/ns/pid", &ns) == 0 && ns.st_ino != kInitPidNamespaceInode) {
          ctx.plan->warnings.push_back(ctx.path + ": " + m.json_path + ": " + m.name +
                                       " on the bpf engine: the exporter runs in a PID namespace of its own, so its "
                                       "own threads' blocks are in the profile (run it with the host's PID namespace, "
                                       "as deploy/ does, or on \"perf\")");
        }
        o.min_block_ns = static_cast<uint64_t>(m.min_block_seconds * 1e9 + 0.5);
        part.spec.off_cpu = o;
        part.spec.max_inflight = 100000;
      }
      if (!m.value.field.empty()) {
        auto f = GetField(ctx, *end_ep, m.value.field, m.json_path + ".value.field");
        if (!f.ok()) return not_bpf(f.status());
        if (!(*f)->IsNumeric() || (m.type == MetricType::kCounter && (*f)->kind != FieldKind::kInteger)) {
          return not_bpf(InvalidArgument("value field"));  // the perf planning says why
        }
        auto ref = bpf::IntegerField(**f);
        if (!ref.ok()) return not_bpf(ref.status().WithContext("value"));
        part.spec.value = *ref;
      }
      parts.push_back(std::move(part));
    }
  }
  if (parts.empty()) return not_bpf(InvalidArgument("no events"));
  if (m.type == MetricType::kProfile && parts.size() > 1) {
    return not_bpf(
        Unimplemented("a profile of a probe whose binary was replaced while processes still run the old "
                      "file (one program per file)"));
  }
  if (m.type != MetricType::kCounter && m.type != MetricType::kProfile && m.type != MetricType::kGauge) {
    auto b = BuildBuckets(ctx, m.buckets);
    if (!b.ok()) return not_bpf(b.status());
    auto native = BuildNative(ctx, m.buckets, m.type == MetricType::kLatency ? 1e-9 : m.value.scale);
    if (!native.ok()) return not_bpf(native.status());
    for (PartPlan& p : parts) {
      p.spec.buckets = *b;
      p.spec.native = *native;
    }
  }
  // The kernel runs at most BPF_TRACE_MAX_PROGS (64) programs per tracepoint
  // (kernel/trace/bpf_trace.c, perf_event_attach_bpf_prog: E2BIG), other tools' included. One
  // program per endpoint; a metric that would exceed it runs on perf under "auto".
  struct Need {
    int programs = 0;
    uint64_t tracepoint_id = 0;
    std::string event;  // as the config names it
  };
  std::map<std::string, Need> programs;  // tracepoint id -> its programs
  auto need = [&](const BpfEndpoint& e) {
    Need& n = programs[std::to_string(e.tracepoint_id)];
    ++n.programs;
    n.tracepoint_id = e.tracepoint_id;
    n.event = e.event;
  };
  for (const PartPlan& p : parts) {
    for (const auto& s : p.spec.starts) need(s);
    if (!p.spec.end.clock) need(p.spec.end);  // a clock's events are the profile's own
  }
  for (const auto& [id, n] : programs) {
    auto foreign = ctx.plan->foreign_bpf_programs.find(id);
    if (foreign == ctx.plan->foreign_bpf_programs.end()) {
      auto f = bpf::ForeignPrograms(n.tracepoint_id);  // once per tracepoint and plan
      foreign = ctx.plan->foreign_bpf_programs.emplace(id, f.ok() ? *f : 0).first;
    }
    const int ours = ctx.plan->bpf_programs[id];
    if (ours + foreign->second + n.programs <= bpf::kMaxProgramsPerTracepoint) continue;
    std::string full = n.event + " already has " + std::to_string(ours) + " BPF programs from this config";
    if (foreign->second > 0) full += " and " + std::to_string(foreign->second) + " from other tools (bpftrace, BCC)";
    full += ", the kernel's limit is " + std::to_string(bpf::kMaxProgramsPerTracepoint) +
            " per tracepoint (BPF_TRACE_MAX_PROGS)";
    if (forced) return InvalidArgument(where + ": \"bpf\" for " + m.name + ": " + full + "; use \"auto\" or \"perf\"");
    *why = full;
    return false;
  }
  std::vector<BpfPartsMetric::Part> loaded;
  std::unique_ptr<bpf::BpfProfile> profile;
  for (PartPlan& p : parts) {
    // A part the running pipeline has keeps its programs and maps (Pipeline::Reload): nothing to load.
    const bool part_running =
        m.probe && m.type != MetricType::kProfile ? running_bpf.count(m.canonical + "\n" + p.key) > 0 : running;
    Status st = Status::Ok();
    if (m.type == MetricType::kProfile) {
      auto made = part_running ? bpf::BpfProfile::CreateUnloaded(std::move(p.spec))
                               : bpf::BpfProfile::Create(std::move(p.spec));
      if (made.ok()) {
        profile = std::move(*made);
      } else {
        st = made.status();
      }
    } else {
      auto metric =
          part_running ? bpf::BpfMetric::CreateUnloaded(std::move(p.spec)) : bpf::BpfMetric::Create(std::move(p.spec));
      if (metric.ok()) {
        loaded.push_back(BpfPartsMetric::Part{p.key, std::move(*metric)});
      } else {
        st = metric.status();
      }
    }
    if (!st.ok()) {
      if (st.code() == StatusCode::kUnimplemented) return not_bpf(st);  // checked before any map exists
      if (forced) return st.WithContext(where + ": \"bpf\" for " + m.name);
      // E.g. the verifier refused a program: the perf engine runs the metric; the log says why.
      const std::string first_line = st.message().substr(0, st.message().find('\n'));
      ctx.plan->warnings.push_back(ctx.path + ": " + m.json_path + ": " + m.name +
                                   " runs on the perf engine: " + st.message());
      *why = "loading its BPF programs failed: " + first_line;
      return false;
    }
  }
  for (const auto& [id, n] : programs) ctx.plan->bpf_programs[id] += n.programs;
  std::unique_ptr<Collector> collector;
  if (profile) {
    collector = std::move(profile);
    if (clock_ep) {
      clock_ep->bpf_profile = m.canonical;  // attached when opened (Pipeline::OpenFd)
      ctx.plan->events.push_back(std::move(clock_ep));
    }
    // User frames are named through the processes' mappings: learnt from the mmap tracking
    // event's records (EventPlan::mmap_tracker), in time order with the exec, fork and exit records.
    if (m.stack != ProfileStack::kKernel) AddMmapTracker(ctx.plan);
  } else if (m.probe) {
    collector = std::make_unique<BpfPartsMetric>(m.name, std::move(loaded));
  } else {
    collector = std::move(loaded.front().metric);
  }
  MetricPlan& added = ctx.plan->AddMetric(std::move(collector), m.canonical);
  added.engine = Engine::kBpf;
  std::string reason =
      forced ? "\"engine\": \"bpf\" in the config" : "in-kernel aggregation: exact at any event rate, no samples";
  if (fifo_syscalls) {
    reason += "; on " + kf.release +
              " (kernel code preemptible) the exporter's map syscalls run at SCHED_FIFO 99, so no task preempts one "
              "and the kernel skips no program for one";
  }
  added.engine_reason = std::move(reason);
  return true;
}

}  // namespace tpe::plan_internal
