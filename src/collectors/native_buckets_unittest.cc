#include "collectors/native_buckets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tpe {
namespace {

// The bucket index as Prometheus defines it, computed independently of NativeLayout: ceil of
// log2(|v|)·2^schema in long double, for v = raw × scale. `near` is set when v is within one part
// in 10^12 of a boundary (where the two computations may honestly differ).
int32_t ReferenceIndex(uint64_t magnitude, long double scale, int schema, bool* near) {
  const long double x = std::log2l(static_cast<long double>(magnitude) * scale) * std::ldexp(1.0L, schema);
  const long double c = std::ceil(x);
  *near = std::fabs(x - std::nearbyint(x)) < 1e-12L * std::max(1.0L, std::fabs(x));
  return static_cast<int32_t>(c);
}

int32_t LayoutIndex(const NativeLayout& l, int64_t raw, bool is_signed) {
  const int32_t p = l.Position(raw, is_signed);
  EXPECT_NE(p, 0) << raw;
  return l.IndexOfPosition(static_cast<uint32_t>(std::abs(p) - 1));
}

TEST(NativeLayoutTest, IndexIsPrometheusDefinitionForEverySchemaAndScale) {
  std::mt19937_64 rng(42);
  // The scales as written (long double literals for the reference: the decimal value).
  const std::pair<double, long double> scales[] = {{1.0, 1.0L}, {1e-9, 1e-9L}, {1e-3, 1e-3L},
                                                   {3.7, 3.7L}, {0.25, 0.25L}, {1e6, 1e6L}};
  for (const auto& [scale, exact_scale] : scales) {
    for (int schema = 0; schema <= 8; ++schema) {
      NativeOptions o;
      o.schema = schema;
      o.zero_threshold = 0;
      auto l = NativeLayout::Make(o, scale);
      ASSERT_TRUE(l.ok()) << l.status().message();
      ASSERT_EQ(l->mantissa_thresholds().size(), size_t{1} << schema);
      int checked = 0;
      for (int i = 0; i < 4000; ++i) {
        // Magnitudes spread over every octave of a u64.
        const int bits = 1 + static_cast<int>(rng() % 64);
        uint64_t raw = rng() >> (64 - bits);
        if (raw == 0) raw = 1;
        bool near = false;
        const int32_t want = ReferenceIndex(raw, exact_scale, schema, &near);
        if (near) continue;
        ASSERT_EQ(LayoutIndex(*l, static_cast<int64_t>(raw), false), want)
            << "raw " << raw << " scale " << scale << " schema " << schema;
        ++checked;
      }
      EXPECT_GT(checked, 3600);
    }
  }
}

TEST(NativeLayoutTest, PowersOfTwoAreUpperBoundsInclusive) {
  for (int schema = 0; schema <= 8; ++schema) {
    NativeOptions o;
    o.schema = schema;
    auto l = NativeLayout::Make(o, 1.0);
    ASSERT_TRUE(l.ok());
    for (int k = 0; k < 63; ++k) {
      const uint64_t x = uint64_t{1} << k;
      // 2^k is the upper bound of bucket k·2^s; 2^k + 1 is in the next one.
      EXPECT_EQ(LayoutIndex(*l, static_cast<int64_t>(x), false), k << schema) << "schema " << schema << " 2^" << k;
      if (k >= 10) {  // 2^k + 1 is in the next bucket (2^(1/256) - 1 > 2^-10)
        EXPECT_EQ(LayoutIndex(*l, static_cast<int64_t>(x + 1), false), (k << schema) + 1);
      }
    }
  }
}

TEST(NativeLayoutTest, NanosecondsAsSeconds) {
  NativeOptions o;  // schema 3
  auto l = NativeLayout::Make(o, 1e-9);
  ASSERT_TRUE(l.ok());
  // 1 ms = 2^-9.97: ceil(-9.966 · 8) = ceil(-79.73) = -79. 10 ms: ceil(-6.644 · 8) = -53.
  EXPECT_EQ(LayoutIndex(*l, 1'000'000, false), -79);
  EXPECT_EQ(LayoutIndex(*l, 10'000'000, false), -53);
  // 1 s exactly is the upper bound of bucket 0.
  EXPECT_EQ(LayoutIndex(*l, 1'000'000'000, false), 0);
  EXPECT_EQ(LayoutIndex(*l, 1'000'000'001, false), 1);
}

TEST(NativeLayoutTest, ZeroBucketAndSigns) {
  NativeOptions o;
  o.schema = 0;
  o.zero_threshold = 1e-6;
  auto l = NativeLayout::Make(o, 1e-9);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->zero_max(), 1000u);
  EXPECT_EQ(l->Position(0, false), 0);
  EXPECT_EQ(l->Position(1000, false), 0);
  EXPECT_GT(l->Position(1001, false), 0);
  EXPECT_EQ(l->Position(-1000, true), 0);
  EXPECT_LT(l->Position(-1001, true), 0);
  EXPECT_EQ(l->Position(-1001, true), -l->Position(1001, false));
  // Unsigned: the bit pattern of -1 is 2^64 - 1, a positive value.
  EXPECT_GT(l->Position(-1, false), 0);
  // INT64_MIN has a magnitude of 2^63.
  EXPECT_LT(l->Position(INT64_MIN, true), 0);
  // A negative scale flips the sign.
  auto neg = NativeLayout::Make(o, -1e-9);
  ASSERT_TRUE(neg.ok());
  EXPECT_EQ(neg->Position(1001, false), -l->Position(1001, false));
  EXPECT_EQ(neg->Position(-1001, true), l->Position(1001, false));
}

TEST(NativeLayoutTest, RefusesBadOptions) {
  NativeOptions o;
  o.schema = 9;
  EXPECT_FALSE(NativeLayout::Make(o, 1).ok());
  o.schema = 3;
  o.max_buckets = 0;
  EXPECT_FALSE(NativeLayout::Make(o, 1).ok());
  o.max_buckets = 10;
  o.zero_threshold = -1;
  EXPECT_FALSE(NativeLayout::Make(o, 1).ok());
  o.zero_threshold = 0;
  EXPECT_FALSE(NativeLayout::Make(o, 0).ok());
  EXPECT_FALSE(NativeLayout::Make(o, INFINITY).ok());
}

TEST(NativeSnapshotTest, ReduceMergesPairsAsClientGolang) {
  NativeSnapshot h;
  h.schema = 1;
  // Schema 1 buckets -2..3 -> schema 0: -2->-1, -1->0, 0->0, 1->1, 2->1, 3->2.
  h.positive = {{-2, 1}, {-1, 2}, {0, 4}, {1, 8}, {2, 16}, {3, 32}};
  h.negative = {{5, 1}};
  EXPECT_EQ(ReduceToMaxBuckets(&h, 7), 0);
  EXPECT_EQ(ReduceToMaxBuckets(&h, 5), 1);
  EXPECT_EQ(h.schema, 0);
  const std::vector<std::pair<int32_t, uint64_t>> want = {{-1, 1}, {0, 6}, {1, 24}, {2, 32}};
  EXPECT_EQ(h.positive, want);
  EXPECT_EQ(h.negative, (std::vector<std::pair<int32_t, uint64_t>>{{3, 1}}));
  // Never below schema -4.
  NativeSnapshot wide;
  wide.schema = -3;
  for (int32_t i = 0; i < 1000; i += 100) wide.positive.push_back({i, 1});
  EXPECT_EQ(ReduceToMaxBuckets(&wide, 1), 1);
  EXPECT_EQ(wide.schema, -4);
}

TEST(NativeCountsTest, CountsByIndex) {
  NativeOptions o;
  o.schema = 2;
  o.zero_threshold = 0.5;
  auto l = NativeLayout::Make(o, 1.0);
  ASSERT_TRUE(l.ok());
  NativeCounts c(2);
  for (int64_t v : {0, 1, 2, 2, 3, -3, 1 << 20}) c.Observe(l->Position(v, true));
  EXPECT_EQ(c.Count(), 7u);
  const NativeSnapshot s = c.Snapshot(*l);
  EXPECT_EQ(s.schema, 2);
  EXPECT_EQ(s.zero_threshold, 0.5);
  EXPECT_EQ(s.zero_count, 1u);
  // 1 -> 0, 2 -> 4, 3 -> ceil(1.585·4) = 7, 2^20 -> 80.
  const std::vector<std::pair<int32_t, uint64_t>> pos = {{0, 1}, {4, 2}, {7, 1}, {80, 1}};
  EXPECT_EQ(s.positive, pos);
  EXPECT_EQ(s.negative, (std::vector<std::pair<int32_t, uint64_t>>{{7, 1}}));
}

}  // namespace
}  // namespace tpe
