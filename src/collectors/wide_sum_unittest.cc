// WideSum and its words (wide_sum.h): exact past 2^64, rendered as the nearest double, and a
// reader that loads the words while the writer stores them reads a value the sum held.
#include "collectors/wide_sum.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace tpe {
namespace {

constexpr uint64_t kMax = ~uint64_t{0};
constexpr uint64_t kTwo63 = uint64_t{1} << 63;
const uint128 kTwo64 = static_cast<uint128>(1) << 64;

uint128 Decoded(const uint64_t w[kWideWords]) {
  uint128 s = 0;
  EXPECT_TRUE(DecodeWide(w[kWideCommit], w[kWideLo], w[kWideAnnounce], &s));
  return s;
}

TEST(WideSumTest, EncodeDecodeRoundTrips) {
  for (uint128 s : {static_cast<uint128>(0), static_cast<uint128>(1), static_cast<uint128>(kTwo63 - 1),
                    static_cast<uint128>(kTwo63), static_cast<uint128>(kMax), kTwo64, kTwo64 + 384,
                    3 * kTwo64 + kTwo63 + 5, (static_cast<uint128>(1) << 126) + 12345}) {
    uint64_t w[kWideWords];
    EncodeWide(s, w);
    EXPECT_EQ(w[kWideCommit], w[kWideAnnounce]);
    EXPECT_TRUE(Decoded(w) == s);
  }
  const uint64_t zero[kWideWords] = {0, 0, 0};
  EXPECT_TRUE(Decoded(zero) == 0);
}

TEST(WideSumTest, AddsPastTwoToThe64) {
  WideSum s;
  for (int i = 0; i < 1000; ++i) s.Add(1);
  const double before = ToDouble(s.Get());
  EXPECT_EQ(before, 1000);
  s.Add(18446744073709551000ULL);  // 2^64 - 616: a 64-bit sum would read 384
  EXPECT_TRUE(s.Get() == kTwo64 + 384);
  EXPECT_GE(ToDouble(s.Get()), before);
  EXPECT_EQ(ToDouble(s.Get()), 18446744073709551616.0);  // 2^64 + 384, to the nearest double
  s.Add(kMax);
  s.Add(kMax);
  s.Add(kTwo63);
  EXPECT_TRUE(s.Get() == kTwo64 + 384 + 2 * static_cast<uint128>(kMax) + kTwo63);
  EXPECT_EQ(s.Count(), static_cast<uint64_t>(s.Get()));  // the low word: changes with every add
}

TEST(WideSumTest, RendersTheNearestDoubleOnce) {
  EXPECT_EQ(ToDouble(kTwo64 + 384), 0x1p64);
  EXPECT_EQ(ToDouble(kTwo64 + 2048), 0x1p64);  // a tie: to even
  EXPECT_EQ(ToDouble(kTwo64 + 2049), 0x1p64 + 4096);
  EXPECT_EQ(ToDouble((static_cast<uint128>(1) << 53) + 1000), 0x1p53 + 1000);
  EXPECT_EQ(ToDouble(static_cast<int128>(-5)), -5.0);
  EXPECT_EQ(ToDouble(-static_cast<int128>(kTwo64)), -0x1p64);
  // Never smaller for a larger sum.
  double last = 0;
  for (uint128 s = kTwo64 - 5000; s < kTwo64 + 20000; s += 7) {
    const double d = ToDouble(s);
    EXPECT_GE(d, last);
    last = d;
  }
}

// The writer of wide_sum.h step by step: each store is one state of the three words.
std::vector<std::vector<uint64_t>> WriterStates(const std::vector<uint64_t>& adds, std::vector<uint128>* sums) {
  std::vector<uint64_t> w(kWideWords, 0);
  std::vector<std::vector<uint64_t>> states = {w};
  uint128 sum = 0;
  sums->assign(1, 0);
  auto small = [&](uint64_t d) {
    const uint64_t next = w[kWideLo] + d;
    if (((w[kWideLo] ^ next) >> 63) != 0) {
      const uint64_t t = w[kWideCommit] + 1;
      w[kWideAnnounce] = t;
      states.push_back(w);
      sums->push_back(sum);
      w[kWideLo] = next;
      sum += d;
      states.push_back(w);
      sums->push_back(sum);
      w[kWideCommit] = t;
    } else {
      w[kWideLo] = next;
      sum += d;
    }
    states.push_back(w);
    sums->push_back(sum);
  };
  for (uint64_t d : adds) {
    if (d > kTwo63) {
      small(d >> 1);
      d -= d >> 1;
    }
    small(d);
  }
  return states;
}

// Every way a reader's three loads (commit at state i, lo at j, announce at k, i <= j <= k) can
// fall among the writer's stores: either it reads again, or it reads the sum of state j.
TEST(WideSumTest, EveryInterleavingReadsAValueTheSumHeld) {
  std::vector<uint128> sums;
  const auto states =
      WriterStates({1, 5, kTwo63 - 7, 3, kMax, kMax, kTwo63, 1, kTwo63 + 1, 2, kMax - 1, 1000, kMax}, &sums);
  size_t retries = 0, reads = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    for (size_t j = i; j < states.size(); ++j) {
      for (size_t k = j; k < states.size(); ++k) {
        uint128 s;
        if (!DecodeWide(states[i][kWideCommit], states[j][kWideLo], states[k][kWideAnnounce], &s)) {
          ++retries;
          continue;
        }
        ++reads;
        ASSERT_TRUE(s == sums[j]) << "i=" << i << " j=" << j << " k=" << k;
      }
    }
  }
  EXPECT_GT(reads, 0u);
  EXPECT_GT(retries, 0u);  // a reader stalled across two carries reads again
  // Every state the words pass through reads at once — whatever store the writer is stopped
  // after (a preempted program mid-carry) — as its own sum.
  for (size_t i = 0; i < states.size(); ++i) {
    uint128 s;
    ASSERT_TRUE(DecodeWide(states[i][kWideCommit], states[i][kWideLo], states[i][kWideAnnounce], &s)) << i;
    EXPECT_TRUE(s == sums[i]) << i;
  }
}

