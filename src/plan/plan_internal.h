// Planning steps shared by plan.cc (the perf engine) and plan_bpf.cc (the bpf engine). Errors
// name the config file and JSON path. Not a public interface.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bpf/loader.h"
#include "collectors/gauge.h"
#include "collectors/native_buckets.h"
#include "plan/plan.h"

namespace tpe::plan_internal {

// What every planning step reads: the plan being built, the config file's path (errors name it),
// its settings, and the kernel's tracefs and enums. `check_filters`: each filter is also
// test-applied in a private tracefs instance (BuildPlan). The referents outlive the planning.
struct PlanContext {
  Plan* plan;
  const std::string& path;
  const Settings& settings;
  const Tracefs& tracefs;
  const KernelEnums& enums;
  bool check_filters;
};

// The event's id, format and symbol tables (and, with `check_filters`, its filter checked in a
// private tracefs instance) as an EventPlan that is in no plan yet.
StatusOr<std::unique_ptr<EventPlan>> LoadEvent(const PlanContext& ctx, const std::string& event,
                                               const std::string& filter, bool sampled, const std::string& json_path);
// The field `field` of `ep`, or NotFound listing its fields.
StatusOr<const FieldFormat*> GetField(const PlanContext& ctx, const EventPlan& ep, const std::string& field,
                                      const std::string& json_path);
// The labels with `from` == from (nullopt: all) compiled against `sampled_ep`'s format; a cgroup
// label sets sampled_ep->cgroup and creates plan->cgroups.
StatusOr<LabelSet> BuildLabels(const PlanContext& ctx, const std::vector<LabelConfig>& labels,
                               std::optional<LabelFrom> from, EventPlan* sampled_ep);
// The kind of a gauge metric (its config's "gauge": inflight, updown, max, min, last).
GaugeCollector::Kind CollectorGaugeKind(const MetricConfig& m);
// An up/down gauge's sides (their events' formats): the same labels — name, source, decode —
// from fields of one type, so one series is one label set whichever side built it. Errors:
// InvalidArgument naming the down side's label and what it must match.
Status CheckUpDownLabels(const PlanContext& ctx, const MetricConfig& m, const EventFormat& up_format,
                         const EventFormat& down_format);
StatusOr<Buckets> BuildBuckets(const PlanContext& ctx, const BucketsConfig& b);
// The native bucket layout of `b` for values raw × `scale` (nullopt when `b` has no native buckets).
StatusOr<std::optional<NativeLayout>> BuildNative(const PlanContext& ctx, const BucketsConfig& b, double scale);

// Plans `m` on the bpf engine when its "engine" and `bpf` allow it. Returns true when it did
// (the collector, identity and engine are appended to `plan`), false when the metric should go
// to the perf engine (its MetricPlan::engine_reason is then set by the caller from *why). Errors: a
// metric with "engine": "bpf" that cannot run on it (PermissionDenied naming CAP_BPF, or
// InvalidArgument with what cannot be expressed), and the verifier's rejection. `running_bpf`:
// the running pipeline's bpf metrics (BuildPlan's): one it has (by identity, and for a metric on
// probe events by identity and part, BpfPartsMetric::keys) is kept by the reload; nothing is
// loaded for it. A metric on probe events becomes a BpfPartsMetric (one part per combination of
// its probes' events on replaced binaries).
StatusOr<bool> PlanBpfMetric(const PlanContext& ctx, const MetricConfig& m, const bpf::BpfSupport& bpf,
                             const std::set<std::string>& running_bpf, std::string* why);

// Probe events (plan/probes.h) of `m` created or shared through ProbeRegistry and renamed in
// `m` to their "group:event"; sets m->probe. Errors name the file, the JSON path and the probe.
Status ResolveProbeEvents(const PlanContext& ctx, MetricConfig* m);

// Names `ep` as the config does (EventPlan::display): a probe event by its probe name
// (plan->probe_names), else "system:event".
void NameAsConfigured(const Plan& plan, EventPlan* ep);

// Frames each stack of profile `m` keeps: settings.profile_max_frames, at most
// kernel.perf_event_max_stack (plan->features.perf.max_stack; -1: unknown, not clamped). The
// kernel refuses more: perf_event_open with EOVERFLOW (attr.sample_max_stack;
// get_callchain_buffers, kernel/events/callchain.c), a BPF stack map with EINVAL (its value
// size; stack_map_alloc, kernel/bpf/stackmap.c). When it clamps, one warning naming the file,
// the JSON path and both numbers goes to plan->warnings (once, whichever engine asks).
// Errors: InvalidArgument when the sysctl is 0 (no frame can be taken).
StatusOr<uint32_t> ProfileFrames(const PlanContext& ctx, const MetricConfig& m);

// A CPU profile's software clock event (EventPlan::software_clock) for profile `m`
// (IsClockEvent(m.event)): sampled at its frequency_hz or period_ns, with or without the idle
// task; no callchain, no consumers yet. Named "perf:<clock>", shown as "<clock> stacks at N Hz".
std::unique_ptr<EventPlan> MakeClockEvent(const MetricConfig& m);

}  // namespace tpe::plan_internal
