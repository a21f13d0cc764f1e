#include "profile/render.h"

namespace tpe {

void AddStacks(const std::vector<StackCount>& stacks, Symbolizer* symbolizer, PprofBuilder* builder) {
  std::vector<ProfileFrame> frames;
  std::vector<std::pair<std::string, std::string>> labels;
  for (const StackCount& sc : stacks) {
    frames.clear();
    symbolizer->AppendKernel(sc.kernel, builder, &frames);
    symbolizer->AppendUser(sc.pid, sc.user, builder, &frames);
    labels.assign(sc.labels.begin(), sc.labels.end());
    labels.emplace_back("pid", std::to_string(sc.pid));
    builder->AddSample(frames, labels, static_cast<int64_t>(sc.value));
  }
}

}  // namespace tpe
