// StartSweeper against an in-memory hash map with hooks that replay what a start or end program on
// another CPU does between the sweep's syscalls: deterministic replays of the races that lost or
// double-counted starts (a start written between the read and the delete), not races. The kernel
// tier's BpfEngineTest.SweepRacingStartsCountsEveryStartOnce runs the real thing.
#include "bpf/start_sweep.h"

#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>

namespace tpe::bpf {
namespace {

constexpr uint64_t kTimeout = 1000;

std::string Key(uint64_t k) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &k, 8);
  return s;
}
std::string Val(uint64_t start_ns) {
  std::string s(16, '\0');  // the start time and an 8-byte label slot
  std::memcpy(s.data(), &start_ns, 8);
  return s;
}
uint64_t Start(const std::string& v) {
  uint64_t t = 0;
  std::memcpy(&t, v.data(), 8);
  return t;
}

// A hash map of 8-byte keys and 16-byte values, buckets of one key, in key order.
class FakeStarts : public MapAccess {
 public:
  std::map<std::string, std::string> entries;
  size_t max_entries = 100;
  bool lookup_and_delete = true, batch = true;
  std::function<void(const std::string& key)> before_take;  // before a delete / lookup_and_delete of key
  std::function<void()> before_batch_take;                  // before each lookup_and_delete_batch
  std::function<void(const std::string& key)> before_put;   // before an update (a put back)
  std::function<void(const std::string& key)> on_lookup;    // before a lookup
  int deletes = 0, takes = 0, batch_takes = 0, puts = 0, lookups = 0;

  int GetNextKey(const void* key, void* next) override {
    auto it = entries.begin();
    if (key != nullptr) {
      auto at = entries.find(std::string(static_cast<const char*>(key), 8));
      if (at != entries.end()) it = std::next(at);
    }
    if (it == entries.end()) return -ENOENT;
    std::memcpy(next, it->first.data(), 8);
    return 0;
  }
  int Lookup(const void* key, void* value) override {
    if (on_lookup) on_lookup(std::string(static_cast<const char*>(key), 8));
    auto it = entries.find(std::string(static_cast<const char*>(key), 8));
    if (it == entries.end()) return -ENOENT;
    std::memcpy(value, it->second.data(), 16);
    return 0;
  }
  int Delete(const void* key) override {
    ++deletes;
    const std::string k(static_cast<const char*>(key), 8);
    if (before_take) before_take(k);
    return entries.erase(k) ? 0 : -ENOENT;
  }
  int Update(const void* key, const void* value, uint64_t flags) override {
    ++puts;
    const std::string k(static_cast<const char*>(key), 8);
    if (before_put) before_put(k);
    const bool exists = entries.count(k) != 0;
    if (flags == BPF_NOEXIST && exists) return -EEXIST;
    if (flags == BPF_EXIST && !exists) return -ENOENT;
    if (!exists && entries.size() >= max_entries) return -E2BIG;
    entries[k].assign(static_cast<const char*>(value), 16);
    return 0;
  }
  int LookupAndDelete(const void* key, void* value) override {
    if (!lookup_and_delete) return -524;  // ENOTSUPP: hash maps before 5.14
    ++takes;
    const std::string k(static_cast<const char*>(key), 8);
    if (before_take) before_take(k);
    auto it = entries.find(k);
    if (it == entries.end()) return -ENOENT;
    std::memcpy(value, it->second.data(), 16);
    entries.erase(it);
    return 0;
  }
  int LookupBatch(const void*, void*, void*, void*, uint32_t*) override { return -EINVAL; }  // walk by key
  int LookupAndDeleteBatch(const void* in, void* out, void* keys, void* values, uint32_t* count) override {
    if (!batch) return -EINVAL;
    ++batch_takes;
    if (before_batch_take) before_batch_take();
    uint64_t pos = 0;
    if (in != nullptr) std::memcpy(&pos, in, 8);
    // Resume at the first key at or after `pos` (the bucket order: keys here).
    auto it = entries.lower_bound(Key(pos));
    uint32_t n = 0;
    while (it != entries.end() && n < *count) {
      std::memcpy(static_cast<char*>(keys) + 8 * n, it->first.data(), 8);
      std::memcpy(static_cast<char*>(values) + 16 * n, it->second.data(), 16);
      uint64_t k = 0;
      std::memcpy(&k, it->first.data(), 8);
      pos = k + 1;
      it = entries.erase(it);
      ++n;
    }
    std::memcpy(out, &pos, 8);
    *count = n;
    return it == entries.end() ? -ENOENT : 0;
  }
};

