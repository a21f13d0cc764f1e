#include "plan/plan.h"

#include <unistd.h>

#include <algorithm>

#include "collectors/counter.h"
#include "collectors/gauge.h"
#include "collectors/histogram.h"
#include "collectors/latency.h"
#include "collectors/profile.h"
#include "common/file_util.h"
#include "decode/field_extractor.h"
#include "plan/plan_internal.h"

namespace tpe {

using namespace plan_internal;  // NOLINT(build/namespaces): this file defines them

uint64_t KernelCount(const std::vector<EventPlan*>& events, uint64_t carried) {
  uint64_t n = carried;
  for (const EventPlan* ep : events) n += ep->ReadKernelCounts().count;
  return n;
}

EventCount EventPlan::ReadCounts() const {
  EventCount total = ReadKernelCounts();
  total.count += base.count;
  total.lost += base.lost;
  return total;
}

EventCount EventPlan::ReadKernelCounts() const {
  EventCount total = retired;
  auto add = [&](const ScopedFd& fd) {
    if (!fd.valid()) return;
    auto c = ReadEventCount(fd.get());
    if (c.ok()) {
      total.count += c->count;
      total.lost += c->lost;
      total.lost_known &= c->lost_known;
    }
  };
  for (const auto& fd : fds) add(fd);
  for (const auto& slot : task_fds) {
    for (const auto& t : slot) add(t.fd);
  }
  return total;
}

size_t EventPlan::OpenFdCount() const {
  size_t n = 0;
  for (const auto& fd : fds) n += fd.valid();
  for (const auto& slot : task_fds) {
    for (const auto& t : slot) n += t.fd.valid();
  }
  return n;
}

void EventPlan::CollectIds() {
  ids.resize(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!fds[i].valid()) ids[i] = 0;
  }
  for (const auto& slot : task_fds) {
    for (const auto& t : slot) {
      if (t.fd.valid()) ids.push_back(t.id);
    }
  }
}

