// Where a label's value comes from: a tracepoint field, or a property of the sample ("source" of
// a label in the config). The enum and its one name table (common/name_table.h), which the
// config parser and every message take their names from.
//
// Pure; thread-safe.
#pragma once

#include <span>

#include "common/name_table.h"

namespace tpe {

// kField: a tracepoint field (the label has "field", no "source"; not in the name table, so its
// name is ""). kCgroup: the task's cgroup v2 id (Sample::cgroup_id, PERF_SAMPLE_CGROUP), keyed
// as a u64 and rendered as its path by a CgroupResolver at scrape time.
enum class LabelSource { kField, kComm, kPid, kTid, kCpu, kCgroup };

inline constexpr EnumName<LabelSource> kLabelSourceNames[] = {
    {LabelSource::kComm, "comm"}, {LabelSource::kPid, "pid"},       {LabelSource::kTid, "tid"},
    {LabelSource::kCpu, "cpu"},   {LabelSource::kCgroup, "cgroup"},
};
constexpr std::span<const EnumName<LabelSource>> NameTable(LabelSource) { return kLabelSourceNames; }

}  // namespace tpe
