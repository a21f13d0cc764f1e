#include "plan/print_report.h"

#include <gtest/gtest.h>

#include <sstream>

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

TEST(PrintCostsTest, RatesNsPerEventAndWhyNot) {
  std::ostringstream out;
  PrintCosts({{"a_total", Engine::kBpf, 2000, 100000.0, std::nullopt, std::nullopt},
              {"b_seconds", Engine::kPerf, 50, std::nullopt, std::nullopt, std::nullopt},
              {"c_total", Engine::kBpf, 0, 0.0, std::nullopt, std::nullopt},
              {"cpu", Engine::kPerf, 38, std::nullopt, 1.5e6, 4e6}},
             2.0, "", out);
  const std::string s = out.str();
  EXPECT_NE(s.find("a_total"), std::string::npos) << s;
  EXPECT_NE(s.find("2000 runs (1000.0/s), 50 ns/event, 0.0050% of a CPU"), std::string::npos) << s;
  EXPECT_NE(s.find("50 events (25.0/s), ns/event: see docs/PERFORMANCE.md"), std::string::npos) << s;
  EXPECT_NE(s.find("0 runs (0.0/s), no runs"), std::string::npos) << s;
  // A profile: the exporter's own time on it, samples and rendering.
  EXPECT_NE(s.find("38 events (19.0/s), exporter 5.5 ms (samples 1.5 ms, rendering 4.0 ms), 0.2750% of a CPU"),
            std::string::npos)
      << s;
  std::ostringstream no;
  PrintCosts({{"a_total", Engine::kBpf, 10, std::nullopt, std::nullopt, std::nullopt}}, 1.0,
             "BPF_ENABLE_STATS: Operation not permitted", no);
  EXPECT_NE(no.str().find("ns/event unknown: BPF_ENABLE_STATS: Operation not permitted"), std::string::npos)
      << no.str();
}

TEST(PrintTopStacksTest, HeaviestFirstLeafFirstLikeBpftrace) {
  std::ostringstream out;
  PrintTopStacks("p", "main;a;leaf 5\nmain;b;leaf 9\nmain;c 1\n", 2, out);
  EXPECT_EQ(out.str(),
            "\np: 3 stacks, 15 samples (the 2 heaviest)\n"
            "@[\n    leaf\n    b\n    main\n]: 9\n"
            "@[\n    leaf\n    a\n    main\n]: 5\n");
  std::ostringstream empty;
  PrintTopStacks("q", "", 10, empty);
  EXPECT_EQ(empty.str(), "\nq: 0 stacks, 0 samples\n");
}

}  // namespace
}  // namespace tpe
