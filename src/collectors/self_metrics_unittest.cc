#include "collectors/self_metrics.h"

#include <gtest/gtest.h>

namespace tpe {
namespace {

constexpr MetricDesc kA{"a_total", "A.", MetricKind::kCounter};
constexpr MetricDesc kB{"b", "B.", MetricKind::kGauge};
constexpr MetricDesc kC{"c_total", "C.", MetricKind::kCounter};

std::vector<std::string> Names(const std::vector<MetricSnapshot>& v) {
  std::vector<std::string> out;
  for (const MetricSnapshot& m : v) out.push_back(m.name);
  return out;
}

TEST(SelfMetricsTest, FamiliesKeepTheirPlaceAndTheirDesc) {
  SelfMetrics m;
  m.Declare(kA);                              // shown even without a series
  m.Declare(kB, /*shown_when_empty=*/false);  // placed second, shown once it has a series
  m.Declare(kC, /*shown_when_empty=*/false);  // never gets one: not shown
  m.Add(kB, {{"cpu", "1"}}, 2);
  m.Add(kB, {{"cpu", "0"}}, 3);
  EXPECT_TRUE(m.HasSeries(kB));
  EXPECT_FALSE(m.HasSeries(kA));
  std::vector<MetricSnapshot> out;
  m.MoveTo(&out);
  ASSERT_EQ(Names(out), (std::vector<std::string>{"a_total", "b"}));
  EXPECT_EQ(out[0].help, "A.");
  EXPECT_EQ(out[0].kind, MetricKind::kCounter);
  EXPECT_TRUE(out[0].series.empty());
  EXPECT_EQ(out[1].kind, MetricKind::kGauge);
  ASSERT_EQ(out[1].series.size(), 2u);
  EXPECT_EQ(out[1].series[0].labels, (LabelPairs{{"cpu", "1"}}));  // in the order added
  EXPECT_EQ(out[1].series[1].value, 3);
}

TEST(SelfMetricsTest, AnAddPlacesAnUndeclaredFamilyAndShowEmptyShowsOne) {
  SelfMetrics m;
  m.Add(kC, {}, 1);
  m.Declare(kC);  // already placed: stays first
  m.Declare(kA, /*shown_when_empty=*/false);
  m.ShowEmpty(kA);
  m.ShowEmpty(kB);                                       // placed last, shown empty
  std::vector<MetricSnapshot> out = {MetricSnapshot{}};  // appended after what is there
  m.MoveTo(&out);
  EXPECT_EQ(Names(out), (std::vector<std::string>{"", "c_total", "a_total", "b"}));
  std::vector<MetricSnapshot> again;
  m.MoveTo(&again);
  EXPECT_TRUE(again.empty()) << "MoveTo leaves the registry empty";
}

}  // namespace
}  // namespace tpe