namespace {

std::string Quote(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

namespace plan_internal {

GaugeCollector::Kind CollectorGaugeKind(const MetricConfig& m) {
  using Kind = GaugeCollector::Kind;
  switch (m.gauge) {
    case GaugeKind::kInflight:
      return Kind::kInflight;
    case GaugeKind::kUpDown:
      return Kind::kUpDown;
    case GaugeKind::kMax:
      return Kind::kMax;
    case GaugeKind::kMin:
      return Kind::kMin;
    case GaugeKind::kLast:
    case GaugeKind::kNone:  // not a gauge: read only for gauges
      break;
  }
  return Kind::kLast;
}

Status CheckUpDownLabels(const PlanContext& ctx, const MetricConfig& m, const EventFormat& up_format,
                         const EventFormat& down_format) {
  const std::vector<LabelConfig>& up = m.up.has_labels ? m.up.labels : m.labels;
  const std::vector<LabelConfig>& down = m.down.has_labels ? m.down.labels : m.labels;
  const std::string where = ctx.path + ": " + m.down.json_path + ".labels";
  if (up.size() != down.size()) {
    return InvalidArgument(where + ": " + std::to_string(down.size()) + " labels, but up has " +
                           std::to_string(up.size()) + "; both sides must have the same labels");
  }
  for (size_t i = 0; i < up.size(); ++i) {
    const FieldFormat* a = up[i].field.empty() ? nullptr : up_format.FindField(up[i].field);
    const FieldFormat* b = down[i].field.empty() ? nullptr : down_format.FindField(down[i].field);
    const bool same_field =
        (a == nullptr) == (b == nullptr) &&
        (a == nullptr || (a->size == b->size && a->is_signed == b->is_signed && a->kind == b->kind));
    if (up[i].name != down[i].name || up[i].source != down[i].source || up[i].decode != down[i].decode || !same_field) {
      return InvalidArgument(where + "[" + std::to_string(i) + "]: \"" + down[i].name + "\" must match up's label " +
                             std::to_string(i) + " (\"" + up[i].name +
                             "\"): the same name, source and decode, from fields of one type");
    }
  }
  return Status::Ok();
}

// The event's id, format and symbol tables (and with `check_filters` the filter checked in a
// private tracefs instance), as an EventPlan not yet in any plan.
StatusOr<std::unique_ptr<EventPlan>> LoadEvent(const PlanContext& ctx, const std::string& event,
                                               const std::string& filter, bool sampled, const std::string& json_path) {
  const std::string where = ctx.path + ": " + json_path + ".event";
  TPE_ASSIGN_OR_RETURN(EventName name, ParseEventName(event));
  if (!ctx.tracefs.HasEvent(name)) {
    return NotFound(where + ": no tracepoint \"" + event + "\" in " + ctx.tracefs.root() + "/events; closest: " +
                    Quote(ctx.tracefs.ClosestEvents(event, 3)) + " (list them with --list-events)");
  }
  auto ep = std::make_unique<EventPlan>();
  ep->event = name;
  ep->display = name.ToString();
  ep->filter = filter;
  ep->sampled = sampled;
  auto id = ctx.tracefs.ReadId(name);
  if (!id.ok()) return id.status().WithContext(where);
  ep->tracepoint_id = *id;
  auto text = ctx.tracefs.ReadFormat(name);
  if (!text.ok()) return text.status().WithContext(where);
  std::string src = ctx.tracefs.root() + "/events/" + name.system + "/" + name.name + "/format";
  auto fmt = ParseFormat(*text, src);
  if (!fmt.ok()) return fmt.status();
  ep->format = std::move(*fmt);
  auto syms = ParsePrintSymbols(
      *text, name.system, [&](std::string_view n) { return ctx.enums.Lookup(n); }, src);
  if (syms.ok()) ep->symbols = std::move(*syms);  // without tables only "symbolic" labels fail
  if (ctx.check_filters && !filter.empty()) {
    Status st = ctx.tracefs.CheckFilter(name, filter);
    if (!st.ok()) return st.WithContext(ctx.path + ": " + json_path + ".filter");
  }
  return ep;
}

}  // namespace plan_internal

namespace {

// Whether two probe events' records have the same layout (fields, offsets, sizes, signs): the
// collectors of a probe decode the records of its events on replaced binaries with the current
// event's extractors.
bool SameLayout(const EventFormat& a, const EventFormat& b) {
  if (a.fields.size() != b.fields.size()) return false;
  for (size_t i = 0; i < a.fields.size(); ++i) {
    const FieldFormat& x = a.fields[i];
    const FieldFormat& y = b.fields[i];
    if (x.name != y.name || x.type != y.type || x.offset != y.offset || x.size != y.size ||
        x.is_signed != y.is_signed) {
      return false;
    }
  }
  return true;
}

StatusOr<EventFormat> ReadProbeFormat(const Tracefs& tracefs, const EventName& name) {
  TPE_ASSIGN_OR_RETURN(std::string text, tracefs.ReadFormat(name));
  return ParseFormat(text, tracefs.root() + "/events/" + name.system + "/" + name.name + "/format");
}

// Creates (or shares) the probe event of `event` with `args` and names it in `event`; the events
// of the same probe on binaries replaced since that processes still run are recorded in
// plan->probe_replaced. `maxactive`: the config's (kretprobes; 0 = kDefaultMaxactive).
Status ResolveProbeEvent(const PlanContext& ctx, const std::string& json_path,
                         const std::vector<std::pair<std::string, std::string>>& args, uint32_t maxactive,
                         std::string* event) {
  if (!IsProbeEvent(*event)) return Status::Ok();
  const std::string where = ctx.path + ": " + json_path + ".event";
  auto ref = ParseProbeRef(*event);
  if (!ref.ok()) return ref.status().WithContext(where);
  std::vector<ProbeArg> parsed;
  for (const auto& [field, spec] : args) {
    auto a = ParseProbeArg(*ref, field, spec);
    if (!a.ok()) return a.status().WithContext(ctx.path + ": " + json_path);
    parsed.push_back(*a);
  }
  // The file's identity before its ELF is read: Acquire checks the event went on that file.
  const std::string identity = ref->path.empty() ? "" : FileIdentity(ref->path);
  auto spec = ResolveProbe(*ref, parsed);
  if (!spec.ok()) return spec.status().WithContext(where);
  if (spec->kind == ProbeKind::kKretprobe) spec->maxactive = maxactive != 0 ? maxactive : kDefaultMaxactive;
  // The probe as the config names it: the same key on a replaced binary is the same probe.
  std::string key = *event;
  for (const auto& [field, a] : args) key += "\n" + field + "=" + a;
  key += "\nmaxactive=" + std::to_string(spec->maxactive);
  auto variants = ProbeRegistry::Get(ctx.tracefs).Acquire(key, *spec, *ref, identity);
  if (!variants.ok()) return variants.status().WithContext(where + " \"" + *event + "\"");
  const std::string current = variants->current->event().ToString();
  ctx.plan->probe_names[current] = *event;
  ctx.plan->probe_identity[current] = variants->current->file_identity();
  ctx.plan->probes.push_back(variants->current);
  if (!variants->replaced.empty() && ctx.plan->probe_replaced.count(current) == 0) {
    auto format = ReadProbeFormat(ctx.tracefs, variants->current->event());
    if (!format.ok()) return format.status().WithContext(where);
    std::vector<std::string>& replaced = ctx.plan->probe_replaced[current];
    for (const auto& old : variants->replaced) {
      auto old_format = ReadProbeFormat(ctx.tracefs, old->event());
      if (!old_format.ok() || !SameLayout(*format, *old_format)) {
        ctx.plan->warnings.push_back(where + " \"" + *event + "\": the processes still running the replaced " +
                                     ref->path + " (" + old->file_identity() + ") are not counted: its probe event " +
                                     old->event().ToString() + " has another record layout than the new file's");
        continue;
      }
      const std::string name = old->event().ToString();
      ctx.plan->probe_names[name] = *event;
      ctx.plan->probe_identity[name] = old->file_identity();
      ctx.plan->probes.push_back(old);
      replaced.push_back(name);
    }
  }
  *event = current;
  return Status::Ok();
}

}  // namespace

namespace plan_internal {

void NameAsConfigured(const Plan& plan, EventPlan* ep) {
  auto it = plan.probe_names.find(ep->event.ToString());
  ep->display = it != plan.probe_names.end() ? it->second : ep->event.ToString();
}

Status ResolveProbeEvents(const PlanContext& ctx, MetricConfig* m) {
  for (const GaugeSideConfig* side : {&m->up, &m->down}) {
    if (IsProbeEvent(side->event)) {
      return Unimplemented(ctx.path + ": " + side->json_path + ".event: \"" + side->event +
                           "\": an up/down gauge takes tracepoints in this release (an inflight or max/min/last "
                           "gauge takes probe events)");
    }
  }
  const bool probe =
      IsProbeEvent(m->event) || IsProbeEvent(m->end.event) ||
      std::any_of(m->starts.begin(), m->starts.end(), [](const EndpointConfig& e) { return IsProbeEvent(e.event); });
  if (!probe) return Status::Ok();
  m->probe = true;
  if (m->type != MetricType::kLatency && m->gauge != GaugeKind::kInflight) {
    return ResolveProbeEvent(ctx, m->json_path, m->args, m->maxactive, &m->event);
  }
  for (EndpointConfig& e : m->starts) {
    TPE_RETURN_IF_ERROR(ResolveProbeEvent(ctx, e.json_path, e.args, e.maxactive, &e.event));
  }
  return ResolveProbeEvent(ctx, m->end.json_path, m->end.args, m->end.maxactive, &m->end.event);
}

}  // namespace plan_internal

namespace {

// `pid`: a uprobe's or USDT probe's one process (0: all). `callchain`: a profile's event
// (EventPlan::callchain; sampled).
StatusOr<EventPlan*> GetEvent(const PlanContext& ctx, const std::string& event, const std::string& filter, bool sampled,
                              int pid, const std::string& json_path, uint8_t callchain = 0, uint16_t max_stack = 0,
                              uint32_t stack_user_bytes = 0) {
  for (auto& e : ctx.plan->events) {
    if (e->event.ToString() == event && e->filter == filter && e->sampled == sampled && e->pid == pid &&
        e->callchain == callchain && e->stack_user_bytes == stack_user_bytes) {
      return e.get();
    }
  }
  TPE_ASSIGN_OR_RETURN(std::unique_ptr<EventPlan> ep, LoadEvent(ctx, event, filter, sampled, json_path));
  NameAsConfigured(*ctx.plan, ep.get());
  ep->pid = pid;
  if (callchain != 0 || stack_user_bytes != 0) {
    ep->callchain = callchain;
    ep->max_stack = max_stack;
    ep->stack_user_bytes = stack_user_bytes;
    ep->display += stack_user_bytes != 0 ? " stacks (dwarf)" : " stacks";
  }
  if (pid > 0) {
    ep->display += " pid " + std::to_string(pid);
    ep->pid_json_path = json_path;
  }
  ctx.plan->events.push_back(std::move(ep));
  return ctx.plan->events.back().get();
}

// GetEvent for `event` and, for a probe event, for the events of the same probe on replaced
// binaries (Plan::probe_replaced): the current one first. They share the current one's format.
StatusOr<std::vector<EventPlan*>> GetEvents(const PlanContext& ctx, const std::string& event, const std::string& filter,
                                            bool sampled, int pid, const std::string& json_path, uint8_t callchain = 0,
                                            uint16_t max_stack = 0, uint32_t stack_user_bytes = 0) {
  std::vector<EventPlan*> out;
  TPE_ASSIGN_OR_RETURN(EventPlan * ep,
                       GetEvent(ctx, event, filter, sampled, pid, json_path, callchain, max_stack, stack_user_bytes));
  out.push_back(ep);
  auto it = ctx.plan->probe_replaced.find(event);
  if (it == ctx.plan->probe_replaced.end()) return out;
  for (const std::string& old : it->second) {
    TPE_ASSIGN_OR_RETURN(EventPlan * oep,
                         GetEvent(ctx, old, filter, sampled, pid, json_path, callchain, max_stack, stack_user_bytes));
    out.push_back(oep);
  }
  return out;
}

// After labels were built against eps[0]: the events of replaced binaries sample what it does.
void ShareSampling(const std::vector<EventPlan*>& eps) {
  for (EventPlan* ep : eps) ep->cgroup |= eps[0]->cgroup;
}

void AddConsumer(const std::vector<EventPlan*>& eps, Collector* c, size_t index) {
  for (EventPlan* ep : eps) ep->consumers.emplace_back(c, index);
}

}  // namespace

namespace plan_internal {

StatusOr<const FieldFormat*> GetField(const PlanContext& ctx, const EventPlan& ep, const std::string& field,
                                      const std::string& json_path) {
  const FieldFormat* f = ep.format.FindField(field);
  if (f == nullptr) {
    return NotFound(ctx.path + ": " + json_path + ": " + ep.display + " has no field \"" + field +
                    "\"; its fields: " + ep.format.DescribeFields());
  }
  return f;
}

// Labels of `labels` whose `from` is `from` ("" = all), compiled against `ep`'s format. A
// "cgroup" label makes `ep` sample the cgroup id.
StatusOr<LabelSet> BuildLabels(const PlanContext& ctx, const std::vector<LabelConfig>& labels,
                               std::optional<LabelFrom> from, EventPlan* sampled_ep) {
  const EventPlan& ep = *sampled_ep;
  std::vector<std::string>* warnings = &ctx.plan->warnings;
  std::vector<LabelSpec> specs;
  for (const auto& l : labels) {
    if (from && l.from != *from) continue;
    LabelSpec s;
    s.name = l.name;
    if (l.source != LabelSource::kField) {
      s.source = l.source;
      if (s.source == LabelSource::kCgroup) {
        const KernelFeatures& kf = ctx.plan->features;
        if (!kf.cgroup.v2_labels) {
          // Every task would show the v2 root: the label is left out (never one false series),
          // and the log, --config.check and the warnings say so.
          const std::string w = ctx.path + ": " + l.json_path + ": cgroup label \"" + l.name +
                                "\" left out: it needs tasks in cgroup v2 (" + kf.cgroup.why +
                                "), else every task shows the v2 root as one series; boot with "
                                "systemd.unified_cgroup_hierarchy=1 to have it";
          if (std::find(warnings->begin(), warnings->end(), w) == warnings->end()) warnings->push_back(w);
          continue;
        }
        bool perf_engine = false;
        for (const auto& e : ctx.plan->events) perf_engine |= e.get() == sampled_ep;
        if (perf_engine && !kf.perf.sample_cgroup) {
          return Unavailable(ctx.path + ": " + l.json_path + ".source: a cgroup label on the perf engine needs " +
                             "PERF_SAMPLE_CGROUP (Linux 5.7), which this kernel (" + kf.bpf.release +
                             ") refuses; use \"engine\": \"bpf\" (bpf_get_current_cgroup_id) or remove "
                             "the label");
        }
        if (!ctx.plan->cgroups) {
          ctx.plan->cgroups = std::make_shared<CgroupResolver>(DiscoverCgroup2Mount());
          if (ctx.plan->cgroups->root().empty()) {
            warnings->push_back(ctx.path + ": " + l.json_path +
                                ".source: no cgroup2 filesystem in /proc/self/mountinfo; cgroup labels show ids");
          }
        }
        s.cgroups = ctx.plan->cgroups;
        sampled_ep->cgroup = true;
      }
    } else {
      TPE_ASSIGN_OR_RETURN(const FieldFormat* f, GetField(ctx, ep, l.field, l.json_path + ".field"));
      auto it = ep.symbols.find(l.field);
      const SymbolTable* table = it == ep.symbols.end() ? nullptr : &it->second;
      LabelDecode decode = l.decode;
      if (decode == LabelDecode::kSymbolic && table != nullptr && table->entries.empty() &&
          !table->unresolved.empty()) {
        // The format names enum constants and this kernel has no BTF to give their values:
        // show numbers rather than refuse to start.
        warnings->push_back(ctx.path + ": " + l.json_path + ".decode: symbol names of " + ep.display + " field \"" +
                            l.field + "\" (" + table->unresolved.front() +
                            ", ...) have no values without kernel BTF (/sys/kernel/btf/vmlinux); showing numbers");
        decode = LabelDecode::kAuto;
      }
      auto ex = FieldExtractor::Compile(*f, decode, table);
      if (!ex.ok()) return ex.status().WithContext(ctx.path + ": " + l.json_path + ".decode");
      s.extractor = std::move(*ex);
    }
    specs.push_back(std::move(s));
  }
  return LabelSet(std::move(specs));
}

StatusOr<Buckets> BuildBuckets(const PlanContext& ctx, const BucketsConfig& b) {
  StatusOr<Buckets> out = InvalidArgument("unknown bucket type");
  switch (b.type) {
    case BucketType::kExp2:
      out = Buckets::Exp2(b.min, b.max);
      break;
    case BucketType::kLinear:
      out = Buckets::Linear(b.start, b.width, b.count);
      break;
    case BucketType::kExplicit:
      out = Buckets::Explicit(b.bounds);
      break;
    case BucketType::kNative:
      out = Buckets::None();
      break;
    case BucketType::kNone:  // a metric without buckets: not asked
      break;
  }
  if (!out.ok()) return out.status().WithContext(ctx.path + ": " + b.json_path);
  return out;
}

StatusOr<std::optional<NativeLayout>> BuildNative(const PlanContext& ctx, const BucketsConfig& b, double scale) {
  if (!b.native) return std::optional<NativeLayout>();
  NativeOptions o;
  o.schema = static_cast<int>(b.schema);
  o.zero_threshold = b.zero_threshold;
  o.max_buckets = static_cast<uint32_t>(b.max_buckets);
  StatusOr<NativeLayout> l = NativeLayout::Make(o, scale);
  if (!l.ok()) return l.status().WithContext(ctx.path + ": " + b.json_path);
  return std::optional<NativeLayout>(std::move(*l));
}

// Key fields of one latency endpoint: integers, and (checked by the caller) the same sizes as
// the end's.
}  // namespace plan_internal

namespace {

StatusOr<std::vector<FieldExtractor>> BuildKey(const PlanContext& ctx, const EndpointConfig& e, const EventPlan& ep) {
  std::vector<FieldExtractor> key;
  for (size_t i = 0; i < e.key.size(); ++i) {
    const std::string jp = e.json_path + ".key[" + std::to_string(i) + "]";
    TPE_ASSIGN_OR_RETURN(const FieldFormat* f, GetField(ctx, ep, e.key[i], jp));
    if (!f->IsNumeric()) {  // integers and pointers (e.g. workqueue `work`, a request's address)
      return InvalidArgument(ctx.path + ": " + jp + ": key field \"" + f->name + "\" of " + ep.display + " is " +
                             f->type + " (" + FieldKindName(f->kind) + "); keys must be integer or pointer fields");
    }
    key.push_back(*FieldExtractor::Compile(*f, LabelDecode::kAuto, nullptr));
  }
  return key;
}

// A start's key fields against the end's, field by field: the same widths (the config parser
// checked their number), else InvalidArgument naming the start's key field and both types.
Status CheckKeyWidths(const PlanContext& ctx, const EndpointConfig& start, const std::vector<FieldExtractor>& start_key,
                      const std::vector<FieldExtractor>& end_key) {
  for (size_t i = 0; i < start_key.size() && i < end_key.size(); ++i) {
    const FieldFormat& a = start_key[i].field();
    const FieldFormat& b = end_key[i].field();
    if (a.size != b.size) {
      return InvalidArgument(ctx.path + ": " + start.json_path + ".key[" + std::to_string(i) +
                             "]: key types differ: start \"" + a.name + "\" is " + a.type + " (" +
                             std::to_string(a.size) + " bytes) but end \"" + b.name + "\" is " + b.type + " (" +
                             std::to_string(b.size) + " bytes)");
    }
  }
  return Status::Ok();
}

Status PlanLatency(const PlanContext& ctx, const MetricConfig& m) {
  TPE_ASSIGN_OR_RETURN(Buckets buckets, BuildBuckets(ctx, m.buckets));
  TPE_ASSIGN_OR_RETURN(std::optional<NativeLayout> native, BuildNative(ctx, m.buckets, 1e-9));
  TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> end_eps,
                       GetEvents(ctx, m.end.event, m.end.filter, true, m.end.pid, m.end.json_path));
  EventPlan* end_ep = end_eps[0];
  LatencyEndpoint end;
  TPE_ASSIGN_OR_RETURN(end.key, BuildKey(ctx, m.end, *end_ep));
  TPE_ASSIGN_OR_RETURN(end.labels, BuildLabels(ctx, m.labels, LabelFrom::kEnd, end_ep));
  ShareSampling(end_eps);
  std::vector<LatencyEndpoint> starts;
  std::vector<std::vector<EventPlan*>> start_eps;
  for (const auto& sc : m.starts) {
    TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> eps, GetEvents(ctx, sc.event, sc.filter, true, sc.pid, sc.json_path));
    EventPlan* ep = eps[0];
    LatencyEndpoint s;
    TPE_ASSIGN_OR_RETURN(s.key, BuildKey(ctx, sc, *ep));
    TPE_RETURN_IF_ERROR(CheckKeyWidths(ctx, sc, s.key, end.key));
    TPE_ASSIGN_OR_RETURN(s.labels, BuildLabels(ctx, m.labels, LabelFrom::kStart, ep));
    ShareSampling(eps);
    starts.push_back(std::move(s));
    start_eps.push_back(std::move(eps));
  }
  auto c = std::make_unique<LatencyCollector>(m.name, m.help, std::move(starts), std::move(end), std::move(buckets),
                                              std::move(native), ctx.settings.max_series_per_metric, m.max_inflight,
                                              static_cast<uint64_t>(m.timeout_seconds * 1e9));
  for (size_t i = 0; i < start_eps.size(); ++i) AddConsumer(start_eps[i], c.get(), i);
  AddConsumer(end_eps, c.get(), start_eps.size());
  ctx.plan->needs_comm |= c->NeedsComm();
  ctx.plan->needs_ordering = true;
  ctx.plan->AddMetric(std::move(c), m.canonical);
  return Status::Ok();
}

// The plan's bookkeeping for a collector fed by the samples of `eps` (every metric but counting
// mode): the events sample what eps[0] does, and deliver to it.
void AddSampledCollector(Plan* plan, const std::vector<EventPlan*>& eps, std::unique_ptr<Collector> c,
                         const std::string& identity) {
  ShareSampling(eps);
  AddConsumer(eps, c.get(), 0);
  plan->needs_comm |= c->NeedsComm();
  plan->needs_ordering |= c->NeedsOrdering();
  plan->AddMetric(std::move(c), identity);
}

// The extractor of `m`'s "value" field, which must be an integer field of `ep` (`what`: what the
// metric does with it, for the message, e.g. "a counter adds").
StatusOr<FieldExtractor> IntegerValueField(const PlanContext& ctx, const MetricConfig& m, const EventPlan& ep,
                                           const std::string& what) {
  TPE_ASSIGN_OR_RETURN(const FieldFormat* f, GetField(ctx, ep, m.value.field, m.json_path + ".value.field"));
  if (f->kind != FieldKind::kInteger) {
    std::string ints;
    for (const auto& g : ep.format.fields) {
      if (g.kind == FieldKind::kInteger && !g.name.starts_with("common_")) ints += (ints.empty() ? "" : ", ") + g.name;
    }
    return InvalidArgument(ctx.path + ": " + m.json_path + ".value.field: \"" + f->name + "\" of " + ep.display +
                           " is " + f->type + " (" + FieldKindName(f->kind) + "), not an integer; " + what +
                           " an integer field; its integer fields: " + ints);
  }
  return *FieldExtractor::Compile(*f, LabelDecode::kAuto, nullptr);
}

// type gauge (collectors/gauge.h) on the perf engine: its events deliver to one GaugeCollector
// (event index 0: start, up or the event; 1: end or down).
Status PlanGauge(const PlanContext& ctx, const MetricConfig& m) {
  using Kind = GaugeCollector::Kind;
  std::vector<GaugeCollector::Side> sides;
  std::vector<std::vector<EventPlan*>> side_eps;
  const Kind kind = CollectorGaugeKind(m);
  if (m.gauge == GaugeKind::kInflight) {
    const EndpointConfig& sc = m.starts[0];
    TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> start_eps,
                         GetEvents(ctx, sc.event, sc.filter, true, sc.pid, sc.json_path));
    TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> end_eps,
                         GetEvents(ctx, m.end.event, m.end.filter, true, m.end.pid, m.end.json_path));
    GaugeCollector::Side start, end;
    TPE_ASSIGN_OR_RETURN(start.key, BuildKey(ctx, sc, *start_eps[0]));
    TPE_ASSIGN_OR_RETURN(end.key, BuildKey(ctx, m.end, *end_eps[0]));
    TPE_RETURN_IF_ERROR(CheckKeyWidths(ctx, sc, start.key, end.key));
    TPE_ASSIGN_OR_RETURN(start.labels, BuildLabels(ctx, m.labels, LabelFrom::kStart, start_eps[0]));
    sides.push_back(std::move(start));
    sides.push_back(std::move(end));
    side_eps.push_back(std::move(start_eps));
    side_eps.push_back(std::move(end_eps));
  } else if (m.gauge == GaugeKind::kUpDown) {
    for (const GaugeSideConfig* sc : {&m.up, &m.down}) {
      TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> eps, GetEvents(ctx, sc->event, sc->filter, true, 0, sc->json_path));
      GaugeCollector::Side side;
      const std::vector<LabelConfig>& labels = sc->has_labels ? sc->labels : m.labels;
      TPE_ASSIGN_OR_RETURN(side.labels, BuildLabels(ctx, labels, std::nullopt, eps[0]));
      if (!sc->value.field.empty()) {
        MetricConfig side_metric = m;
        side_metric.value = sc->value;
        side_metric.json_path = sc->json_path;
        TPE_ASSIGN_OR_RETURN(FieldExtractor v, IntegerValueField(ctx, side_metric, *eps[0], "a gauge adds"));
        side.value = std::move(v);
        side.scale = sc->value.scale;
      }
      sides.push_back(std::move(side));
      side_eps.push_back(std::move(eps));
    }
    TPE_RETURN_IF_ERROR(CheckUpDownLabels(ctx, m, side_eps[0][0]->format, side_eps[1][0]->format));
  } else {
    TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> eps, GetEvents(ctx, m.event, m.filter, true, 0, m.json_path));
    GaugeCollector::Side side;
    TPE_ASSIGN_OR_RETURN(side.labels, BuildLabels(ctx, m.labels, std::nullopt, eps[0]));
    TPE_ASSIGN_OR_RETURN(FieldExtractor v,
                         IntegerValueField(ctx, m, *eps[0], "a " + std::string(NameOf(m.gauge)) + " gauge reads"));
    side.value = std::move(v);
    side.scale = m.value.scale;
    sides.push_back(std::move(side));
    side_eps.push_back(std::move(eps));
  }
  auto c = std::make_unique<GaugeCollector>(m.name, m.help, kind, std::move(sides), ctx.settings.max_series_per_metric,
                                            m.max_inflight, static_cast<uint64_t>(m.timeout_seconds * 1e9));
  for (size_t i = 0; i < side_eps.size(); ++i) {
    ShareSampling(side_eps[i]);
    AddConsumer(side_eps[i], c.get(), i);
  }
  ctx.plan->needs_comm |= c->NeedsComm();
  ctx.plan->needs_ordering |= c->NeedsOrdering();
  ctx.plan->AddMetric(std::move(c), m.canonical);
  return Status::Ok();
}

