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
#include "plan/engine_choice.h"
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

// Plans one metric on the bpf engine, step by step (PlanBpfMetric is its one caller): whether the
// metric may run there, its parts (one spec per combination of probe events), their buckets, the
// tracepoints' program budget, loading, and the plan's record of it.
class BpfMetricPlanner {
 public:
  BpfMetricPlanner(const PlanContext& ctx, const MetricConfig& m, const std::set<std::string>& running_bpf,
                   std::string* why)
      : ctx_(ctx),
        m_(m),
        running_bpf_(running_bpf),
        why_(why),
        running_(running_bpf.count(m.canonical) > 0),
        forced_(m.engine == Engine::kBpf),
        where_(ctx.path + ": " + m.json_path + ".engine") {}

  // PlanBpfMetric's answer (plan_internal.h).
  StatusOr<bool> Run(const bpf::BpfSupport& bpf) {
    TPE_ASSIGN_OR_RETURN(const bool eligible, Eligible(bpf));
    if (!eligible) return false;
    Status st = BuildParts();
    if (st.ok()) st = AddBuckets();
    if (!st.ok()) return NotBpf(st);
    TPE_ASSIGN_OR_RETURN(const bool fits, FitsProgramBudget());
    if (!fits) return false;
    TPE_ASSIGN_OR_RETURN(const bool loaded, Load());
    if (!loaded) return false;
    Register();
    return true;
  }

 private:
  using BpfEndpoint = bpf::BpfEndpoint;
  using BpfMetricSpec = bpf::BpfMetricSpec;

  // The parts (bpf_parts.h): one spec per combination of events. A counter or histogram: one per
  // event of its probe. A latency metric whose end has one event: one part, each start's events
  // as starts of it. One whose end has several (a replaced binary): one part per end event, whose
  // starts on the same binaries take that file's event (a process runs one file: its start and
  // end pair within the part) and whose other starts are in every part.
  struct PartPlan {
    std::string key;
    BpfMetricSpec spec;
  };
  // The kernel's program slots a tracepoint needs for this metric (FitsProgramBudget).
  struct Need {
    int programs = 0;
    uint64_t tracepoint_id = 0;
    std::string event;  // as the config names it
  };

  // Whether the config, the metric's kind and the kernel let it run on bpf (ChooseEngine,
  // engine_choice.h): false (and *why_) for the perf engine; an error when "engine": "bpf" asks
  // for what cannot be. Its warnings go to the plan.
  StatusOr<bool> Eligible(const bpf::BpfSupport& bpf) {
    EngineQuestion q;
    q.name = m_.name;
    q.where = where_;
    q.where_metric = ctx_.path + ": " + m_.json_path;
    q.asked = m_.engine;
    q.type = m_.type;
    q.probe = m_.probe;
    q.dwarf_user_stacks =
        m_.type == MetricType::kProfile && m_.stack != ProfileStack::kKernel && m_.unwind == UnwindMethod::kDwarf;
    q.unwind_given = m_.unwind_given;
    q.sums_value = !m_.value.field.empty();
    q.label_less_counter = m_.type == MetricType::kCounter && m_.labels.empty() && m_.value.field.empty();
    q.one_process = m_.pid > 0 || m_.end.pid > 0 ||
                    std::any_of(m_.starts.begin(), m_.starts.end(), [](const auto& e) { return e.pid > 0; });
    if (m_.type == MetricType::kProfile && forced_) {
      // The frames stack_map_alloc is given (BaseSpec reads them again).
      TPE_ASSIGN_OR_RETURN(frames_, ProfileFrames(ctx_, m_));
      q.stack_map_frames = frames_;
      q.stack_map_stacks = ctx_.settings.max_stacks_per_profile;
    }
    q.preallocate_max_bytes = ctx_.settings.bpf_preallocate_max_bytes;
    q.bpf_available = bpf.available;
    q.bpf_reason = bpf.reason;
    q.running_on_bpf = running_;
    // Programs skipped while a map syscall of ours is preempted on their CPU (PREEMPT_RT, full
    // preemption), and counted nowhere before Linux 6.7 — unless the map syscalls run at
    // SCHED_FIFO 99, where no task preempts them (bpf/map_syscall_priority.h).
    const bpf::BpfFeatures& kf = ctx_.plan->features.bpf;
    if (!kf.tracepoint_misses && kf.preemptible_syscalls && !kf.fifo_map_syscalls) {
      q.uncounted_skips = "on " + kf.release +
                          " (kernel code preemptible, before Linux 6.7) the kernel skips a bpf program, "
                          "uncounted, while one of the exporter's map syscalls is preempted on its CPU, and the "
                          "exporter " +
                          (kf.fifo_map_syscalls_note.empty() ? std::string("does not run them at SCHED_FIFO")
                                                             : kf.fifo_map_syscalls_note);
    }
    EngineAnswer a = ChooseEngine(q);
    for (std::string& w : a.warnings) ctx_.plan->warnings.push_back(std::move(w));
    if (!a.refusal.ok()) return a.refusal;
    if (!a.bpf) *why_ = std::move(a.why_not);
    return a.bpf;
  }

