#include "bpf/program_cost.h"

#include <gtest/gtest.h>

namespace tpe::bpf {
namespace {

// Runs are priced at the ns per run the windows measured; the estimate never decreases, and is
// absent until a window has measured something.
TEST(ProgramCostTest, PricesRunsAtTheWindowsPrice) {
  ProgramCost c;
  EXPECT_FALSE(c.Seconds(100).has_value());
  c.BeginWindow(1'000, 10);
  c.EndWindow(1'000, 10);  // no run in the window: nothing measured
  EXPECT_FALSE(c.ns_per_run().has_value());
  c.BeginWindow(1'000, 10);
  c.EndWindow(1'000 + 50 * 1'000'000, 10 + 1'000'000);  // 50 ns per run
  ASSERT_TRUE(c.ns_per_run().has_value());
  EXPECT_DOUBLE_EQ(*c.ns_per_run(), 50);
  // 2,000,000 runs so far (those before the window included) at 50 ns: 0.1 s.
  EXPECT_DOUBLE_EQ(*c.Seconds(2'000'000), 0.1);
  c.BeginWindow(0, 0);
  c.EndWindow(25 * 1'000'000, 1'000'000);                        // a window as busy at 25 ns per run:
  const double price = (50e6 * 0.5 + 25e6) / (1e6 * 0.5 + 1e6);  // the older one weighs half
  EXPECT_DOUBLE_EQ(*c.ns_per_run(), price);
  EXPECT_DOUBLE_EQ(*c.Seconds(2'000'000), 0.1);  // no new run: unchanged
  EXPECT_DOUBLE_EQ(*c.Seconds(4'000'000), 0.1 + 2e6 * price * 1e-9);
  EXPECT_DOUBLE_EQ(*c.Seconds(3'000'000), 0.1 + 2e6 * price * 1e-9);  // a lower count never lowers it
  c.EndWindow(1'000'000, 1'000'000);                                  // an end without a begin is ignored
  EXPECT_DOUBLE_EQ(*c.ns_per_run(), price);
}

// A window that timed one cold run (a cache-cold first run: 40 us) used to set the
// price of every run; weighed by runs it moves the price by a hair.
TEST(ProgramCostTest, OneColdRunDoesNotSetThePrice) {
  ProgramCost c;
  c.BeginWindow(0, 0);
  c.EndWindow(50 * 1'000'000, 1'000'000);  // 50 ns per run
  c.BeginWindow(50'000'000, 1'000'000);
  c.EndWindow(50'000'000 + 40'000, 1'000'001);  // one run of 40 us
  ASSERT_TRUE(c.ns_per_run().has_value());
  EXPECT_LT(*c.ns_per_run(), 50 * 1.1);
}

// The kernel's run_time_ns grows during the exporter's own windows (BPF_ENABLE_STATS
// turns on the switch the sysctl turns on); run_seconds_total is what the sysctl alone timed.
TEST(ProgramCostTest, RunTimeLeavesOutTheWindowsOwnTime) {
  ProgramCost c;
  EXPECT_EQ(c.RunTimeNs(0), 0u);
  c.BeginWindow(0, 0, /*sysctl_on=*/false);
  EXPECT_EQ(c.RunTimeNs(7'000), 0u);  // during a window: its start's value
  c.EndWindow(10'000, 100, false);
  EXPECT_EQ(c.RunTimeNs(10'000), 0u);  // all ours
  // The sysctl turned on for a while: 5,000 ns timed by it.
  EXPECT_EQ(c.RunTimeNs(15'000), 5'000u);
  // A window while the sysctl is on: that time would have been timed anyway.
  c.BeginWindow(15'000, 200, true);
  c.EndWindow(18'000, 300, true);
  EXPECT_EQ(c.RunTimeNs(18'000), 8'000u);
  // Never decreases, whatever a reloaded program reads.
  EXPECT_EQ(c.RunTimeNs(0), 8'000u);
}

}  // namespace
}  // namespace tpe::bpf
