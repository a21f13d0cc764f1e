#include "exporter/page_cache.h"

#include "common/clock.h"

namespace tpe {

PageCache::PageCache(std::function<std::string()> render, uint64_t window_ns, Clock now_ns)
    : render_(std::move(render)), window_ns_(window_ns), now_ns_(now_ns ? std::move(now_ns) : Clock(MonotonicNs)) {}

std::string PageCache::Get() {
  const uint64_t arrived = now_ns_();
  std::lock_guard<std::mutex> lock(mu_);
  // A render that started after this request arrived (while it waited for the lock) is fresh
  // enough too.
  if (valid_ && (started_ns_ >= arrived || arrived - started_ns_ < window_ns_)) return page_;
  const uint64_t started = now_ns_();
  valid_ = false;
  page_ = render_();
  started_ns_ = started;
  valid_ = true;
  ++renders_;
  return page_;
}

uint64_t PageCache::renders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return renders_;
}

}  // namespace tpe