MapShape Shape() {
  MapShape s;
  s.key_size = 8;
  s.slots = 2;
  s.max_entries = 100;
  return s;
}

// The race of a start written between the sweep's read and delete: the sweep reads key 7's expired
// start (t=0); before it deletes, a start program replaces it with a fresh one (t=5000, counting
// the old one `replaced`). A delete by key lost the fresh start and counted the old one a second
// time (expired); taking it returns the fresh start, which goes back.
TEST(StartSweeperTest, AStartWrittenBetweenReadAndTakeIsPutBack) {
  for (auto mode : {StartSweeper::Mode::kLookupAndDelete, StartSweeper::Mode::kBatch}) {
    FakeStarts m;
    m.entries[Key(7)] = Val(0);  // expired at now = 5001
    m.entries[Key(8)] = Val(4500);
    auto replace_7 = [&] { m.entries[Key(7)] = Val(5000); };  // the start program (counts kReplaced)
    m.before_take = [&](const std::string& k) {
      if (k == Key(7)) replace_7();
    };
    m.before_batch_take = replace_7;
    StartSweeper sweeper(&m, Shape(), kTimeout, mode);
    StartSweepCounts c = sweeper.Sweep(5001);
    EXPECT_EQ(c.expired, 0u) << StartSweeper::ModeName(mode);  // the old start was counted once: replaced
    EXPECT_EQ(c.replaced, 0u);
    EXPECT_EQ(c.table_full, 0u);
    ASSERT_EQ(m.entries.count(Key(7)), 1u) << StartSweeper::ModeName(mode);
    EXPECT_EQ(Start(m.entries[Key(7)]), 5000u);  // the fresh start is still there for its end
    ASSERT_EQ(m.entries.count(Key(8)), 1u);
    EXPECT_EQ(Start(m.entries[Key(8)]), 4500u);
  }
}

// Without the take commands (before 5.6) the sweep checks the value before deleting: a start
// written before that check is kept; only the race between the check and the delete remains.
TEST(StartSweeperTest, CheckThenDeleteKeepsAStartWrittenBeforeTheCheck) {
  FakeStarts m;
  m.lookup_and_delete = false;
  m.batch = false;
  m.entries[Key(7)] = Val(0);
  m.entries[Key(9)] = Val(1);
  // The walk reads both (two lookups); a program rewrites key 7 before the sweep's check of it.
  m.on_lookup = [&](const std::string& k) {
    if (++m.lookups == 3 && k == Key(7)) m.entries[Key(7)] = Val(5000);
  };
  StartSweeper sweeper(&m, Shape(), kTimeout, StartSweeper::Mode::kLookupAndDelete);
  StartSweepCounts c = sweeper.Sweep(5001);
  EXPECT_EQ(sweeper.mode(), StartSweeper::Mode::kCheckThenDelete);  // ENOTSUPP, then EINVAL: for good
  EXPECT_EQ(c.expired, 1u);
  ASSERT_EQ(m.entries.count(Key(7)), 1u);
  EXPECT_EQ(Start(m.entries[Key(7)]), 5000u);
  EXPECT_EQ(m.entries.count(Key(9)), 0u);
}

