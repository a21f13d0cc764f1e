#include "profile/render.h"

#include <algorithm>
#include <limits>

namespace tpe {

void AddStacks(const std::vector<StackCount>& stacks, Symbolizer* symbolizer, PprofBuilder* builder) {
  std::vector<ProfileFrame> frames;
  std::vector<std::pair<std::string, std::string>> labels;
  for (const StackCount& sc : stacks) {
    frames.clear();
    symbolizer->AppendKernel(sc.kernel, builder, &frames);
    if (!sc.kernel_lost.empty()) frames.push_back(ProfileFrame{0, 0, "[kernel stack lost: " + sc.kernel_lost + "]"});
    symbolizer->AppendUser(sc.pid, sc.user, builder, &frames);
    if (!sc.user_lost.empty()) frames.push_back(ProfileFrame{0, 0, "[user stack lost: " + sc.user_lost + "]"});
    labels.assign(sc.labels.begin(), sc.labels.end());
    labels.emplace_back("pid", std::to_string(sc.pid));
    // pprof values are int64: a value profile's sum past INT64_MAX saturates.
    builder->AddSample(frames, labels,
                       static_cast<int64_t>(std::min<uint64_t>(sc.value, std::numeric_limits<int64_t>::max())));
  }
}

}  // namespace tpe
