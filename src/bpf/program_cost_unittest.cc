#include "bpf/program_cost.h"

#include <gtest/gtest.h>

namespace tpe::bpf {
namespace {

// Runs are priced at the ns per run of the latest window that saw runs; the estimate never
// decreases, and is absent until a window has measured something.
TEST(ProgramCostTest, PricesRunsAtTheLatestWindow) {
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
  c.EndWindow(25 * 1'000, 1'000);                // now 25 ns per run
  EXPECT_DOUBLE_EQ(*c.Seconds(2'000'000), 0.1);  // no new run: unchanged
  EXPECT_DOUBLE_EQ(*c.Seconds(4'000'000), 0.1 + 0.05);
  EXPECT_DOUBLE_EQ(*c.Seconds(3'000'000), 0.15);  // a lower count never lowers it
  c.EndWindow(1'000'000, 1'000'000);              // an end without a begin is ignored
  EXPECT_DOUBLE_EQ(*c.ns_per_run(), 25);
}

}  // namespace
}  // namespace tpe::bpf