// A fresh start taken by mistake meets a newer start for its key when it is put back: it was
// replaced (counted once, by the sweep); a map that filled meanwhile: table_full.
TEST(StartSweeperTest, PutBackRefusedCountsReplacedOrTableFull) {
  for (int full = 0; full < 2; ++full) {
    FakeStarts m;
    m.max_entries = 2;
    m.entries[Key(7)] = Val(0);
    m.before_take = [&](const std::string& k) {
      if (k == Key(7)) m.entries[Key(7)] = Val(5000);  // a start replaces the expired one
    };
    m.before_put = [&](const std::string&) {
      if (full) {
        m.entries[Key(1)] = Val(5000);  // two other keys fill the map
        m.entries[Key(2)] = Val(5000);
      } else {
        m.entries[Key(7)] = Val(5001);  // yet another start for key 7
      }
    };
    StartSweeper sweeper(&m, Shape(), kTimeout, StartSweeper::Mode::kLookupAndDelete);
    StartSweepCounts c = sweeper.Sweep(5001);
    EXPECT_EQ(c.replaced, full ? 0u : 1u);
    EXPECT_EQ(c.table_full, full ? 1u : 0u);
    EXPECT_EQ(c.expired, 0u);
  }
}

// Nothing expired: the read is all; nothing is taken, whatever the mode.
TEST(StartSweeperTest, NothingExpiredTakesNothing) {
  FakeStarts m;
  for (uint64_t k = 0; k < 50; ++k) m.entries[Key(k)] = Val(4500 + k);
  StartSweeper sweeper(&m, Shape(), kTimeout, StartSweeper::Mode::kBatch);
  StartSweepCounts c = sweeper.Sweep(5001);
  EXPECT_EQ(c.inflight, 50u);
  EXPECT_EQ(m.batch_takes + m.takes + m.deletes, 0);
}

// The sweep's invariant, on a model of the start and end programs (programs.h) that runs at
// every point between the sweep's syscalls, with random keys, times and interleavings:
// starts == observed + replaced + expired + table_full + still pending, in every mode.
TEST(StartSweeperTest, EveryStartIsCountedExactlyOnceUnderRacingPrograms) {
  for (auto mode : {StartSweeper::Mode::kLookupAndDelete, StartSweeper::Mode::kBatch}) {
    FakeStarts m;
    m.max_entries = 6;
    uint64_t now = 10'000, starts = 0, observed = 0, replaced = 0, expired = 0, table_full = 0, no_start = 0;
    uint32_t rng = 12345;
    auto next = [&] { return rng = rng * 1103515245 + 12345, (rng >> 8) % 1000; };
    auto program = [&] {  // one run of the start or the end program, at a random key
      const std::string k = Key(next() % 8);
      now += next() % 300;
      if (next() % 2 == 0) {  // start: NOEXIST, else replace (the old one counts replaced)
        ++starts;
        if (m.entries.count(k)) {
          ++replaced;
          m.entries[k] = Val(now);
        } else if (m.entries.size() >= m.max_entries) {
          ++table_full;
        } else {
          m.entries[k] = Val(now);
        }
      } else {  // end: lookup and delete; the deleter observes (or counts it expired)
        auto it = m.entries.find(k);
        if (it == m.entries.end()) {
          ++no_start;
          return;
        }
        const uint64_t t = Start(it->second);
        m.entries.erase(it);
        (now > t && now - t > kTimeout) ? ++expired : ++observed;
      }
    };
    auto maybe = [&] {
      for (uint32_t n = next() % 3; n > 0; --n) program();
    };
    m.before_take = [&](const std::string&) { maybe(); };
    m.before_batch_take = maybe;
    m.before_put = [&](const std::string&) { maybe(); };
    m.on_lookup = [&](const std::string&) { maybe(); };
    StartSweeper sweeper(&m, Shape(), kTimeout, mode);
    StartSweepCounts swept;
    for (int round = 0; round < 2000; ++round) {
      for (uint32_t n = next() % 6; n > 0; --n) program();
      StartSweepCounts c = sweeper.Sweep(now);
      swept.expired += c.expired;
      swept.replaced += c.replaced;
      swept.table_full += c.table_full;
    }
    EXPECT_GT(swept.expired, 100u) << StartSweeper::ModeName(mode);
    EXPECT_GT(observed, 1000u);
    EXPECT_EQ(starts, observed + replaced + swept.replaced + expired + swept.expired + table_full + swept.table_full +
                          m.entries.size())
        << StartSweeper::ModeName(mode);
  }
}

}  // namespace
}  // namespace tpe::bpf