// A CPU profile's software clock event (EventPlan::software_clock), shared by the profiles that
// sample it alike: no tracefs, no format. Named "perf:<clock>", shown as "<clock> stacks".
EventPlan* GetClockEvent(Plan* plan, const MetricConfig& m, uint8_t callchain, uint16_t max_stack,
                         uint32_t stack_user_bytes) {
  std::unique_ptr<EventPlan> ep = plan_internal::MakeClockEvent(m);
  ep->callchain = callchain;
  ep->max_stack = max_stack;
  ep->stack_user_bytes = stack_user_bytes;
  for (auto& e : plan->events) {
    ep->cgroup = e->cgroup;  // a "cgroup" label (BuildLabels, after this) adds it to a shared event
    if (e->SamePerfEvents(*ep)) return e.get();
  }
  ep->cgroup = false;
  plan->events.push_back(std::move(ep));
  return plan->events.back().get();
}

// A profile (a "profiles" entry): its own sampled event with callchains, a ProfileCollector.
Status PlanProfile(const PlanContext& ctx, const MetricConfig& m) {
  // "dwarf": the user stack unwound here from the sample's registers and stack copy; the
  // kernel's callchain then only carries the kernel part (if any).
  const bool dwarf = m.unwind == UnwindMethod::kDwarf;
  const uint8_t callchain = (m.stack != ProfileStack::kUser ? EventPlan::kCallchainKernel : 0) |
                            (m.stack != ProfileStack::kKernel && !dwarf ? EventPlan::kCallchainUser : 0);
  const uint32_t stack_user_bytes = dwarf ? static_cast<uint32_t>(ctx.settings.profile_stack_bytes) : 0;
  TPE_ASSIGN_OR_RETURN(const uint32_t frames, ProfileFrames(ctx, m));
  const auto max_stack = static_cast<uint16_t>(frames);  // at most kMaxProfileFrames
  const bool user_stacks = m.stack != ProfileStack::kKernel;
  // A profile's collector: user frames unwound at most `frames` deep.
  auto prepared = [&](std::unique_ptr<ProfileCollector> c) {
    c->set_max_unwind_frames(frames);
    return c;
  };
  if (IsClockEvent(m.event)) {
    EventPlan* ep = GetClockEvent(ctx.plan, m, callchain, max_stack, stack_user_bytes);
    TPE_ASSIGN_OR_RETURN(LabelSet labels, BuildLabels(ctx, m.labels, std::nullopt, ep));
    auto c = std::make_unique<ProfileCollector>(m.name, m.help, std::move(labels), ctx.settings.max_stacks_per_profile,
                                                std::nullopt, 1, ClockWeight{m.include_idle});
    AddSampledCollector(ctx.plan, {ep}, prepared(std::move(c)), m.canonical);
    if (user_stacks) ctx.plan->needs_ordering = true;
    return Status::Ok();
  }
  TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> eps, GetEvents(ctx, m.event, m.filter, true, m.pid, m.json_path,
                                                              callchain, max_stack, stack_user_bytes));
  EventPlan* ep = eps[0];
  if (m.off_cpu) {
    // The switch-out and the switch-in of a task come from different CPUs: time order across them.
    ctx.plan->needs_ordering = true;
    std::optional<FieldExtractor> prev_pid, next_pid, prev_state;
    const std::pair<const char*, std::optional<FieldExtractor>*> fields[] = {
        {"prev_pid", &prev_pid}, {"next_pid", &next_pid}, {"prev_state", &prev_state}};
    for (const auto& [field, into] : fields) {
      TPE_ASSIGN_OR_RETURN(const FieldFormat* f, GetField(ctx, *ep, field, m.json_path + ".type"));
      auto x = FieldExtractor::Compile(*f, LabelDecode::kAuto, nullptr);
      if (!x.ok() || f->kind != FieldKind::kInteger) {
        return InvalidArgument(ctx.path + ": " + m.json_path + ": " + ep->display + "'s field \"" + field +
                               "\" is not an integer here; an off_cpu profile cannot pair switches on this kernel");
      }
      *into = std::move(x).value();
    }
    OffCpuPairing pairing{*prev_pid, *next_pid, *prev_state};
    pairing.min_block_ns = static_cast<uint64_t>(m.min_block_seconds * 1e9 + 0.5);
    pairing.own_pid = static_cast<uint32_t>(::getpid());
    TPE_ASSIGN_OR_RETURN(LabelSet labels, BuildLabels(ctx, m.labels, std::nullopt, ep));
    auto c = std::make_unique<ProfileCollector>(m.name, m.help, std::move(labels), ctx.settings.max_stacks_per_profile,
                                                std::move(pairing));
    AddSampledCollector(ctx.plan, eps, prepared(std::move(c)), m.canonical);
    return Status::Ok();
  }
  std::optional<FieldExtractor> value;
  if (!m.value.field.empty()) {
    TPE_ASSIGN_OR_RETURN(value, IntegerValueField(ctx, m, *ep, "a profile sums"));
  }
  TPE_ASSIGN_OR_RETURN(LabelSet labels, BuildLabels(ctx, m.labels, std::nullopt, ep));
  auto c = std::make_unique<ProfileCollector>(m.name, m.help, std::move(labels), ctx.settings.max_stacks_per_profile,
                                              std::move(value), m.value.scale);
  AddSampledCollector(ctx.plan, eps, prepared(std::move(c)), m.canonical);
  // User frames are named through the mappings learnt from PERF_RECORD_MMAP2 and the exec and
  // fork records: those must reach ProcessImages in time order across the CPUs.
  if (user_stacks) ctx.plan->needs_ordering = true;
  return Status::Ok();
}

