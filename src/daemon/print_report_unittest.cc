#include "daemon/print_report.h"

#include <gtest/gtest.h>

namespace tpe {
namespace {

TEST(ParseDurationTest, UnitsAndBounds) {
  EXPECT_EQ(ParseDuration("500ms")->count(), 500);
  EXPECT_EQ(ParseDuration("10s")->count(), 10000);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("1.5")->count(), 1500);
  // Non-finite and huge durations are refused instead of overflowing the conversion to ms
  // (--print=inf used to return at once).
  for (const char* bad : {"inf", "infs", "nan", "-1s", "1e300s", "9000h", "10x", "", "s"}) {
    auto d = ParseDuration(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("is not a duration"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace tpe
