// One rendered /metrics page shared by concurrent scrapes (issue 17 item 13: 512 connections
// with 50 pipelined GETs each rendered the page once per request and starved real scrapes).
//
// Get() renders through `render` at most once per window: a request that arrives less than
// `window_ns` after the start of the last render gets that render's page. Renders are
// single-flight: requests arriving while a render is running wait for it and share its page
// (they arrived after it started, so the page is at most `window_ns` older than the request).
// A page is never older than the window, so an exact scrape after a quiet period is fresh.
//
// Thread-safety: Get may be called from any number of threads at once; `render` runs on one of
// them at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace tpe {

class PageCache {
 public:
  using Clock = std::function<uint64_t()>;  // monotonic ns
  static constexpr uint64_t kDefaultWindowNs = 100'000'000;

  // `now_ns` defaults to CLOCK_MONOTONIC (common/clock.h); injectable for tests.
  explicit PageCache(std::function<std::string()> render, uint64_t window_ns = kDefaultWindowNs,
                     Clock now_ns = nullptr);

  // The page: the cached one when it was rendered (started) less than window_ns before this
  // call, else a fresh render. `render` may throw; the exception propagates and nothing is cached.
  std::string Get();
  uint64_t renders() const;

 private:
  const std::function<std::string()> render_;
  const uint64_t window_ns_;
  const Clock now_ns_;
  mutable std::mutex mu_;  // held across a render: single-flight
  std::string page_;       // guarded by mu_
  uint64_t started_ns_ = 0;
  bool valid_ = false;
  uint64_t renders_ = 0;
};

}  // namespace tpe
