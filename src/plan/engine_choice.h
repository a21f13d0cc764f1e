// Which engine a metric may run on, and why not bpf: a pure function of what the config asks and
// what the kernel offers (no plan, no files, no syscalls), so that every rule is tested apart from
// planning. The bpf planner (plan_bpf.cc) asks it first, then builds the metric's parts, checks
// the program budget and loads; any of those can still send an "auto" metric to perf.
//
// The rules, in order (the first that decides wins):
//   "engine": "perf"                                   -> perf
//   a gauge of probe events                            -> perf ("auto") / refused ("bpf")
//   a profile, "auto"                                  -> perf (callchains are exact; dwarf is perf's)
//   a profile, "bpf", user stacks with "unwind": "dwarf" written -> refused; defaulted -> a warning
//   a profile, "bpf", summing a "value" field          -> refused
//   a profile, "bpf", its stack map over the bound     -> refused
//   a label-less counter, "auto"                       -> perf (counting mode)
//   uncounted program skips on this kernel             -> perf ("auto") / a warning ("bpf")
//   "pid" (one process)                                -> perf ("auto") / refused ("bpf")
//   no bpf engine (and the metric is not running on it already) -> perf / refused (PermissionDenied)
//   otherwise                                          -> bpf
//
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config_names.h"

namespace tpe {

struct EngineQuestion {
  // What the config asks.
  std::string name;          // the metric's name, for messages
  std::string where;         // "<config path>: <json path>.engine", for errors
  std::string where_metric;  // "<config path>: <json path>", for warnings
  Engine asked = Engine::kAuto;
  MetricType type = MetricType::kCounter;
  bool probe = false;               // on probe events (uprobe, USDT, kprobe)
  bool dwarf_user_stacks = false;   // a profile taking user stacks with "unwind": "dwarf"
  bool unwind_given = false;        // "unwind" written in the config (not the default)
  bool sums_value = false;          // a "value" field summed (a profile's) or counted
  bool label_less_counter = false;  // a counter with no labels and no value: counting mode
  bool one_process = false;         // "pid" on the metric or one of its events
  // A profile asked for bpf: its stack map, preallocated (frames each, max_stacks of them).
  uint32_t stack_map_frames = 0;
  uint64_t stack_map_stacks = 0;
  uint64_t preallocate_max_bytes = 0;  // settings.bpf_preallocate_max_bytes
  // What the kernel offers.
  bool bpf_available = false;
  std::string bpf_reason;       // why not, when !bpf_available
  bool running_on_bpf = false;  // a reload: the metric runs on bpf already (loaded earlier)
  // Programs skipped uncounted while a map syscall of ours is preempted (preemptible kernel code
  // before Linux 6.7, map syscalls not at SCHED_FIFO): the sentence saying so, "" when not.
  std::string uncounted_skips;
};

struct EngineAnswer {
  bool bpf = false;                   // run it on bpf (else perf, unless `refusal` is set)
  std::string why_not;                // perf: why not bpf (the log and --config.check say it)
  Status refusal;                     // not OK: "engine": "bpf" asked for what cannot be
  std::vector<std::string> warnings;  // said and planned anyway
};

// The engine for `q`, by the rules above.
EngineAnswer ChooseEngine(const EngineQuestion& q);

// Bytes a bpf profile's stack map preallocates: per stack a header (struct stack_map_bucket,
// ~24 bytes) and `frames` 8-byte frames, plus an 8-byte slot (stack_map_alloc).
uint64_t StackMapBytes(uint64_t stacks, uint32_t frames);

}  // namespace tpe
