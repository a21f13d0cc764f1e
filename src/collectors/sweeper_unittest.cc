#include "collectors/sweeper.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tpe {
namespace {

std::vector<Collector*> Ptrs(const std::vector<std::unique_ptr<Collector>>& cs) {
  std::vector<Collector*> out;
  for (const auto& c : cs) out.push_back(c.get());
  return out;
}

class FakeCollector : public Collector {
 public:
  explicit FakeCollector(bool off_reader) : off_reader_(off_reader) {}
  const std::string& name() const override { return name_; }
  void OnSample(size_t, const Sample&, CommTable*) override {}
  MetricSnapshot Snapshot() const override { return {}; }
  bool NeedsComm() const override { return false; }
  void Sweep(uint64_t, uint64_t idle_ns, const TaskExited& exited) override {
    EXPECT_EQ(idle_ns, 7u);
    EXPECT_FALSE(exited(1));
    sweeps.fetch_add(1);
  }
  bool SweepsOffReader() const override { return off_reader_; }
  uint64_t series_dropped() const override { return dropped.load(); }
  void OnCostWindow(bool open) override {
    EXPECT_NE(open, window_open.load()) << "windows alternate: open, close, open, ...";
    window_open = open;
    (open ? opened : closed).fetch_add(1);
  }
  std::atomic<uint64_t> sweeps{0}, dropped{0}, opened{0}, closed{0};
  std::atomic<bool> window_open{false};

 private:
  bool off_reader_;
  std::string name_ = "fake";
};

// Waits (at most 10 s: a bound for a loaded host, not a timing assertion) for `done`.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

// Only collectors whose Sweep does syscalls are swept here (the reader sweeps the others); a full
// map (series_dropped rising) is swept without waiting for the second; Stop joins and no sweep
// runs after it.
TEST(SweeperTest, SweepsOffReaderCollectorsAndStopsCleanly) {
  std::vector<std::unique_ptr<Collector>> cs;
  cs.push_back(std::make_unique<FakeCollector>(true));
  cs.push_back(std::make_unique<FakeCollector>(false));
  cs.push_back(nullptr);  // a slot a reload emptied
  auto* off = static_cast<FakeCollector*>(cs[0].get());
  auto* on = static_cast<FakeCollector*>(cs[1].get());
  Sweeper s;
  s.Start(Ptrs(cs), 7);
  off->dropped = 1;
  EXPECT_TRUE(Eventually([&] { return off->sweeps.load() >= 1; }));
  s.Stop();
  const uint64_t after = off->sweeps.load();
  off->dropped = 2;
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_EQ(off->sweeps.load(), after);
  EXPECT_EQ(on->sweeps.load(), 0u);
  s.Stop();  // idempotent
  // Restart (as after a reload's swap), then destruction stops it.
  s.Start(Ptrs(cs), 7);
  off->dropped = 3;
  EXPECT_TRUE(Eventually([&] { return off->sweeps.load() > after; }));
}

TEST(SweeperTest, NoThreadWithoutSuchCollectors) {
  std::vector<std::unique_ptr<Collector>> cs;
  cs.push_back(std::make_unique<FakeCollector>(false));
  Sweeper s;
  s.Start(Ptrs(cs), 7);
  EXPECT_EQ(s.sweeps(), 0u);
  s.Stop();
}

// Cost windows: the stats handle is held while a window is open, between OnCostWindow(true) (the
// programs' stats read before the handle is taken) and OnCostWindow(false) (read after it is let
// go), windows follow the period, a failing enable_stats is tried once (its window closed at
// once), and Stop lets the handle go.
TEST(SweeperTest, CostWindowsHoldTheStatsHandleAndFollowThePeriod) {
  std::vector<std::unique_ptr<Collector>> cs;
  cs.push_back(std::make_unique<FakeCollector>(true));
  auto* c = static_cast<FakeCollector*>(cs[0].get());
  std::atomic<int> enables{0};
  CostWindows cost;
  cost.period_ns = 300'000'000;
  cost.window_ns = 100'000'000;
  cost.enable_stats = [&]() -> StatusOr<ScopedFd> {
    ++enables;
    return ScopedFd(::dup(0));  // stands for the BPF_ENABLE_STATS fd
  };
  Sweeper s;
  s.Start(Ptrs(cs), 7, cost);
  EXPECT_TRUE(Eventually([&] { return c->closed.load() >= 3; }));
  s.Stop();
  EXPECT_EQ(static_cast<uint64_t>(enables.load()), c->opened.load());  // a window per handle
  EXPECT_LE(c->opened.load() - c->closed.load(), 1u);                  // at most one cut by Stop

  // enable_stats fails (no CAP_SYS_ADMIN): one try, no window, sweeps go on.
  cs[0] = std::make_unique<FakeCollector>(true);
  auto* d = static_cast<FakeCollector*>(cs[0].get());
  const uint64_t opened = d->opened.load();
  std::atomic<int> tries{0};
  cost.enable_stats = [&]() -> StatusOr<ScopedFd> {
    ++tries;
    return PermissionDenied("BPF_ENABLE_STATS: Operation not permitted");
  };
  Sweeper f;
  f.Start(Ptrs(cs), 7, cost);
  d->dropped = 5;
  EXPECT_TRUE(Eventually([&] { return d->sweeps.load() >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // two periods
  f.Stop();
  EXPECT_EQ(tries.load(), 1);
  EXPECT_EQ(d->opened.load(), opened + 1);  // the window opened for the try, and closed
  EXPECT_EQ(d->closed.load(), d->opened.load());
}

}  // namespace
}  // namespace tpe
