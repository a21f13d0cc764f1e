// One rendered /metrics page shared by concurrent scrapes (512 connections with 50 pipelined
// GETs each rendered the page once per request and starved real scrapes; 16 concurrent scrapes
// of a 10 MB page each got a copy of it, 650 MB of RSS).
//
// Get() renders through `render` at most once per window: a request that arrives less than
// `window_ns` after the start of the last render gets that render's page. Renders are
// single-flight: requests arriving while a render is running wait for it and share its page
// (they arrived after it started, so the page is at most `window_ns` older than the request).
// A page is never older than the window, so an exact scrape after a quiet period is fresh —
// except under the memory bound below.
//
// Memory: a page is an immutable shared buffer (RenderedPage: a memory mapping of its own);
// every response holds a reference to it, never a copy, and it is unmapped when the cache and
// the last response using it let go. At most
// `max_pages` pages are alive at once, counting the one being rendered: when a new render is
// due but `max_pages` pages are still referenced (older pages still being sent to slow
// clients), the request gets the newest page, older than the window, instead (counted by
// stale_serves()); a render starts again once a response using an older page is done (the HTTP
// server's request deadline bounds how long that takes). Before a render the cache drops its
// own reference to the previous page, so that page is freed at once when no response uses it.
// So scrapes hold at most `max_pages` pages plus one render's working memory, whatever the
// number of scrapers.
//
// Thread-safety: Get may be called from any number of threads at once; `render` runs on one of
// them at a time. A Page may be used and released on any thread, also after the cache is gone.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "exporter/rendered_page.h"

namespace tpe {

// What the caches of one endpoint's formats (text, protobuf) share: the pages alive in all of
// them count against each one's `max_pages`, and one render runs at a time across them, so the
// memory bound above holds for the endpoint, not per format — plus one page for a format's first
// render (a cache with no page yet renders whatever the others hold).
struct PageCacheShare {
  std::shared_ptr<std::atomic<size_t>> alive = std::make_shared<std::atomic<size_t>>(0);
  std::mutex render_mu;  // taken inside a cache's own mutex, always in that order
};

class PageCache {
 public:
  using Page = std::shared_ptr<const RenderedPage>;
  using Clock = std::function<uint64_t()>;  // monotonic ns
  static constexpr uint64_t kDefaultWindowNs = 100'000'000;
  static constexpr size_t kDefaultMaxPages = 3;

  // `now_ns` defaults to CLOCK_MONOTONIC (common/clock.h); injectable for tests. `max_pages`
  // is at least 1 (0 is taken as 1). `share` (optional): the bound and the render lock shared
  // with other caches (PageCacheShare).
  explicit PageCache(std::function<RenderedPage()> render, uint64_t window_ns = kDefaultWindowNs,
                     Clock now_ns = nullptr, size_t max_pages = kDefaultMaxPages,
                     std::shared_ptr<PageCacheShare> share = nullptr);

  // The page (never null): the cached one when it was rendered (started) less than window_ns
  // before this call, or when `max_pages` pages are alive; else a fresh render. `render` may
  // throw; the exception propagates and nothing new is cached.
  Page Get();
  // Renders completed so far.
  uint64_t renders() const;
  // Requests served a page older than the window because `max_pages` pages were alive.
  uint64_t stale_serves() const;
  // Pages alive now (referenced by the cache or by a caller of Get), plus a render in progress
  // (with a share: of every cache sharing it).
  size_t pages_alive() const;

 private:
  const std::function<RenderedPage()> render_;
  const uint64_t window_ns_;
  const Clock now_ns_;
  const size_t max_pages_;
  const std::shared_ptr<PageCacheShare> share_;  // null: none
  // Decremented by each page's deleter, which may run after the cache is destroyed.
  const std::shared_ptr<std::atomic<size_t>> alive_;
  mutable std::mutex mu_;  // held across a render: single-flight
  Page page_;              // guarded by mu_; null before the first render
  uint64_t started_ns_ = 0;
  uint64_t renders_ = 0;
  uint64_t stale_serves_ = 0;
};

}  // namespace tpe
