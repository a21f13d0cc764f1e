#include "exporter/page_cache.h"

#include <algorithm>
#include <utility>

#include "common/clock.h"

namespace tpe {

PageCache::PageCache(std::function<RenderedPage()> render, uint64_t window_ns, Clock now_ns, size_t max_pages,
                     std::shared_ptr<PageCacheShare> share)
    : render_(std::move(render)),
      window_ns_(window_ns),
      now_ns_(now_ns ? std::move(now_ns) : Clock(MonotonicNs)),
      max_pages_(std::max<size_t>(1, max_pages)),
      share_(std::move(share)),
      alive_(share_ ? share_->alive : std::make_shared<std::atomic<size_t>>(0)) {}

PageCache::Page PageCache::Get() {
  const uint64_t arrived = now_ns_();
  std::lock_guard<std::mutex> lock(mu_);
  // A render that started after this request arrived (while it waited for the lock) is fresh
  // enough too.
  if (page_ && (started_ns_ >= arrived || arrived - started_ns_ < window_ns_)) return page_;
  if (page_) {
    // The pages that stay alive if the cache lets go of its own: the cached page is freed with
    // it when no response holds it (copies of page_ are made under mu_ only, so a use count of 1
    // cannot grow meanwhile; a response releasing a page only makes this count conservative).
    const size_t held = alive_->load() - (page_.use_count() == 1 ? 1 : 0);
    if (held >= max_pages_) {
      ++stale_serves_;
      return page_;
    }
  }
  std::unique_lock<std::mutex> render_lock;
  if (share_) render_lock = std::unique_lock<std::mutex>(share_->render_mu);
  std::weak_ptr<const RenderedPage> previous = page_;
  page_.reset();         // freed now unless a response still sends it
  alive_->fetch_add(1);  // this render's slot, handed to its page
  const uint64_t started = now_ns_();
  std::unique_ptr<RenderedPage> text;
  try {
    text = std::make_unique<RenderedPage>(render_());
  } catch (...) {
    alive_->fetch_sub(1);
    page_ = previous.lock();  // still sent to someone: served again under the bound, never fresh
    throw;
  }
  // Should the control block's allocation fail, shared_ptr runs the deleter: the slot is returned.
  page_ = Page(text.release(), [alive = alive_](const RenderedPage* p) {
    delete p;
    alive->fetch_sub(1);
  });
  started_ns_ = started;
  ++renders_;
  return page_;
}

uint64_t PageCache::renders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return renders_;
}

uint64_t PageCache::stale_serves() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stale_serves_;
}

size_t PageCache::pages_alive() const { return alive_->load(); }

}  // namespace tpe
