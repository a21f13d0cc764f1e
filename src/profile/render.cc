#include "profile/render.h"

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
    builder->AddSample(frames, labels, static_cast<int64_t>(sc.value));
  }
}

}  // namespace tpe
