#include "profile/renderer.h"

#include <algorithm>
#include <limits>

#include "common/clock.h"

namespace tpe {

void AddStacks(const std::vector<StackCount>& stacks, Symbolizer* symbolizer, PprofBuilder* builder) {
  std::vector<ProfileFrame> frames;
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<UserFrame> unknown;
  for (const StackCount& sc : stacks) {
    frames.clear();
    symbolizer->AppendKernel(sc.kernel, builder, &frames);
    if (!sc.kernel_lost.empty()) frames.push_back(ProfileFrame{0, 0, "[kernel stack lost: " + sc.kernel_lost + "]"});
    if (sc.user_frames.empty() && !sc.user.empty()) {
      unknown.assign(sc.user.size(), UserFrame{});
      symbolizer->AppendUser(unknown, builder, &frames);
    } else {
      symbolizer->AppendUser(sc.user_frames, builder, &frames);
    }
    if (!sc.user_lost.empty()) frames.push_back(ProfileFrame{0, 0, "[user stack lost: " + sc.user_lost + "]"});
    labels.assign(sc.labels.begin(), sc.labels.end());
    labels.emplace_back("pid", std::to_string(sc.pid));
    // pprof values are int64: a value profile's sum past INT64_MAX saturates.
    builder->AddSample(frames, labels,
                       static_cast<int64_t>(std::min<uint64_t>(sc.value, std::numeric_limits<int64_t>::max())));
  }
}

ProfileRenderer::ProfileRenderer(ProcessImages* images, const MappedFiles* files, Options options)
    : images_(images),
      files_(files),
      options_(std::move(options)),
      kallsyms_(options_.kallsyms_path),
      elf_files_(options_.elf_cache),
      perf_maps_(options_.proc_root) {}

ProfileRenderer::Rendered ProfileRenderer::Render(std::vector<StackCount> stacks, const std::string& value_type,
                                                  const std::string& value_unit, double scale, int64_t time_ns,
                                                  int64_t duration_ns) {
  const uint64_t now = MonotonicNs();
  // The bpf engine's user stacks are raw addresses: named with the image their process had
  // when they were counted.
  if (images_ != nullptr) {
    for (StackCount& sc : stacks) {
      if (!sc.user_frames.empty() || sc.user.empty()) continue;
      images_->NormalizeAt(sc.pid, sc.image_ns, sc.user, now, &sc.user_frames);
    }
  }
  // A value profile's sums, scaled (pprof values are integers: rounded).
  if (scale != 1) {
    for (StackCount& sc : stacks) {
      const double v = static_cast<double>(sc.value) * scale + 0.5;
      sc.value = v >= 18446744073709551615.0 ? ~0ull : static_cast<uint64_t>(v);
    }
  }
  Rendered out;
  out.builder = std::make_unique<PprofBuilder>(value_type, value_unit);
  {
    Symbolizer symbolizer(files_, kallsyms_.Get(now), {&elf_files_, &perf_maps_, &elf_refusals_}, options_.proc_root);
    AddStacks(stacks, &symbolizer, out.builder.get());
    if (!symbolizer.kernel_misses().empty()) kallsyms_.MarkMissed(symbolizer.kernel_misses());
    out.stats = symbolizer.stats();
  }
  out.builder->SetTime(time_ns, duration_ns);
  return out;
}

}  // namespace tpe
