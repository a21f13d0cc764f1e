// Kernel tier for native histograms: known write sizes (and errors: negative values)
// land in the bucket Prometheus's definition gives, computed here independently of the exporter;
// known sleeps land in native buckets that agree with classic power-of-two buckets of the same
// metric, observation by observation. Both engines.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <map>

#include "kernel/kernel_util.h"

namespace tpe {
namespace {

using testing::FindMetric;
using testing::ForkWaiting;
using testing::Release;
using testing::RunPipeline;

// Prometheus's bucket index of a value: ceil(log2(|v|)·2^schema), in long double.
int32_t PrometheusIndex(long double v, int schema) {
  return static_cast<int32_t>(std::ceil(std::log2l(std::fabs(v)) * std::ldexp(1.0L, schema)));
}

std::map<int32_t, uint64_t> AsMap(const std::vector<std::pair<int32_t, uint64_t>>& v) {
  return std::map<int32_t, uint64_t>(v.begin(), v.end());
}

using KernelNativeHistogramTest = testing::EngineTest;
TPE_INSTANTIATE_ENGINES(KernelNativeHistogramTest);

// write() of known sizes to /dev/null and to a closed fd (ret -EBADF, a negative value).
TEST_P(KernelNativeHistogramTest, WriteSizesInPrometheusBuckets) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::pair<size_t, int> plan[] = {{0, 2}, {1, 7}, {3, 5}, {1000, 11}, {1001, 2}, {65536, 4}, {70000, 1}};
  const int bad_writes = 6;
  int go;
  pid_t child = ForkWaiting(&go, [&] {
    static char buf[100000];
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    for (const auto& [size, n] : plan) {
      for (int i = 0; i < n; ++i) (void)!write(fd, buf, size);
    }
    close(fd);
    for (int i = 0; i < bad_writes; ++i) (void)!write(fd, buf, 1);  // EBADF
  });
  const std::string pid = std::to_string(child);
  auto snap = RunPipeline(R"({"metrics": [{"name": "write_request_bytes", "type": "histogram",
      "event": "syscalls:sys_enter_write", "filter": "common_pid == )" +
                              pid + R"(",
      "value": {"field": "count"}, "buckets": {"type": "native", "schema": 8}},
      {"name": "write_result_kib", "type": "histogram",
      "event": "syscalls:sys_exit_write", "filter": "common_pid == )" +
                              pid + R"(",
      "value": {"field": "ret", "scale": 0.0009765625}, "buckets": {"type": "native", "schema": 5}}]})",
                          [&] { Release(go, child); });
  const MetricSnapshot* m = FindMetric(snap, "write_request_bytes");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->series.size(), 1u);
  const SeriesSnapshot& s = m->series[0];
  ASSERT_TRUE(s.native.has_value());
  EXPECT_FALSE(m->classic);
  std::map<int32_t, uint64_t> want;
  uint64_t zero = 0, count = 0;
  double sum = 0;
  for (const auto& [size, n] : plan) {
    count += n;
    sum += static_cast<double>(size) * n;
    if (size == 0) {
      zero += n;
    } else {
      want[PrometheusIndex(size, 8)] += n;
    }
  }
  count += bad_writes;  // sys_enter_write sees the bad fd's writes too (count 1)
  sum += bad_writes;
  want[PrometheusIndex(1, 8)] += bad_writes;
  EXPECT_EQ(s.native->schema, 8);
  EXPECT_EQ(s.native->zero_count, zero);
  EXPECT_EQ(AsMap(s.native->positive), want);
  EXPECT_TRUE(s.native->negative.empty());
  EXPECT_EQ(s.count, count);
  EXPECT_DOUBLE_EQ(s.sum, sum);

  // Results in KiB at schema 5: the sizes written, and -9/1024 (EBADF) as negative values.
  const MetricSnapshot* r = FindMetric(snap, "write_result_kib");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->series.size(), 1u);
  const NativeSnapshot& rn = *r->series[0].native;
  std::map<int32_t, uint64_t> want_pos, want_neg;
  for (const auto& [size, n] : plan) {
    if (size > 0) want_pos[PrometheusIndex(static_cast<long double>(size) / 1024, 5)] += n;
  }
  want_neg[PrometheusIndex(9.0L / 1024, 5)] = bad_writes;
  EXPECT_EQ(rn.schema, 5);
  EXPECT_EQ(rn.zero_count, 2u);
  EXPECT_EQ(AsMap(rn.positive), want_pos);
  EXPECT_EQ(AsMap(rn.negative), want_neg);
}

using testing::NanosleepRaw;

// 100 sleeps of 1 ms and 50 of 10 ms, observed into native buckets (schema 3) and classic
// power-of-two buckets at once: every classic bound 2^j is the upper bound of native bucket
// j·8, so the classic cumulative count at le=2^j equals the native buckets up to index j·8 —
// each observation landed in the bucket the definition gives on both sides.
TEST_P(KernelNativeHistogramTest, SleepsInNativeBucketsAgreeWithClassic) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  int go;
  pid_t child = ForkWaiting(&go, [] {
    prctl(PR_SET_NAME, "tpe_sleeper");
    for (int i = 0; i < 100; ++i) NanosleepRaw(1'000'000);
    for (int i = 0; i < 50; ++i) NanosleepRaw(10'000'000);
  });
  const std::string pid = std::to_string(child);
  auto snap = RunPipeline(R"({"metrics": [{"name": "nanosleep_seconds", "type": "latency",
      "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"], "filter": "common_pid == )" +
                              pid +
                              R"("},
      "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"], "filter": "common_pid == )" +
                              pid +
                              R"("},
      "buckets": {"type": "exp2", "min": 0.0009765625, "max": 4}, "native": {"schema": 3}}]})",
                          [&] { Release(go, child); });
  const MetricSnapshot* m = FindMetric(snap, "nanosleep_seconds");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->series.size(), 1u);
  const SeriesSnapshot& s = m->series[0];
  ASSERT_TRUE(s.native.has_value());
  EXPECT_EQ(s.count, 150u);
  EXPECT_EQ(s.native->zero_count, 0u);
  EXPECT_TRUE(s.native->negative.empty());
  uint64_t native_total = 0;
  for (const auto& [i, c] : s.native->positive) native_total += c;
  EXPECT_EQ(native_total, 150u);
  // No sleep ends early (nanosleep(2)): 1 ms is in bucket ceil(log2(0.001)·8) = -79 or above, and
  // at least the 50 long sleeps at 10 ms (bucket -53) or above.
  uint64_t long_ones = 0;
  for (const auto& [i, c] : s.native->positive) {
    EXPECT_GE(i, PrometheusIndex(0.001L, 3)) << "a sleep shorter than 1 ms";
    if (i >= PrometheusIndex(0.01L, 3)) long_ones += c;
  }
  EXPECT_GE(long_ones, 50u);
  // Classic bounds 2^-10 .. 2^2 s against the native buckets, cumulatively.
  ASSERT_EQ(m->bucket_bounds.size(), 13u);
  uint64_t classic_cum = 0;
  for (size_t b = 0; b < m->bucket_bounds.size(); ++b) {
    classic_cum += s.bucket_counts[b];
    const int j = static_cast<int>(std::lround(std::log2(m->bucket_bounds[b])));
    uint64_t native_cum = 0;
    for (const auto& [i, c] : s.native->positive) {
      if (i <= j * 8) native_cum += c;
    }
    EXPECT_EQ(classic_cum, native_cum) << "le=2^" << j;
  }
}

}  // namespace
}  // namespace tpe
