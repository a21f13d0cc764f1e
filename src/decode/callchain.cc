#include "decode/callchain.h"

#include <linux/perf_event.h>

#include <string>

namespace tpe {
namespace {

constexpr uint64_t Marker(int64_t v) { return static_cast<uint64_t>(v); }

}  // namespace

Status SplitCallchain(std::span<const uint64_t> ips, Callchain* out) {
  out->kernel.clear();
  out->user.clear();
  out->other = 0;
  enum class Part { kNone, kKernel, kUser, kOther } part = Part::kNone;
  for (size_t i = 0; i < ips.size(); ++i) {
    const uint64_t ip = ips[i];
    if (ip >= Marker(PERF_CONTEXT_MAX)) {
      if (ip == Marker(PERF_CONTEXT_KERNEL)) {
        part = Part::kKernel;
      } else if (ip == Marker(PERF_CONTEXT_USER)) {
        part = Part::kUser;
      } else if (ip == Marker(PERF_CONTEXT_HV) || ip == Marker(PERF_CONTEXT_GUEST) ||
                 ip == Marker(PERF_CONTEXT_GUEST_KERNEL) || ip == Marker(PERF_CONTEXT_GUEST_USER)) {
        part = Part::kOther;
      } else {
        return InvalidArgument("callchain entry " + std::to_string(i) + " is an unknown context marker (" +
                               std::to_string(static_cast<int64_t>(ip)) +
                               "); valid: PERF_CONTEXT_KERNEL, _USER, _HV, _GUEST, _GUEST_KERNEL, _GUEST_USER");
      }
      continue;
    }
    switch (part) {
      case Part::kNone:
        return InvalidArgument("callchain entry " + std::to_string(i) +
                               " is a frame before any PERF_CONTEXT_* marker (the kernel writes one first)");
      case Part::kKernel:
        out->kernel.push_back(ip);
        break;
      case Part::kUser:
        out->user.push_back(ip);
        break;
      case Part::kOther:
        ++out->other;
        break;
    }
  }
  return Status::Ok();
}

}  // namespace tpe
