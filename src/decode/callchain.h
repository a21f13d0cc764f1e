// A PERF_SAMPLE_CALLCHAIN, split into the kernel's and the user's frames.
//
// Source: perf_event_open(2) "PERF_SAMPLE_CALLCHAIN" and include/uapi/linux/perf_event.h
// `enum perf_callchain_context`. The kernel writes { u64 nr; u64 ips[nr]; } where ips holds
// instruction pointers, leaf first, interleaved with context markers: values at or above
// PERF_CONTEXT_MAX ((u64)-4095) that say whose frames follow (PERF_CONTEXT_KERNEL,
// PERF_CONTEXT_USER; PERF_CONTEXT_HV and the guest contexts for hypervisor and guest frames). A
// chain with exclude_callchain_kernel or _user set simply lacks that part.
//
// Pure and static; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace tpe {

struct Callchain {
  std::vector<uint64_t> kernel;  // kernel instruction pointers, leaf (innermost) first
  std::vector<uint64_t> user;    // user instruction pointers, leaf first; user[0] is the exact pc
  uint32_t other = 0;            // hypervisor and guest frames: not kept, counted
};

// Splits `ips` (the callchain's ips[nr], markers included) into `out` (cleared first).
// Returns InvalidArgument if a frame comes before any context marker (the kernel always writes
// one first: a corrupt record) or a marker is unknown; `out` then holds what preceded the fault.
Status SplitCallchain(std::span<const uint64_t> ips, Callchain* out);

}  // namespace tpe
