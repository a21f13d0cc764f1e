// Where a stripped binary's names and debug info were looked for, and what each source gave:
// tracepoint_exporter_profile_debuginfo_total{source,result}. Every lookup of a source for a file
// is counted once (per renderer cache life of that file, not per render or per frame).
//
// Thread-safety: every method, from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/metric_desc.h"
#include "common/status.h"

namespace tpe::symbols {

// The sources, in the order they are tried (gdb's, perf's and elfutils' order): the file's own
// .symtab is not one (it is used first when present).
enum class DebugSource : uint8_t {
  kBuildIdDir,  // /usr/lib/debug/.build-id/xx/yyyy.debug (Debian's -dbgsym packages)
  kDebugLink,   // .gnu_debuglink: beside the file, in its .debug/, under /usr/lib/debug/DIR
  kDebugData,   // .gnu_debugdata: MiniDebugInfo, an xz-compressed ELF inside the file
  kDebuginfod,  // a debuginfod server (DEBUGINFOD_URLS, settings.debuginfod_urls)
};
inline constexpr size_t kDebugSources = 4;

enum class DebugResult : uint8_t {
  kFound,            // a debug file that belongs to the binary: used
  kMissing,          // none there (or the server has none: 404)
  kBuildIdMismatch,  // a debug file whose build id is not the binary's: refused
  kCrcMismatch,      // a .gnu_debuglink candidate whose CRC-32 is not the one the link names: refused
  kInvalid,          // not a readable ELF file, or MiniDebugInfo that does not decompress: refused
  kRefused,          // a file other users control, refused as untrusted (common/untrusted_file.h)
  kPending,          // debuginfod: fetch in progress when a render needed it (named on a later render)
  kFailed,           // debuginfod: the fetch failed (timeout, connection, server error)
};
inline constexpr size_t kDebugResults = 8;

// Label values: "build_id_dir", "debuglink", "debugdata", "debuginfod".
const char* DebugSourceName(DebugSource source);
// Label values: "found", "missing", "build_id_mismatch", "crc_mismatch", "invalid", "refused",
// "pending", "failed".
const char* DebugResultName(DebugResult result);

class DebugInfoCounts {
 public:
  // Counts one lookup; the first refusal or failure of each (source, result) is logged (warn)
  // with `why` (naming the file), later ones only counted.
  void Add(DebugSource source, DebugResult result, const std::string& why = "");
  uint64_t Get(DebugSource source, DebugResult result) const {
    return counts_[Index(source, result)].load(std::memory_order_relaxed);
  }

 private:
  static size_t Index(DebugSource s, DebugResult r) {
    return static_cast<size_t>(s) * kDebugResults + static_cast<size_t>(r);
  }
  std::array<std::atomic<uint64_t>, kDebugSources * kDebugResults> counts_{};
  std::array<std::atomic<bool>, kDebugSources * kDebugResults> logged_{};
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kProfileDebuginfoTotalDesc{
    "tracepoint_exporter_profile_debuginfo_total",
    "Lookups of stripped binaries' debug information by source (build_id_dir, debuglink, "
    "debugdata, debuginfod) and result: found, missing, build_id_mismatch (refused), "
    "crc_mismatch (refused), invalid (not ELF, corrupt), refused (untrusted file), pending "
    "(a debuginfod fetch still running: named by a later render), failed (debuginfod: "
    "timeout, connection, server error). One per binary and source while it is cached.",
    MetricKind::kCounter};

}  // namespace tpe::symbols
