#include "plan/engine_choice.h"

namespace tpe {

uint64_t StackMapBytes(uint64_t stacks, uint32_t frames) { return stacks * (8ULL * frames + 24) + 8ULL * stacks; }

EngineAnswer ChooseEngine(const EngineQuestion& q) {
  EngineAnswer a;
  const bool forced = q.asked == Engine::kBpf;
  const std::string on_bpf = q.where + ": \"bpf\" for " + q.name + ": ";
  // "auto": perf, saying why; "bpf": refused with `refusal`.
  auto perf = [&](std::string why) {
    a.why_not = std::move(why);
    return a;
  };
  auto refused = [&](Status st) {
    a.refusal = std::move(st);
    return a;
  };
  if (q.asked == Engine::kPerf) return perf("\"engine\": \"perf\" in the config");
  if (q.type == MetricType::kGauge && q.probe) {
    const std::string perf_only = "a gauge of probe events runs on the perf engine in this release";
    if (forced) return refused(InvalidArgument(on_bpf + perf_only + "; use \"auto\" or \"perf\""));
    return perf(perf_only);
  }
  if (q.type == MetricType::kProfile) {
    // "auto": perf. A callchain is taken whole with each sample, so its stacks are exact; a
    // stack map loses a stack to a hash collision or a full map (counted, but lost), at a lower
    // cost per hit (no sample, no ring traffic): the user's choice.
    if (!forced) {
      return perf(q.dwarf_user_stacks
                      ? "a profile with \"unwind\": \"dwarf\" (the default): user stacks are unwound from the code's "
                        "unwind tables with each sample's registers and stack copy, on the perf engine"
                      : "a profile: perf callchains record every stack exactly (a bpf stack map can lose stacks to "
                        "hash collisions; \"engine\": \"bpf\" takes them there)");
    }
    // User stacks on the bpf engine come from the kernel's frame-pointer walk
    // (bpf_get_stackid(BPF_F_USER_STACK)); "dwarf" unwinding is the perf engine's.
    if (q.dwarf_user_stacks) {
      const std::string fp =
          "user stacks on the bpf engine are walked by frame pointers (bpf_get_stackid), which stop at the first "
          "function built without them (most of a distribution's binaries)";
      if (q.unwind_given) {
        return refused(InvalidArgument(on_bpf + "\"unwind\": \"dwarf\" runs on the perf engine; " + fp +
                                       "; use \"auto\" or \"perf\" for dwarf, or \"unwind\": \"frame_pointer\""));
      }
      a.warnings.push_back(q.where_metric + ": " + q.name + " on the bpf engine: " + fp +
                           "; \"engine\": \"auto\" unwinds them with the code's unwind tables (dwarf) on the "
                           "perf engine; \"unwind\": \"frame_pointer\" silences this");
    }
    if (q.sums_value) {
      return refused(InvalidArgument(on_bpf +
                                     "a profile that sums a \"value\" field runs on the perf engine in this release; "
                                     "use \"perf\" or \"auto\""));
    }
    // The stack map is preallocated whatever its size (stack_map_alloc): bounded like the other
    // maps.
    const uint64_t bytes = StackMapBytes(q.stack_map_stacks, q.stack_map_frames);
    if (bytes > q.preallocate_max_bytes) {
      return refused(InvalidArgument(on_bpf + "its stack map of " + std::to_string(q.stack_map_stacks) + " stacks of " +
                                     std::to_string(q.stack_map_frames) + " frames preallocates " +
                                     std::to_string(bytes >> 20) + " MiB, over settings.bpf_preallocate_max_bytes (" +
                                     std::to_string(q.preallocate_max_bytes >> 20) +
                                     " MiB): lower settings.max_stacks_per_profile or profile_max_frames, or raise "
                                     "it"));
    }
  }
  if (!forced && q.label_less_counter) {
    return perf("counting mode: the kernel counts a label-less counter exactly, with no samples and no program");
  }
  if (!q.uncounted_skips.empty()) {
    if (!forced) return perf(q.uncounted_skips + "; the perf engine accounts every sample");
    a.warnings.push_back(on_bpf + q.uncounted_skips + ": its counts may fall short");
  }
  if (q.one_process) {
    const std::string pid =
        "\"pid\" (one process) runs on the perf engine: its perf events are opened for that process";
    if (forced) return refused(InvalidArgument(on_bpf + pid + "; use \"auto\" or \"perf\""));
    return perf(pid);
  }
  if (!q.bpf_available && !q.running_on_bpf) {
    if (forced) return refused(PermissionDenied(on_bpf + q.bpf_reason));
    return perf("the bpf engine is not available: " + q.bpf_reason);
  }
  a.bpf = true;
  return a;
}

}  // namespace tpe
