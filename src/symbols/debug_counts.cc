#include "symbols/debug_counts.h"

#include "common/log.h"

namespace tpe::symbols {

const char* DebugSourceName(DebugSource source) {
  switch (source) {
    case DebugSource::kBuildIdDir:
      return "build_id_dir";
    case DebugSource::kDebugLink:
      return "debuglink";
    case DebugSource::kDebugData:
      return "debugdata";
    case DebugSource::kDebuginfod:
      return "debuginfod";
  }
  return "";
}

const char* DebugResultName(DebugResult result) {
  switch (result) {
    case DebugResult::kFound:
      return "found";
    case DebugResult::kMissing:
      return "missing";
    case DebugResult::kBuildIdMismatch:
      return "build_id_mismatch";
    case DebugResult::kCrcMismatch:
      return "crc_mismatch";
    case DebugResult::kInvalid:
      return "invalid";
    case DebugResult::kRefused:
      return "refused";
    case DebugResult::kPending:
      return "pending";
    case DebugResult::kFailed:
      return "failed";
  }
  return "";
}

void DebugInfoCounts::Add(DebugSource source, DebugResult result, const std::string& why) {
  const size_t i = Index(source, result);
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  if (result == DebugResult::kFound || result == DebugResult::kMissing || result == DebugResult::kPending) return;
  if (!logged_[i].exchange(true)) {
    TPE_LOG_WARN(
        "debug info ({}): {} — {} (later ones are only counted in "
        "tracepoint_exporter_profile_debuginfo_total{{source=\"{}\",result=\"{}\"}})",
        DebugSourceName(source), DebugResultName(result), why, DebugSourceName(source), DebugResultName(result));
  }
}

}  // namespace tpe::symbols