// A metric on the perf engine: its events opened per CPU and its collector fed by their samples
// (or, in counting mode, read from their counts). Adds one MetricPlan.
Status PlanPerfMetric(const PlanContext& ctx, const MetricConfig& m) {
  if (m.type == MetricType::kLatency) return PlanLatency(ctx, m);
  if (m.type == MetricType::kProfile) return PlanProfile(ctx, m);
  if (m.type == MetricType::kGauge) return PlanGauge(ctx, m);
  // A counter that adds a field's value needs every sample, labels or not.
  const bool counting = m.type == MetricType::kCounter && m.labels.empty() && m.value.field.empty();
  TPE_ASSIGN_OR_RETURN(std::vector<EventPlan*> eps, GetEvents(ctx, m.event, m.filter, !counting, m.pid, m.json_path));
  EventPlan* ep = eps[0];
  std::unique_ptr<Collector> c;
  if (m.type == MetricType::kHistogram) {
    TPE_ASSIGN_OR_RETURN(const FieldFormat* f, GetField(ctx, *ep, m.value.field, m.json_path + ".value.field"));
    if (!f->IsNumeric()) {
      return InvalidArgument(ctx.path + ": " + m.json_path + ".value.field: \"" + f->name + "\" of " + ep->display +
                             " is " + f->type + " (" + FieldKindName(f->kind) +
                             "), not a number; a histogram needs an integer field");
    }
    TPE_ASSIGN_OR_RETURN(Buckets buckets, BuildBuckets(ctx, m.buckets));
    TPE_ASSIGN_OR_RETURN(std::optional<NativeLayout> native, BuildNative(ctx, m.buckets, m.value.scale));
    TPE_ASSIGN_OR_RETURN(LabelSet labels, BuildLabels(ctx, m.labels, std::nullopt, ep));
    c = std::make_unique<HistogramCollector>(m.name, m.help, std::move(labels),
                                             *FieldExtractor::Compile(*f, LabelDecode::kAuto, nullptr), m.value.scale,
                                             std::move(buckets), std::move(native), ctx.settings.max_series_per_metric);
  } else if (!m.value.field.empty()) {
    TPE_ASSIGN_OR_RETURN(FieldExtractor value, IntegerValueField(ctx, m, *ep, "a counter adds"));
    TPE_ASSIGN_OR_RETURN(LabelSet labels, BuildLabels(ctx, m.labels, std::nullopt, ep));
    c = std::make_unique<CounterCollector>(m.name, m.help, std::move(labels), ctx.settings.max_series_per_metric,
                                           std::move(value), m.value.scale);
  } else if (m.labels.empty()) {
    // Counting mode: the kernel counts (after the filter); read() at scrape.
    ctx.plan
        ->AddMetric(std::make_unique<CounterCollector>(m.name, m.help, [eps] { return KernelCount(eps, 0); }),
                    m.canonical)
        .counting_events = eps;
    return Status::Ok();
  } else {
    TPE_ASSIGN_OR_RETURN(LabelSet labels, BuildLabels(ctx, m.labels, std::nullopt, ep));
    c = std::make_unique<CounterCollector>(m.name, m.help, std::move(labels), ctx.settings.max_series_per_metric);
  }
  AddSampledCollector(ctx.plan, eps, std::move(c), m.canonical);
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Plan>> BuildPlan(const Config& cfg, const Tracefs& tracefs, const KernelEnums& enums,
                                          bool check_filters, const bpf::BpfSupport& bpf,
                                          const std::set<std::string>& running_bpf, const KernelFeatures& features) {
  auto plan = std::make_unique<Plan>();
  plan->config_path = cfg.path;
  plan->settings = cfg.settings;
  plan->features = features;
  const PlanContext ctx{.plan = plan.get(),
                        .path = cfg.path,
                        .settings = cfg.settings,
                        .tracefs = tracefs,
                        .enums = enums,
                        .check_filters = check_filters};
  for (const auto& row : DescribeFeatures(features)) {
    if (!row.available) {
      const bool version = !row.since.empty() && row.since[0] >= '0' && row.since[0] <= '9';
      plan->kernel_notes.push_back(row.feature + " (needs " + (version ? "Linux " : "") + row.since +
                                   ") unavailable on " + features.bpf.release + ": " + row.cost);
    }
  }
  bpf::SetLoadOptions(ChooseLoadOptions(features));
  // Probe events become dynamic trace events of this process's group; from here on the metric
  // names them as "group:event" like any tracepoint.
  Config resolved = cfg;
  if (ProbeRegistry* probes = ProbeRegistry::IfCreated()) probes->ForgetMappedFiles();
  for (MetricConfig& m : resolved.metrics) {
    TPE_RETURN_IF_ERROR(ResolveProbeEvents(ctx, &m));
  }
  for (const auto& m : resolved.metrics) {
    std::string why;
    TPE_ASSIGN_OR_RETURN(bool on_bpf, PlanBpfMetric(ctx, m, bpf, running_bpf, &why));
    if (on_bpf) continue;
    TPE_RETURN_IF_ERROR(PlanPerfMetric(ctx, m));
    plan->metrics.back().engine_reason = why;
  }
  // Kernel frames are named from /proc/kallsyms: one line when it shows this process no address.
  if (features.kallsyms_hidden.value_or(false)) {
    std::string names;
    for (const auto& m : cfg.metrics) {
      if (m.type == MetricType::kProfile && m.stack != ProfileStack::kUser)
        names += (names.empty() ? "" : ", ") + m.name;
    }
    if (!names.empty()) plan->warnings.push_back(ctx.path + ": " + KallsymsHiddenWarning(names));
  }
  // A "dwarf" profile's samples carry a copy of the user stack (8 KiB by default): the rings hold
  // at least 2 MiB per CPU (256 such samples) so that a burst waits there for the reader.
  constexpr uint32_t kDwarfRingPages = 512;
  const bool dwarf =
      std::any_of(plan->events.begin(), plan->events.end(), [](const auto& ep) { return ep->stack_user_bytes > 0; });
  if (dwarf && plan->settings.ring_buffer_pages < kDwarfRingPages) plan->settings.ring_buffer_pages = kDwarfRingPages;
  return plan;
}

std::string KallsymsHiddenWarning(const std::string& profiles) {
  auto sysctl = [](const char* name) {
    auto v = ReadFileToString(std::string("/proc/sys/kernel/") + name);
    return std::string("kernel.") + name + "=" + (v.ok() ? Trim(*v) : "?");
  };
  return "kernel frames of " + profiles +
         " stay raw addresses: /proc/kallsyms lists every kernel address as 0 to this process (" +
         sysctl("kptr_restrict") + ", " + sysctl("perf_event_paranoid") +
         ": a process without CAP_SYSLOG sees them only at kptr_restrict=0 with perf_event_paranoid <= 1, no "
         "process at kptr_restrict=2). Grant CAP_SYSLOG (the shipped systemd unit and DaemonSet do), or take "
         "\"stack\": \"user\"";
}

namespace plan_internal {

StatusOr<uint32_t> ProfileFrames(const PlanContext& ctx, const MetricConfig& m) {
  const auto wanted = static_cast<uint32_t>(ctx.settings.profile_max_frames);
  const int limit = ctx.plan->features.perf.max_stack;
  if (limit < 0 || static_cast<uint32_t>(limit) >= wanted) return wanted;
  const std::string where = ctx.path + ": " + m.json_path + ": " + m.name;
  if (limit == 0) {
    return InvalidArgument(where +
                           ": kernel.perf_event_max_stack is 0, so the kernel takes no stack frames; raise "
                           "it (sysctl kernel.perf_event_max_stack=" +
                           std::to_string(wanted) + ")");
  }
  // One line per profile, whichever engine plans it (bpf may hand it back to perf).
  std::string warning = where + ": stacks of at most " + std::to_string(limit) +
                        " frames (kernel.perf_event_max_stack), not " + std::to_string(wanted) +
                        " (settings.profile_max_frames)";
  if (std::find(ctx.plan->warnings.begin(), ctx.plan->warnings.end(), warning) == ctx.plan->warnings.end()) {
    ctx.plan->warnings.push_back(std::move(warning));
  }
  return static_cast<uint32_t>(limit);
}

std::unique_ptr<EventPlan> MakeClockEvent(const MetricConfig& m) {
  auto ep = std::make_unique<EventPlan>();
  ep->event = EventName{"perf", m.event};
  ep->display = m.event + " stacks " +
                (m.frequency_hz > 0 ? "at " + std::to_string(m.frequency_hz) + " Hz"
                                    : "every " + std::to_string(m.period_ns) + " ns") +
                (m.include_idle ? " with idle" : "");
  ep->sampled = true;
  ep->software_clock = m.event == "task-clock" ? PERF_COUNT_SW_TASK_CLOCK : PERF_COUNT_SW_CPU_CLOCK;
  ep->frequency_hz = m.frequency_hz;
  ep->period_ns = m.period_ns;
  ep->include_idle = m.include_idle;
  return ep;
}

}  // namespace plan_internal

MetricPlan& Plan::AddMetric(std::unique_ptr<Collector> collector, std::string identity) {
  MetricPlan& m = metrics.emplace_back();
  m.collector = std::move(collector);
  m.identity = std::move(identity);
  return m;
}

std::vector<Engine> Plan::Engines() const {
  std::vector<Engine> out;
  for (const MetricPlan& m : metrics) out.push_back(m.engine);
  return out;
}

std::vector<Collector*> Plan::Collectors() const {
  std::vector<Collector*> out;
  out.reserve(metrics.size());
  for (const MetricPlan& m : metrics) out.push_back(m.collector.get());
  return out;
}

}  // namespace tpe
