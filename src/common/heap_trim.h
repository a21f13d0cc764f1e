// Giving the heap's free memory back to the kernel after large, short-lived work (a render),
// at most once per interval: malloc_trim(3) walks every arena and madvise(2)s their free pages
// away, which costs a TLB flush on every CPU and page faults when the next render allocates
// again — per render, that was 10 % of a profile render's CPU time.
//
// Thread-safety: from any thread (one caller trims; the others within the interval return).
#pragma once

#include <cstdint>

namespace tpe {

// Trims (glibc's malloc_trim(0)) unless a trim ran less than `interval_ns` ago (CLOCK_MONOTONIC).
// Returns whether it trimmed.
bool TrimHeapAtMostEvery(uint64_t interval_ns);

// The interval the daemon's renders use: 30 seconds.
inline constexpr uint64_t kHeapTrimIntervalNs = uint64_t{30} * 1000000000;

}  // namespace tpe
