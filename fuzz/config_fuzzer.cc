// Fuzzes ParseConfig (src/config/config.h): any text must give a Config or an error Status that
// names the file, never an exception or a crash.
//
// Known and being fixed in config.cc (not here): nlohmann::json throws out_of_range 406 "number
// overflow" for numbers like 1e400, and ParseConfig lets it escape (reproducer:
// fuzz/regressions/config_fuzzer/number_overflow_1e400.json). Until that fix lands the target
// ignores that one exception so it can look for others; TPE_FUZZ_STRICT=1 turns it back into a
// crash (fuzz/run.sh does so for the regression files).
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include "config/config.h"
#include "fuzz/fuzz_util.h"

using namespace tpe;

namespace {
bool Strict() {
  static const bool strict = [] {
    const char* s = std::getenv("TPE_FUZZ_STRICT");
    return s != nullptr && std::string(s) == "1";
  }();
  return strict;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    StatusOr<Config> c = ParseConfig(text, "fuzz.json");
    if (!c.ok()) {
      TPE_FUZZ_CHECK(c.status().message().starts_with("fuzz.json"), "error does not name the file: %s",
                     c.status().message().c_str());
      return 0;
    }
    TPE_FUZZ_CHECK(!c->metrics.empty(), "a config without metrics parsed");
    for (const MetricConfig& m : c->metrics) {
      TPE_FUZZ_CHECK(IsValidMetricName(m.name), "invalid metric name accepted: %s", m.name.c_str());
      for (const LabelConfig& l : m.labels) {
        TPE_FUZZ_CHECK(IsValidLabelName(l.name), "invalid label name accepted: %s", l.name.c_str());
      }
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (!Strict() && what.find("number overflow") != std::string::npos) return 0;  // known, see above
    TPE_FUZZ_CHECK(false, "ParseConfig threw: %s", what.c_str());
  }
  return 0;
}
