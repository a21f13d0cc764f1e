#include "exporter/delayed_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace tpe {
namespace {

using std::chrono::milliseconds;

TEST(DelayedRunnerTest, RunsInDeadlineOrderAndCancelsTheRestAtStop) {
  DelayedRunner runner(3);
  std::mutex mu;
  std::vector<std::string> log;
  auto note = [&](std::string s) {
    std::lock_guard<std::mutex> lock(mu);
    log.push_back(std::move(s));
  };
  const auto now = DelayedRunner::Clock::now();
  ASSERT_TRUE(runner.Submit(
      now + milliseconds(200), [&] { note("run b"); }, [&] { note("cancel b"); }));
  ASSERT_TRUE(runner.Submit(
      now + milliseconds(50), [&] { note("run a"); }, [&] { note("cancel a"); }));
  ASSERT_TRUE(runner.Submit(
      now + std::chrono::hours(1), [&] { note("run c"); }, [&] { note("cancel c"); }));
  EXPECT_FALSE(runner.Submit(
      now, [&] { note("run d"); }, [&] { note("cancel d"); }))
      << "over capacity";
  for (int i = 0; i < 200 && runner.waiting() > 1; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(runner.waiting(), 1u);
  runner.Stop();
  EXPECT_FALSE(runner.Submit(
      now, [&] { note("run e"); }, [&] { note("cancel e"); }))
      << "stopped";
  runner.Stop();  // idempotent
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(log, (std::vector<std::string>{"run a", "run b", "cancel c"}));
}

TEST(DelayedRunnerTest, ASoonerJobOvertakesOneWaitingLonger) {
  DelayedRunner runner(4);
  std::atomic<int> order{0}, long_at{0}, short_at{0};
  const auto now = DelayedRunner::Clock::now();
  ASSERT_TRUE(runner.Submit(
      now + milliseconds(400), [&] { long_at = ++order; }, nullptr));
  ASSERT_TRUE(runner.Submit(
      now, [&] { short_at = ++order; }, nullptr));
  for (int i = 0; i < 300 && order < 2; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(short_at.load(), 1);
  EXPECT_EQ(long_at.load(), 2);
}

}  // namespace
}  // namespace tpe
