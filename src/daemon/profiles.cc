#include "daemon/profiles.h"

#include <chrono>

#include "profile/render.h"

namespace tpe {

HttpAnswer RenderProfile(const Pipeline& pipeline, const std::string& name, const std::string& format) {
  HttpAnswer a;
  if (!format.empty() && format != "pprof" && format != "folded") {
    a.status = 400;
    a.body = "format=" + format + " is not one of pprof (the default), folded\n";
    return a;
  }
  auto data = pipeline.Profile(name);
  if (!data) {
    std::string names;
    for (const std::string& n : pipeline.ProfileNames()) names += (names.empty() ? "" : ", ") + n;
    a.status = 404;
    a.body = "no profile \"" + name + "\"; the config's profiles: " + (names.empty() ? "none" : names) + "\n";
    return a;
  }
  auto kallsyms = Kallsyms::Read();
  Symbolizer symbolizer("/proc", kallsyms.ok() ? std::move(kallsyms).value() : Kallsyms());
  // A value profile's sums, scaled (pprof values are integers: rounded).
  if (data->scale != 1) {
    for (StackCount& sc : data->stacks)
      sc.value = static_cast<uint64_t>(static_cast<double>(sc.value) * data->scale + 0.5);
  }
  PprofBuilder builder(data->value_type, "count");
  AddStacks(data->stacks, &symbolizer, &builder);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  builder.SetTime(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), 0);
  if (format == "folded") {
    a.body = FoldedStacks(builder.profile());
    return a;
  }
  auto gz = builder.Gzipped();
  if (!gz.ok()) {
    a.status = 500;
    a.body = gz.status().ToString() + "\n";
    return a;
  }
  a.content_type = "application/octet-stream";
  a.body = std::move(gz).value();
  return a;
}

}  // namespace tpe
