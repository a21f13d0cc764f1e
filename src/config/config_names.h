// The config's keyword values (a metric's "type", "engine", a profile's "stack", ...) as enums,
// each with its one name table (common/name_table.h: FromName, NameOf, NameList, NotOneOf). The
// parser (config/config.cc) turns each string into its enum once; planning, the pipeline, the
// reports and the canonical form (MetricConfig::canonical) use the enums and print with NameOf,
// so a name is written once, here. docs/CONFIGURATION.md documents every value.
//
// A label's "source" and "decode" have their enums and tables on the floors that implement them:
// collectors/label_source.h and decode/label_decode.h (included here).
//
// Pure; thread-safe.
#pragma once

#include <span>

#include "collectors/label_source.h"
#include "common/name_table.h"
#include "decode/label_decode.h"

namespace tpe {

// A metric's "type" (a "metrics" entry), or kProfile for a "profiles" entry.
enum class MetricType { kCounter, kHistogram, kLatency, kGauge, kProfile };
inline constexpr EnumName<MetricType> kMetricTypeNames[] = {
    {MetricType::kCounter, "counter"}, {MetricType::kHistogram, "histogram"}, {MetricType::kLatency, "latency"},
    {MetricType::kGauge, "gauge"},     {MetricType::kProfile, "profile"},
};
constexpr std::span<const EnumName<MetricType>> NameTable(MetricType) { return kMetricTypeNames; }

// A "profiles" entry's "type": what a sample of the profile is.
enum class ProfileKind { kProfile, kOffCpu };
inline constexpr EnumName<ProfileKind> kProfileKindNames[] = {
    {ProfileKind::kProfile, "profile", "the default: stacks of an event's hits"},
    {ProfileKind::kOffCpu, "off_cpu", "time tasks spend switched out, by stack"},
};
constexpr std::span<const EnumName<ProfileKind>> NameTable(ProfileKind) { return kProfileKindNames; }

// A gauge's kind (collectors/gauge.h), chosen by which key the gauge has: "inflight", "up" (with
// "down": kUpDown), "max", "min" or "last". kNone: the metric is not a gauge.
enum class GaugeKind { kNone, kInflight, kUpDown, kMax, kMin, kLast };
inline constexpr EnumName<GaugeKind> kGaugeKindNames[] = {
    {GaugeKind::kInflight, "inflight"}, {GaugeKind::kUpDown, "updown"}, {GaugeKind::kMax, "max"},
    {GaugeKind::kMin, "min"},           {GaugeKind::kLast, "last"},
};
constexpr std::span<const EnumName<GaugeKind>> NameTable(GaugeKind) { return kGaugeKindNames; }

// A metric's "engine" (plan/plan.h says how kAuto chooses). MetricPlan::engine holds the one a
// collector runs on: kBpf or kPerf.
enum class Engine { kAuto, kBpf, kPerf };
inline constexpr EnumName<Engine> kEngineNames[] = {
    {Engine::kAuto, "auto"},
    {Engine::kBpf, "bpf"},
    {Engine::kPerf, "perf"},
};
constexpr std::span<const EnumName<Engine>> NameTable(Engine) { return kEngineNames; }

// A profile's "stack": which stacks a sample carries. kNone: not a profile.
enum class ProfileStack { kNone, kKernel, kUser, kBoth };
inline constexpr EnumName<ProfileStack> kProfileStackNames[] = {
    {ProfileStack::kKernel, "kernel"},
    {ProfileStack::kUser, "user"},
    {ProfileStack::kBoth, "both"},
};
constexpr std::span<const EnumName<ProfileStack>> NameTable(ProfileStack) { return kProfileStackNames; }

// A profile's "unwind": how its user stacks are unwound. kNone: no user stacks (a kernel-only
// profile, or not a profile).
enum class UnwindMethod { kNone, kDwarf, kFramePointer };
inline constexpr EnumName<UnwindMethod> kUnwindMethodNames[] = {
    {UnwindMethod::kDwarf, "dwarf",
     "the default: the code's unwind tables, whole on binaries built without frame pointers"},
    {UnwindMethod::kFramePointer, "frame_pointer", "the kernel's frame-pointer walk: cheaper"},
};
constexpr std::span<const EnumName<UnwindMethod>> NameTable(UnwindMethod) { return kUnwindMethodNames; }

// "buckets"."type" of a histogram or latency metric. kNone: the metric has no buckets.
enum class BucketType { kNone, kExp2, kLinear, kExplicit, kNative };
inline constexpr EnumName<BucketType> kBucketTypeNames[] = {
    {BucketType::kExp2, "exp2"},
    {BucketType::kLinear, "linear"},
    {BucketType::kExplicit, "explicit"},
    {BucketType::kNative, "native"},
};
constexpr std::span<const EnumName<BucketType>> NameTable(BucketType) { return kBucketTypeNames; }

// What a probe event (plan/probes.h) is attached to: the name before the first ':' of an
// "event" such as "uprobe:PATH:SYMBOL", "usdt:PATH:PROVIDER:NAME" or "kprobe:FUNCTION".
enum class ProbePrefix { kUprobe, kUretprobe, kUsdt, kKprobe, kKretprobe };
inline constexpr EnumName<ProbePrefix> kProbePrefixNames[] = {
    {ProbePrefix::kUprobe, "uprobe"}, {ProbePrefix::kUretprobe, "uretprobe"}, {ProbePrefix::kUsdt, "usdt"},
    {ProbePrefix::kKprobe, "kprobe"}, {ProbePrefix::kKretprobe, "kretprobe"},
};
constexpr std::span<const EnumName<ProbePrefix>> NameTable(ProbePrefix) { return kProbePrefixNames; }

// A latency (or inflight gauge) label's "from": which event of the pair it is read at.
enum class LabelFrom { kStart, kEnd };
inline constexpr EnumName<LabelFrom> kLabelFromNames[] = {
    {LabelFrom::kStart, "start"},
    {LabelFrom::kEnd, "end"},
};
constexpr std::span<const EnumName<LabelFrom>> NameTable(LabelFrom) { return kLabelFromNames; }

}  // namespace tpe
