// Planning of the bpf engine (see plan.h "Engines"): the same events, formats, labels and
// buckets as the perf engine's planning, turned into a bpf::BpfMetricSpec.
#include <algorithm>
#include <map>
#include <optional>

#include "bpf/bpf_metric.h"
#include "bpf/filter_compiler.h"
#include "common/utf8.h"
#include "daemon/plan_internal.h"
#include "filter/filter.h"
#include "perf/perf_event.h"

namespace tpe::plan_internal {
namespace {

// For a probe event of `plan` (ProbeRegistry; a plain tracepoint leaves `out` unset), the record
// its KPROBE program materializes (bpf/probe_record.h), from the event's fetch args and format.
// Errors: Unimplemented when the metric reads a __probe_* field (the program does not fill them)
// or a fetch arg the program cannot compute; unless `forced`, Unavailable when it reads a string
// from user memory (a label, the filter): a BPF program cannot fault in a page that is not
// resident, the kernel's fetch for the perf engine does (issue 22 #1: 200 calls whose string lay
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

}  // namespace

StatusOr<bool> PlanBpfMetric(Plan* plan, const Config& cfg, const MetricConfig& m, const Tracefs& tracefs,
                             const KernelEnums& enums, bool check_filters, const bpf::BpfSupport& bpf, bool running,
                             std::string* why) {
  using bpf::BpfEndpoint;
  using bpf::BpfMetricSpec;
  const bool forced = m.engine == "bpf";
  const std::string where = cfg.path + ": " + m.json_path + ".engine";
  if (m.engine == "perf") {
    *why = "\"engine\": \"perf\" in the config";
    return false;
  }
  if (!forced && m.type == "counter" && m.labels.empty() && m.value.field.empty()) {
    *why = "counting mode: the kernel counts a label-less counter exactly, with no samples and no program";
    return false;
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

  BpfMetricSpec spec;
  spec.name = m.name;
  spec.help = m.help;
  spec.max_series = cfg.settings.max_series_per_metric;
  spec.preallocate_max_bytes = cfg.settings.bpf_preallocate_max_bytes;
  spec.max_inflight = m.max_inflight;
  spec.timeout_ns = static_cast<uint64_t>(m.timeout_seconds * 1e9);
  spec.scale = m.value.scale;
  // One side: its event (format), filter (parsed and compilable), labels and key fields.
  auto side = [&](const std::string& event, const std::string& filter, const std::vector<std::string>& key,
                  const std::string& json_path, const std::string& from, BpfEndpoint* out,
                  std::unique_ptr<EventPlan>* ep_out) -> Status {
    TPE_ASSIGN_OR_RETURN(std::unique_ptr<EventPlan> ep,
                         LoadEvent(cfg, event, filter, true, json_path, tracefs, enums, check_filters));
    // A probe event is named as the config names it (EventPlan::display): labels stay the same
    // across restarts.
    NameAsConfigured(*plan, ep.get());
    out->event = ep->display;
    out->tracepoint_id = ep->tracepoint_id;
    if (m.probe) TPE_RETURN_IF_ERROR(ProbeRecordOf(*plan, *ep, m, filter, key, forced, &out->probe));
    if (!filter.empty()) {
      auto expr = ParseFilter(filter, ep->format);
      if (!expr.ok()) {
        return Unimplemented("filter \"" + Abbreviate(filter) + "\" on " + out->event + ": " + expr.status().message());
      }
      // The kernel's verdict on CPUS{...} (the perf engine gets it from the kernel): refused
      // before Linux 6.6, and for CPUs the machine does not have.
      const auto& k = plan->features.bpf;
      if (UsesCpus(*expr) && k.major != 0 && (k.major < 6 || (k.major == 6 && k.minor < 6))) {
        return InvalidArgument(cfg.path + ": " + json_path + ".filter \"" + Abbreviate(filter) +
                               "\": CPUS{...} filters need Linux 6.6; this kernel (" + k.release + ") refuses them");
      }
      if (auto cpus = PossibleCpus(); cpus.ok() && !cpus->empty()) {
        TPE_RETURN_IF_ERROR(CheckFilterCpus(*expr, static_cast<uint32_t>(cpus->back() + 1))
                                .WithContext(cfg.path + ": " + json_path + ".filter \"" + Abbreviate(filter) + "\""));
      }
      TPE_RETURN_IF_ERROR(bpf::CheckFilterCompiles(*expr).WithContext("filter on " + out->event));
      out->filter = std::move(*expr);
    }
    TPE_ASSIGN_OR_RETURN(out->labels, BuildLabels(cfg, m.labels, from, ep.get(), plan));
    for (size_t i = 0; i < key.size(); ++i) {
      TPE_ASSIGN_OR_RETURN(const FieldFormat* f,
                           GetField(cfg, *ep, key[i], json_path + ".key[" + std::to_string(i) + "]"));
      TPE_ASSIGN_OR_RETURN(bpf::FieldRef ref, bpf::IntegerField(*f));
      out->match.push_back(ref);
    }
    *ep_out = std::move(ep);
    return Status::Ok();
  };

  std::unique_ptr<EventPlan> end_ep;
  if (m.type == "latency") {
    spec.kind = BpfMetricSpec::Kind::kLatency;
    for (const auto& sc : m.starts) {
      BpfEndpoint s;
      std::unique_ptr<EventPlan> ep;
      if (Status st = side(sc.event, sc.filter, sc.key, sc.json_path, "start", &s, &ep); !st.ok()) return not_bpf(st);
      spec.starts.push_back(std::move(s));
    }
    if (Status st = side(m.end.event, m.end.filter, m.end.key, m.end.json_path, "end", &spec.end, &end_ep); !st.ok()) {
      return not_bpf(st);
    }
    for (const auto& s : spec.starts) {
      for (size_t i = 0; i < s.match.size() && i < spec.end.match.size(); ++i) {
        if (s.match.size() != spec.end.match.size() || s.match[i].size != spec.end.match[i].size) {
          return not_bpf(InvalidArgument("latency key fields differ"));  // the perf planning says how
        }
      }
    }
  } else {
    spec.kind = m.type == "histogram" ? BpfMetricSpec::Kind::kHistogram : BpfMetricSpec::Kind::kCounter;
    if (Status st = side(m.event, m.filter, {}, m.json_path, "", &spec.end, &end_ep); !st.ok()) return not_bpf(st);
    if (!m.value.field.empty()) {
      auto f = GetField(cfg, *end_ep, m.value.field, m.json_path + ".value.field");
      if (!f.ok()) return not_bpf(f.status());
      if (!(*f)->IsNumeric() || (m.type == "counter" && (*f)->kind != FieldKind::kInteger)) {
        return not_bpf(InvalidArgument("value field"));  // the perf planning says why
      }
      auto ref = bpf::IntegerField(**f);
      if (!ref.ok()) return not_bpf(ref.status().WithContext("value"));
      spec.value = *ref;
    }
  }
  if (m.type != "counter") {
    auto b = BuildBuckets(cfg, m.buckets);
    if (!b.ok()) return not_bpf(b.status());
    spec.buckets = std::move(*b);
  }
  // The kernel runs at most BPF_TRACE_MAX_PROGS (64) programs per tracepoint
  // (kernel/trace/bpf_trace.c, perf_event_attach_bpf_prog: E2BIG), other tools' included. One
  // program per endpoint; a metric that would exceed it runs on perf under "auto".
  std::map<std::string, std::pair<int, uint64_t>> programs;  // event -> (programs, tracepoint id)
  for (const auto& s : spec.starts) programs[s.event] = {programs[s.event].first + 1, s.tracepoint_id};
  programs[spec.end.event] = {programs[spec.end.event].first + 1, spec.end.tracepoint_id};
  for (const auto& [event, need] : programs) {
    auto foreign = plan->foreign_bpf_programs.find(event);
    if (foreign == plan->foreign_bpf_programs.end()) {
      auto n = bpf::ForeignPrograms(need.second);  // once per tracepoint and plan
      foreign = plan->foreign_bpf_programs.emplace(event, n.ok() ? *n : 0).first;
    }
    const int ours = plan->bpf_programs[event];
    if (ours + foreign->second + need.first <= bpf::kMaxProgramsPerTracepoint) continue;
    std::string full = event + " already has " + std::to_string(ours) + " BPF programs from this config";
    if (foreign->second > 0) full += " and " + std::to_string(foreign->second) + " from other tools (bpftrace, BCC)";
    full += ", the kernel's limit is " + std::to_string(bpf::kMaxProgramsPerTracepoint) +
            " per tracepoint (BPF_TRACE_MAX_PROGS)";
    if (forced) return InvalidArgument(where + ": \"bpf\" for " + m.name + ": " + full + "; use \"auto\" or \"perf\"");
    *why = full;
    return false;
  }
  auto metric = running ? bpf::BpfMetric::CreateUnloaded(std::move(spec)) : bpf::BpfMetric::Create(std::move(spec));
  if (!metric.ok()) {
    const Status& st = metric.status();
    if (st.code() == StatusCode::kUnimplemented) return not_bpf(st);  // checked before any map exists
    if (forced) return st.WithContext(where + ": \"bpf\" for " + m.name);
    // E.g. the verifier refused a program: the perf engine runs the metric; the log says why.
    const std::string first_line = st.message().substr(0, st.message().find('\n'));
    plan->warnings.push_back(cfg.path + ": " + m.json_path + ": " + m.name +
                             " runs on the perf engine: " + st.message());
    *why = "loading its BPF programs failed: " + first_line;
    return false;
  }
  for (const auto& [event, need] : programs) plan->bpf_programs[event] += need.first;
  plan->collectors.push_back(std::move(*metric));
  plan->identities.push_back(m.canonical);
  plan->counting_events.push_back(nullptr);
  plan->engines.push_back("bpf");
  plan->engine_reasons.push_back(forced ? "\"engine\": \"bpf\" in the config"
                                        : "in-kernel aggregation: exact at any event rate, no samples");
  return true;
}

}  // namespace tpe::plan_internal