  // Unimplemented: a feature the program generator lacks. Other errors are the config's: the
  // perf planning that follows reports them (in the same words as without the bpf engine).
  StatusOr<bool> NotBpf(const Status& st) {
    if (st.code() == StatusCode::kUnimplemented && forced_) {
      return InvalidArgument(where_ + ": \"bpf\" cannot run " + m_.name + ": " + st.message() +
                             "; use \"auto\" (falls back to the perf engine) or \"perf\"");
    }
    *why_ =
        st.code() == StatusCode::kUnimplemented ? "the bpf engine cannot express it: " + st.message() : st.message();
    return false;
  }

  // The spec every part starts from: the metric's name, limits and kind (a profile's stacks).
  BpfMetricSpec BaseSpec() {
    BpfMetricSpec spec;
    spec.name = m_.name;
    spec.help = m_.help;
    spec.max_series = ctx_.settings.max_series_per_metric;
    spec.preallocate_max_bytes = ctx_.settings.bpf_preallocate_max_bytes;
    spec.max_inflight = m_.max_inflight;
    spec.timeout_ns = static_cast<uint64_t>(m_.timeout_seconds * 1e9);
    spec.scale = m_.value.scale;
    switch (m_.type) {
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
    spec.gauge = CollectorGaugeKind(m_);
    if (m_.type == MetricType::kProfile) {
      spec.kernel_stack = m_.stack != ProfileStack::kUser;
      spec.user_stack = m_.stack != ProfileStack::kKernel;
      spec.max_series = ctx_.settings.max_stacks_per_profile;
      spec.max_stacks = static_cast<uint32_t>(ctx_.settings.max_stacks_per_profile);
      spec.max_frames = frames_;  // from Eligible: the frames stack_map_alloc accepts
      // A user stack is named with the mappings of its process image (bpf/image_stamps.h);
      // without the stamps, with those of the image that predates the daemon, or the latest.
      if (spec.user_stack) {
        if (auto fd = ImageStampsFd(ctx_.tracefs); fd.ok()) {
          spec.image_stamps_fd = *fd;
        } else {
          ctx_.plan->warnings.push_back(
              ctx_.path + ": " + m_.json_path + ": " + m_.name +
              ": user frames named with the mappings processes have at render time, not those of "
              "the sample's time: " +
              fd.status().message());
        }
      }
    }
    return spec;
  }

  // One side: its event (format), filter (parsed and compilable), labels and key fields.
  // `labels`: the side's own (an up/down gauge's side); null: the metric's.
  Status Side(const std::string& event, const std::string& filter, const std::vector<std::string>& key,
              const std::string& json_path, std::optional<LabelFrom> from, BpfEndpoint* out,
              std::unique_ptr<EventPlan>* ep_out, const std::vector<LabelConfig>* labels = nullptr) {
    TPE_ASSIGN_OR_RETURN(std::unique_ptr<EventPlan> ep, LoadEvent(ctx_, event, filter, true, json_path));
    // A probe event is named as the config names it (EventPlan::display): labels stay the same
    // across restarts.
    NameAsConfigured(*ctx_.plan, ep.get());
    out->event = ep->display;
    out->tracepoint_id = ep->tracepoint_id;
    if (m_.probe) TPE_RETURN_IF_ERROR(ProbeRecordOf(*ctx_.plan, *ep, m_, filter, key, forced_, &out->probe));
    if (!filter.empty()) {
      auto expr = ParseFilter(filter, ep->format);
      if (!expr.ok()) {
        return Unimplemented("filter \"" + Abbreviate(filter) + "\" on " + out->event + ": " + expr.status().message());
      }
      // The kernel's verdict on CPUS{...} (the perf engine gets it from the kernel): refused
      // before Linux 6.6, and for CPUs the machine does not have.
      const auto& k = ctx_.plan->features.bpf;
      if (UsesCpus(*expr) && k.major != 0 && (k.major < 6 || (k.major == 6 && k.minor < 6))) {
        return InvalidArgument(ctx_.path + ": " + json_path + ".filter \"" + Abbreviate(filter) +
                               "\": CPUS{...} filters need Linux 6.6; this kernel (" + k.release + ") refuses them");
      }
      if (auto cpus = PossibleCpus(); cpus.ok() && !cpus->empty()) {
        TPE_RETURN_IF_ERROR(CheckFilterCpus(*expr, static_cast<uint32_t>(cpus->back() + 1))
                                .WithContext(ctx_.path + ": " + json_path + ".filter \"" + Abbreviate(filter) + "\""));
      }
      TPE_RETURN_IF_ERROR(bpf::CheckFilterCompiles(*expr).WithContext("filter on " + out->event));
      out->filter = std::move(*expr);
    }
    TPE_ASSIGN_OR_RETURN(out->labels, BuildLabels(ctx_, labels != nullptr ? *labels : m_.labels, from, ep.get()));
    for (size_t i = 0; i < key.size(); ++i) {
      TPE_ASSIGN_OR_RETURN(const FieldFormat* f,
                           GetField(ctx_, *ep, key[i], json_path + ".key[" + std::to_string(i) + "]"));
      TPE_ASSIGN_OR_RETURN(bpf::FieldRef ref, bpf::IntegerField(*f));
      out->match.push_back(ref);
    }
    *ep_out = std::move(ep);
    return Status::Ok();
  }

  // The events of an endpoint: its event and, for a probe, the same probe's events on replaced
  // binaries that processes still run (Plan::probe_replaced).
  std::vector<std::string> Variants(const std::string& event) const {
    std::vector<std::string> out{event};
    auto it = ctx_.plan->probe_replaced.find(event);
    if (it != ctx_.plan->probe_replaced.end()) out.insert(out.end(), it->second.begin(), it->second.end());
    return out;
  }
  std::string IdentityOf(const std::string& event) const {
    auto it = ctx_.plan->probe_identity.find(event);
    return it == ctx_.plan->probe_identity.end() ? std::string() : it->second;
  }

  // The parts, by the metric's kind; an error is why the bpf engine cannot run it (NotBpf).
  Status BuildParts() {
    if (m_.type == MetricType::kProfile && IsClockEvent(m_.event)) return ClockProfilePart();
    if (m_.type == MetricType::kGauge) return GaugePart();
    if (m_.type == MetricType::kLatency) return LatencyParts();
    return EventParts();
  }

  // A CPU profile: one part on its own clock events.
  Status ClockProfilePart() {
    // A CPU profile: a BPF_PROG_TYPE_PERF_EVENT program on per-CPU clock events of its own
    // (no tracefs, no format: labels from the current task), each sample weighing the period.
    clock_ep_ = MakeClockEvent(m_);
    clock_ep_->display += " (bpf profile " + m_.name + ")";
    clock_ep_->sampled = false;  // its overflows run the program; no sample, no ring
    PartPlan part;
    part.spec = BaseSpec();
    part.key = "end:" + m_.event;
    part.spec.end.event = clock_ep_->display;
    part.spec.end.clock = true;
    part.spec.clock_period_ns = ClockSamplePeriodNs(m_.frequency_hz, m_.period_ns);
    auto labels = BuildLabels(ctx_, m_.labels, std::nullopt, clock_ep_.get());
    if (!labels.ok()) return labels.status();
    part.spec.end.labels = std::move(*labels);
    parts_.push_back(std::move(part));
    return Status::Ok();
  }

  // A gauge: one part (no probe events: refused by Eligible).
  Status GaugePart() {
    // One part (no probe events: refused above). The value field of a side, as a counter's.
    auto value_of = [&](const EventPlan& ep, const ValueConfig& v, const std::string& json_path,
                        std::optional<bpf::FieldRef>* out) -> Status {
      if (v.field.empty()) return Status::Ok();
      TPE_ASSIGN_OR_RETURN(const FieldFormat* f, GetField(ctx_, ep, v.field, json_path + ".value.field"));
      if (f->kind != FieldKind::kInteger) return InvalidArgument("value field");  // the perf planning says why
      TPE_ASSIGN_OR_RETURN(*out, bpf::IntegerField(*f));
      return Status::Ok();
    };
    PartPlan part;
    part.spec = BaseSpec();
    part.key = "gauge";
    std::unique_ptr<EventPlan> ep;
    Status st = Status::Ok();
    if (m_.gauge == GaugeKind::kInflight) {
      const EndpointConfig& sc = m_.starts.at(0);
      BpfEndpoint s;
      st = Side(sc.event, sc.filter, sc.key, sc.json_path, LabelFrom::kStart, &s, &ep);
      part.spec.starts.push_back(std::move(s));
      const std::vector<LabelConfig> none;  // labels come from the start
      if (st.ok()) {
        st = Side(m_.end.event, m_.end.filter, m_.end.key, m_.end.json_path, LabelFrom::kEnd, &part.spec.end, &end_ep_,
                  &none);
      }
      const auto& a = part.spec.starts.front().match;
      const auto& b = part.spec.end.match;
      for (size_t i = 0; st.ok() && i < a.size(); ++i) {
        if (a.size() != b.size() || a[i].size != b[i].size) st = InvalidArgument("key fields differ");
      }
    } else if (m_.gauge == GaugeKind::kUpDown) {
      BpfEndpoint up;
      const GaugeSideConfig* sides[] = {&m_.up, &m_.down};
      BpfEndpoint* outs[] = {&up, &part.spec.end};
      std::unique_ptr<EventPlan> eps[2];
      for (int i = 0; i < 2 && st.ok(); ++i) {
        const GaugeSideConfig& sc = *sides[i];
        st = Side(sc.event, sc.filter, {}, sc.json_path, std::nullopt, outs[i], &eps[i],
                  sc.has_labels ? &sc.labels : nullptr);
        if (st.ok()) st = value_of(*eps[i], sc.value, sc.json_path, &outs[i]->value);
        outs[i]->scale = sc.value.scale;
      }
      // As the perf planning checks them (a mismatch is the config's error: reported by it).
      if (st.ok()) st = CheckUpDownLabels(ctx_, m_, eps[0]->format, eps[1]->format);
      part.spec.starts.push_back(std::move(up));
    } else {
      st = Side(m_.event, m_.filter, {}, m_.json_path, std::nullopt, &part.spec.end, &end_ep_);
      if (st.ok()) st = value_of(*end_ep_, m_.value, m_.json_path, &part.spec.value);
    }
    TPE_RETURN_IF_ERROR(st);
    parts_.push_back(std::move(part));
    return Status::Ok();
  }

  // A latency metric: one part per end event (see PartPlan).
  Status LatencyParts() {
    const std::vector<std::string> ends = Variants(m_.end.event);
    std::vector<std::string> end_identities;
    for (const auto& e : ends) end_identities.push_back(IdentityOf(e));
    bool shared = false;
    for (size_t k = 0; k < ends.size(); ++k) {
      PartPlan part;
      part.spec = BaseSpec();
      std::string starts_key;
      for (const auto& sc : m_.starts) {
        const std::vector<std::string> evs = Variants(sc.event);
        const bool follows =
            ends.size() > 1 && std::any_of(evs.begin(), evs.end(), [&](const std::string& e) {
              const std::string id = IdentityOf(e);
              return !id.empty() && std::find(end_identities.begin(), end_identities.end(), id) != end_identities.end();
            });
        shared |= ends.size() > 1 && !follows;
        for (const auto& ev : evs) {
          if (follows && IdentityOf(ev) != end_identities[k]) continue;
          BpfEndpoint s;
          std::unique_ptr<EventPlan> ep;
          if (Status st = Side(ev, sc.filter, sc.key, sc.json_path, LabelFrom::kStart, &s, &ep); !st.ok()) return st;
          part.spec.starts.push_back(std::move(s));
          starts_key += (starts_key.empty() ? "" : ",") + ev;
        }
      }
      if (part.spec.starts.empty()) continue;  // no start of this file: its processes pair nothing
      if (Status st =
              Side(ends[k], m_.end.filter, m_.end.key, m_.end.json_path, LabelFrom::kEnd, &part.spec.end, &end_ep_);
          !st.ok()) {
        return st;
      }
      for (const auto& s : part.spec.starts) {
        for (size_t i = 0; i < s.match.size() && i < part.spec.end.match.size(); ++i) {
          if (s.match.size() != part.spec.end.match.size() || s.match[i].size != part.spec.end.match[i].size) {
            return InvalidArgument("latency key fields differ");  // the perf planning says how
          }
        }
      }
      part.key = "start:" + starts_key + ";end:" + ends[k];
      parts_.push_back(std::move(part));
    }
    if (shared && parts_.size() > 1) {
      ctx_.plan->warnings.push_back(
          ctx_.path + ": " + m_.json_path + ": " + m_.name + " on the bpf engine: its end " + m_.end.event +
          " runs in a replaced binary too, and a start of another event is in " + "each of its " +
          std::to_string(parts_.size()) + " parts: pairs whose start and end are in different parts show as unmatched");
    }
    return Status::Ok();
  }

  // A counter, histogram or tracepoint profile: one part per event of its probe.
  Status EventParts() {
    for (const std::string& ev : Variants(m_.event)) {
      PartPlan part;
      part.spec = BaseSpec();
      part.key = "end:" + ev;
      if (Status st = Side(ev, m_.filter, {}, m_.json_path, std::nullopt, &part.spec.end, &end_ep_); !st.ok())
        return st;
      if (m_.off_cpu) {
        // The switch's fields, read in the program (programs.h OffCpuShape); the switched-out
        // tasks wait in a map of at most 100,000, as on the perf engine (OffCpuPairing).
        BpfMetricSpec::OffCpu o;
        const std::pair<const char*, bpf::FieldRef*> fields[] = {
            {"prev_pid", &o.prev_pid}, {"next_pid", &o.next_pid}, {"prev_state", &o.prev_state}};
        for (const auto& [field, into] : fields) {
          auto f = GetField(ctx_, *end_ep_, field, m_.json_path + ".type");
          if (!f.ok()) return f.status();
          auto ref = bpf::IntegerField(**f);
          if (!ref.ok()) return ref.status().WithContext(field);
          *into = *ref;
        }
        o.own_tgid = static_cast<uint32_t>(::getpid());
        // The program sees pids of the initial PID namespace (bpf_get_current_pid_tgid): in a
        // namespace of its own getpid() is another number, and the exporter's own switches
        // cannot be told apart. (deploy/ runs it with hostPID.)
        struct stat ns {};
        constexpr ino_t kInitPidNamespaceInode = 0xEFFFFFFCU;  // PROC_PID_INIT_INO
        if (::stat("/proc/self/ns/pid", &ns) == 0 && ns.st_ino != kInitPidNamespaceInode) {
          ctx_.plan->warnings.push_back(ctx_.path + ": " + m_.json_path + ": " + m_.name +
                                        " on the bpf engine: the exporter runs in a PID namespace of its own, so its "
                                        "own threads' blocks are in the profile (run it with the host's PID namespace, "
                                        "as deploy/ does, or on \"perf\")");
        }
        o.min_block_ns = static_cast<uint64_t>(m_.min_block_seconds * 1e9 + 0.5);
        part.spec.off_cpu = o;
        part.spec.max_inflight = 100000;
      }
      if (!m_.value.field.empty()) {
        auto f = GetField(ctx_, *end_ep_, m_.value.field, m_.json_path + ".value.field");
        if (!f.ok()) return f.status();
        if (!(*f)->IsNumeric() || (m_.type == MetricType::kCounter && (*f)->kind != FieldKind::kInteger)) {
          return InvalidArgument("value field");  // the perf planning says why
        }
        auto ref = bpf::IntegerField(**f);
        if (!ref.ok()) return ref.status().WithContext("value");
        part.spec.value = *ref;
      }
      parts_.push_back(std::move(part));
    }
    return Status::Ok();
  }

  // What every part needs beside its events: none empty, a profile of one file, the buckets.
  Status AddBuckets() {
    if (parts_.empty()) return InvalidArgument("no events");
    if (m_.type == MetricType::kProfile && parts_.size() > 1) {
      return Unimplemented(
          "a profile of a probe whose binary was replaced while processes still run the old file (one program per "
          "file)");
    }
    if (m_.type != MetricType::kCounter && m_.type != MetricType::kProfile && m_.type != MetricType::kGauge) {
      auto b = BuildBuckets(ctx_, m_.buckets);
      if (!b.ok()) return b.status();
      auto native = BuildNative(ctx_, m_.buckets, m_.type == MetricType::kLatency ? 1e-9 : m_.value.scale);
      if (!native.ok()) return native.status();
      for (PartPlan& p : parts_) {
        p.spec.buckets = *b;
        p.spec.native = *native;
      }
    }
    return Status::Ok();
  }

  // Whether the tracepoints have program slots for the metric: false (and *why_) for the perf
  // engine, an error under "engine": "bpf".
  StatusOr<bool> FitsProgramBudget() {
    // The kernel runs at most BPF_TRACE_MAX_PROGS (64) programs per tracepoint
    // (kernel/trace/bpf_trace.c, perf_event_attach_bpf_prog: E2BIG), other tools' included. One
    // program per endpoint; a metric that would exceed it runs on perf under "auto".
    auto need = [&](const BpfEndpoint& e) {
      Need& n = programs_[std::to_string(e.tracepoint_id)];
      ++n.programs;
      n.tracepoint_id = e.tracepoint_id;
      n.event = e.event;
    };
    for (const PartPlan& p : parts_) {
      for (const auto& s : p.spec.starts) need(s);
      if (!p.spec.end.clock) need(p.spec.end);  // a clock's events are the profile's own
    }
    for (const auto& [id, n] : programs_) {
      auto foreign = ctx_.plan->foreign_bpf_programs.find(id);
      if (foreign == ctx_.plan->foreign_bpf_programs.end()) {
        auto f = bpf::ForeignPrograms(n.tracepoint_id);  // once per tracepoint and plan
        foreign = ctx_.plan->foreign_bpf_programs.emplace(id, f.ok() ? *f : 0).first;
      }
      const int ours = ctx_.plan->bpf_programs[id];
      if (ours + foreign->second + n.programs <= bpf::kMaxProgramsPerTracepoint) continue;
      std::string full = n.event + " already has " + std::to_string(ours) + " BPF programs from this config";
      if (foreign->second > 0) full += " and " + std::to_string(foreign->second) + " from other tools (bpftrace, BCC)";
      full += ", the kernel's limit is " + std::to_string(bpf::kMaxProgramsPerTracepoint) +
              " per tracepoint (BPF_TRACE_MAX_PROGS)";
      if (forced_)
        return InvalidArgument(where_ + ": \"bpf\" for " + m_.name + ": " + full + "; use \"auto\" or \"perf\"");
      *why_ = full;
      return false;
    }
    return true;
  }

  // Creates each part's maps and programs (a running part: its maps only). False (and *why_)
  // when the kernel refused them under "auto".
  StatusOr<bool> Load() {
    for (PartPlan& p : parts_) {
      // A part the running pipeline has keeps its programs and maps (Pipeline::Reload): nothing to load.
      const bool part_running =
          m_.probe && m_.type != MetricType::kProfile ? running_bpf_.count(m_.canonical + "\n" + p.key) > 0 : running_;
      Status st = Status::Ok();
      if (m_.type == MetricType::kProfile) {
        auto made = part_running ? bpf::BpfProfile::CreateUnloaded(std::move(p.spec))
                                 : bpf::BpfProfile::Create(std::move(p.spec));
        if (made.ok()) {
          profile_ = std::move(*made);
        } else {
          st = made.status();
        }
      } else {
        auto metric = part_running ? bpf::BpfMetric::CreateUnloaded(std::move(p.spec))
                                   : bpf::BpfMetric::Create(std::move(p.spec));
        if (metric.ok()) {
          loaded_.push_back(BpfPartsMetric::Part{p.key, std::move(*metric)});
        } else {
          st = metric.status();
        }
      }
      if (!st.ok()) {
        if (st.code() == StatusCode::kUnimplemented) return NotBpf(st);  // checked before any map exists
        if (forced_) return st.WithContext(where_ + ": \"bpf\" for " + m_.name);
        // E.g. the verifier refused a program: the perf engine runs the metric; the log says why.
        const std::string first_line = st.message().substr(0, st.message().find('\n'));
        ctx_.plan->warnings.push_back(ctx_.path + ": " + m_.json_path + ": " + m_.name +
                                      " runs on the perf engine: " + st.message());
        *why_ = "loading its BPF programs failed: " + first_line;
        return false;
      }
    }
    return true;
  }

  // The plan's record: the metric's collector, its clock event and mmap tracker, its programs.
  void Register() {
    const bpf::BpfFeatures& kf = ctx_.plan->features.bpf;
    const bool fifo_syscalls = kf.preemptible_syscalls && kf.fifo_map_syscalls;
    for (const auto& [id, n] : programs_) ctx_.plan->bpf_programs[id] += n.programs;
    std::unique_ptr<Collector> collector;
    if (profile_) {
      collector = std::move(profile_);
      if (clock_ep_) {
        clock_ep_->bpf_profile = m_.canonical;  // attached when opened (Pipeline::OpenFd)
        ctx_.plan->events.push_back(std::move(clock_ep_));
      }
      // User frames are named through the processes' mappings: learnt from the mmap tracking
      // event's records (EventPlan::mmap_tracker), in time order with the exec, fork and exit records.
      if (m_.stack != ProfileStack::kKernel) AddMmapTracker(ctx_.plan);
    } else if (m_.probe) {
      collector = std::make_unique<BpfPartsMetric>(m_.name, std::move(loaded_));
    } else {
      collector = std::move(loaded_.front().metric);
    }
    MetricPlan& added = ctx_.plan->AddMetric(std::move(collector), m_.canonical);
    added.engine = Engine::kBpf;
    std::string reason =
        forced_ ? "\"engine\": \"bpf\" in the config" : "in-kernel aggregation: exact at any event rate, no samples";
    if (fifo_syscalls) {
      reason += "; on " + kf.release +
                " (kernel code preemptible) the exporter's map syscalls run at SCHED_FIFO 99, so no task preempts one "
                "and the kernel skips no program for one";
    }
    added.engine_reason = std::move(reason);
  }

  const PlanContext& ctx_;
  const MetricConfig& m_;
  const std::set<std::string>& running_bpf_;
  std::string* why_;
  const bool running_;  // the running pipeline has the metric: the reload keeps its programs
  const bool forced_;   // "engine": "bpf"
  const std::string where_;
  std::vector<PartPlan> parts_;
  std::unique_ptr<EventPlan> end_ep_;
  std::unique_ptr<EventPlan> clock_ep_;   // a CPU profile's own clock event (EventPlan::bpf_profile)
  std::map<std::string, Need> programs_;  // tracepoint id -> its programs
  std::vector<BpfPartsMetric::Part> loaded_;
  std::unique_ptr<bpf::BpfProfile> profile_;
  uint32_t frames_ = 0;  // a profile's frames per stack (ProfileFrames, once)
};

}  // namespace

StatusOr<bool> PlanBpfMetric(const PlanContext& ctx, const MetricConfig& m, const bpf::BpfSupport& bpf,
                             const std::set<std::string>& running_bpf, std::string* why) {
  return BpfMetricPlanner(ctx, m, running_bpf, why).Run(bpf);
}

}  // namespace tpe::plan_internal