TEST(WideSumTest, AddWideSumsPerCpuWords) {
  uint64_t a[kWideWords], b[kWideWords], to[kWideWords] = {0, 0, 0};
  EncodeWide(kTwo64 - 1, a);
  EncodeWide(kTwo64 - 1, b);
  ASSERT_TRUE(AddWide(to, a));
  ASSERT_TRUE(AddWide(to, b));
  EXPECT_TRUE(Decoded(to) == 2 * kTwo64 - 2);  // two CPUs' low words would wrap
  // A CPU's words read mid-carry (announce = commit + 1, lo stored): the new sum.
  const uint64_t mid[kWideWords] = {0, kTwo63 + 4, 1};
  ASSERT_TRUE(AddWide(to, mid));
  EXPECT_TRUE(Decoded(to) == 2 * kTwo64 - 2 + kTwo63 + 4);
  const uint64_t torn[kWideWords] = {0, 4, 2};  // two carries apart: refused, `to` unchanged
  EXPECT_FALSE(AddWide(to, torn));
  EXPECT_TRUE(Decoded(to) == 2 * kTwo64 - 2 + kTwo63 + 4);
}

// One writer adding values that carry on every add, readers reading all the while: no read is
// below the one before it, and the last is exact.
TEST(WideSumTest, ConcurrentReadsNeverDecrease) {
  WideSum s;
  constexpr int kAdds = 200000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> decreases{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      uint128 last = 0;
      while (!done.load(std::memory_order_acquire)) {
        const uint128 v = s.Get();
        if (v < last) decreases.fetch_add(1);
        last = v;
      }
    });
  }
  for (int i = 0; i < kAdds; ++i) s.Add(i % 2 == 0 ? kTwo63 + 1 : kMax);
  done.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(decreases.load(), 0u);
  EXPECT_TRUE(s.Get() == (kAdds / 2) * (static_cast<uint128>(kTwo63) + 1 + kMax));
}

}  // namespace
}  // namespace tpe
