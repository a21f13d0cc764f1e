#include "exporter/page_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tpe {
namespace {

RenderedPage Text(const std::string& s) { return RenderedPage::FromText(s); }

TEST(PageCacheTest, ReusesAPageWithinTheWindowOnly) {
  uint64_t now = 1'000'000'000;
  int n = 0;
  PageCache cache([&] { return Text("page " + std::to_string(++n)); }, 100'000'000, [&] { return now; });
  EXPECT_EQ(cache.Get()->text(), "page 1");
  now += 99'999'999;
  EXPECT_EQ(cache.Get()->text(), "page 1");  // 50 pipelined GETs inside the window: one render
  now += 1;
  EXPECT_EQ(cache.Get()->text(), "page 2");  // the window is counted from the render's start
  now += 10'000'000'000;
  EXPECT_EQ(cache.Get()->text(), "page 3");  // after a quiet period: fresh
  EXPECT_EQ(cache.renders(), 3u);
}

TEST(PageCacheTest, ThrowingRenderCachesNothing) {
  uint64_t now = 5;
  bool fail = true;
  PageCache cache(
      [&] {
        if (fail) throw std::runtime_error("x");
        return Text("ok");
      },
      100, [&] { return now; });
  EXPECT_THROW(cache.Get(), std::runtime_error);
  fail = false;
  EXPECT_EQ(cache.Get()->text(), "ok");
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
        return Text("page " + std::to_string(++renders));
      },
      100'000'000,
      [&] {
        arrived.fetch_add(1);  // the first clock read of each Get (later ones are renders')
        cv.notify_all();
        return uint64_t{42};
      });
  std::vector<std::thread> threads;
  std::vector<PageCache::Page> pages(kThreads);
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { pages[i] = cache.Get(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.renders(), 1u);
  for (const auto& p : pages) {
    EXPECT_EQ(p->text(), "page 1");
    EXPECT_EQ(p.get(), pages[0].get()) << "one buffer for every request, not a copy each";
  }
  EXPECT_EQ(cache.pages_alive(), 1u);
}

// The pages alive (held by responses still being sent, plus the cache's) are bounded: 16 concurrent
// scrapes of a 10 MB page, each with its own copy, held 650 MB of RSS. With max_pages 2: while
// responses hold two pages, a request past the window gets the newest page instead of a third
// render; once one is released, a render is due again.
TEST(PageCacheTest, AtMostMaxPagesAreAlive) {
  uint64_t now = 1'000'000'000;
  int n = 0;
  PageCache cache([&] { return Text("page " + std::to_string(++n)); }, 100, [&] { return now; }, 2);
  PageCache::Page slow1 = cache.Get();  // "page 1", still being sent
  now += 100;
  PageCache::Page slow2 = cache.Get();  // "page 2"
  EXPECT_EQ(slow2->text(), "page 2");
  EXPECT_EQ(cache.pages_alive(), 2u);
  now += 100;
  PageCache::Page p = cache.Get();
  EXPECT_EQ(p.get(), slow2.get()) << "a third page would exceed the bound: the newest one is served";
  EXPECT_EQ(cache.stale_serves(), 1u);
  EXPECT_EQ(cache.pages_alive(), 2u);
  slow1.reset();  // page 1's response is done
  EXPECT_EQ(cache.pages_alive(), 1u);
  EXPECT_EQ(cache.Get()->text(), "page 3");
  EXPECT_EQ(cache.renders(), 3u);
  EXPECT_EQ(cache.stale_serves(), 1u);
  EXPECT_EQ(cache.pages_alive(), 2u);  // pages 2 (still held) and 3
}

// Two formats' caches sharing one bound (PageCacheShare), max_pages 2: pages held by responses
// of either format count against both; a cache past its window serves its newest page instead
// of a third.
TEST(PageCacheTest, SharedCachesShareTheBound) {
  uint64_t now = 1'000'000'000;
  int n = 0;
  auto share = std::make_shared<PageCacheShare>();
  PageCache text([&] { return Text("text " + std::to_string(++n)); }, 100, [&] { return now; }, 2, share);
  PageCache proto([&] { return Text("proto " + std::to_string(++n)); }, 100, [&] { return now; }, 2, share);
  PageCache::Page t1 = text.Get();   // "text 1", still being sent
  PageCache::Page p2 = proto.Get();  // "proto 2", still being sent
  EXPECT_EQ(text.pages_alive(), 2u);
  EXPECT_EQ(proto.pages_alive(), 2u);
  now += 100;
  EXPECT_EQ(text.Get().get(), t1.get()) << "a third page (of either format) would exceed the bound";
  EXPECT_EQ(proto.Get().get(), p2.get());
  EXPECT_EQ(text.stale_serves() + proto.stale_serves(), 2u);
  p2.reset();  // proto's response is done; proto's cache still holds its page: t1 + proto 2
  EXPECT_EQ(text.Get().get(), t1.get()) << "the other cache's page counts too";
  t1.reset();  // text's response is done: the text cache lets go of t1 and renders
  EXPECT_EQ(text.Get()->text(), "text 3");
  EXPECT_EQ(text.pages_alive(), 2u);  // proto 2 (cached) and text 3
}

// The cache lets go of its page before rendering the next: a page no response holds is freed
// before the render instead of after it, so the render fits in the bound (max_pages 1: the one
// page alive is replaced), and a render never waits for a page only the cache holds.
TEST(PageCacheTest, TheCachedPageIsFreedBeforeTheNextRender) {
  uint64_t now = 1'000'000'000;
  int n = 0;
  size_t alive_during_render = 0;
  PageCache* self = nullptr;
  PageCache cache(
      [&] {
        alive_during_render = self->pages_alive();
        return Text("page " + std::to_string(++n));
      },
      100, [&] { return now; }, 1);
  self = &cache;
  EXPECT_EQ(cache.Get()->text(), "page 1");
  now += 100;
  EXPECT_EQ(cache.Get()->text(), "page 2");
  EXPECT_EQ(alive_during_render, 1u) << "page 1 must be gone while page 2 renders";
  EXPECT_EQ(cache.stale_serves(), 0u);
}

// A throwing render returns its slot: the bound still lets the next render run, and a page
// that a response still holds is served (not fresh) meanwhile instead of nothing.
TEST(PageCacheTest, ThrowingRenderReturnsItsSlot) {
  uint64_t now = 1'000'000'000;
  bool fail = false;
  int n = 0;
  PageCache cache(
      [&] {
        if (fail) throw std::runtime_error("x");
        return Text("page " + std::to_string(++n));
      },
      100, [&] { return now; }, 1);
  PageCache::Page held = cache.Get();  // "page 1", still being sent
  now += 100;
  EXPECT_EQ(cache.Get().get(), held.get());  // at the bound: page 1 again
  held.reset();
  fail = true;
  EXPECT_THROW(cache.Get(), std::runtime_error);  // page 1 was only the cache's: freed, then the render failed
  EXPECT_EQ(cache.pages_alive(), 0u);
  fail = false;
  EXPECT_EQ(cache.Get()->text(), "page 2");
  EXPECT_EQ(cache.pages_alive(), 1u);
}

// A page outlives its cache (a response may still be sent while the server stops).
TEST(PageCacheTest, PageOutlivesTheCache) {
  PageCache::Page page;
  {
    PageCache cache([] { return Text("last"); });
    page = cache.Get();
  }
  EXPECT_EQ(page->text(), "last");
}

}  // namespace
}  // namespace tpe
