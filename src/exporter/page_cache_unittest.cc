#include "exporter/page_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <thread>
#include <vector>

namespace tpe {
namespace {

TEST(PageCacheTest, ReusesAPageWithinTheWindowOnly) {
  uint64_t now = 1'000'000'000;
  int n = 0;
  PageCache cache([&] { return "page " + std::to_string(++n); }, 100'000'000, [&] { return now; });
  EXPECT_EQ(cache.Get(), "page 1");
  now += 99'999'999;
  EXPECT_EQ(cache.Get(), "page 1");  // 50 pipelined GETs inside the window: one render
  now += 1;
  EXPECT_EQ(cache.Get(), "page 2");  // the window is counted from the render's start
  now += 10'000'000'000;
  EXPECT_EQ(cache.Get(), "page 3");  // after a quiet period: fresh
  EXPECT_EQ(cache.renders(), 3u);
}

TEST(PageCacheTest, ThrowingRenderCachesNothing) {
  uint64_t now = 5;
  bool fail = true;
  PageCache cache(
      [&]() -> std::string {
        if (fail) throw std::runtime_error("x");
        return "ok";
      },
      100, [&] { return now; });
  EXPECT_THROW(cache.Get(), std::runtime_error);
  fail = false;
  EXPECT_EQ(cache.Get(), "ok");
}

// Single flight: requests that arrive while a render runs wait for it and share its page. The
// render blocks until all 16 requests have read the clock on arrival (before the lock), so
// each of them arrived before the render finished; the clock stands still.
TEST(PageCacheTest, ConcurrentRequestsShareOneRender) {
  constexpr int kThreads = 16;
  std::atomic<int> arrived{0};
  std::mutex mu;
  std::condition_variable cv;
  int renders = 0;
  PageCache cache(
      [&] {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return arrived.load() >= kThreads + 1; });  // + the render's own start
        return "page " + std::to_string(++renders);
      },
      100'000'000,
      [&] {
        arrived.fetch_add(1);  // the first clock read of each Get (later ones are renders')
        cv.notify_all();
        return uint64_t{42};
      });
  std::vector<std::thread> threads;
  std::vector<std::string> pages(kThreads);
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { pages[i] = cache.Get(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.renders(), 1u);
  for (const auto& p : pages) EXPECT_EQ(p, "page 1");
}

}  // namespace
}  // namespace tpe
