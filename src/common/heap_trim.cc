#include "common/heap_trim.h"

#include <malloc.h>

#include <atomic>

#include "common/clock.h"

namespace tpe {

bool TrimHeapAtMostEvery(uint64_t interval_ns) {
  static std::atomic<uint64_t> last_ns{0};
  const uint64_t now = MonotonicNs();
  uint64_t last = last_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < interval_ns) return false;
  if (!last_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return false;
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
  return true;
}

}  // namespace tpe
