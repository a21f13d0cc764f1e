// The one clock of the pipeline: CLOCK_MONOTONIC in nanoseconds, the clock perf events are
// opened with (use_clockid), so sample timestamps and these readings compare directly.
// Source: clock_gettime(2). Thread-safe.
#pragma once

#include <cstdint>
#include <ctime>

namespace tpe {

inline uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace tpe
