// ReadMap and MapSeries against an in-memory map that behaves as the kernel's hash map does
// (htab_map_get_next_key restarts from the first key when the given key is gone), with hooks
// that inject what a program or another process does between two syscalls: deterministic
// replays of the races, not races.
#include "bpf/map_series.h"

#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>

namespace tpe::bpf {
namespace {

std::string Key(uint64_t k) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &k, 8);
  return s;
}
uint64_t KeyOf(std::string_view s) {
  uint64_t k = 0;
  std::memcpy(&k, s.data(), 8);
  return k;
}

// One-CPU map of u64 values keyed by u64, in key order (any fixed order will do).
class FakeMap : public MapAccess {
 public:
  std::map<std::string, uint64_t> entries;
  bool batch = true, lookup_and_delete = true;
  std::function<void()> on_get_next_key;  // before each get_next_key
  std::function<void()> on_delete;        // before each delete / lookup_and_delete
  std::function<void()> on_update;        // before each update
  int get_next_key_calls = 0, batch_calls = 0;

  int GetNextKey(const void* key, void* next) override {
    ++get_next_key_calls;
    if (on_get_next_key) on_get_next_key();
    auto it = entries.begin();
    if (key != nullptr) {
      auto at = entries.find(std::string(static_cast<const char*>(key), 8));
      if (at != entries.end()) it = std::next(at);  // else: restart from the first key
    }
    if (it == entries.end()) return -ENOENT;
    std::memcpy(next, it->first.data(), 8);
    return 0;
  }
  int Lookup(const void* key, void* value) override {
    auto it = entries.find(std::string(static_cast<const char*>(key), 8));
    if (it == entries.end()) return -ENOENT;
    std::memcpy(value, &it->second, 8);
    return 0;
  }
  int Delete(const void* key) override {
    if (on_delete) on_delete();
    return entries.erase(std::string(static_cast<const char*>(key), 8)) ? 0 : -ENOENT;
  }
  int LookupAndDelete(const void* key, void* value) override {
    if (!lookup_and_delete) return -EINVAL;
    if (on_delete) on_delete();
    int r = Lookup(key, value);
    if (r == 0) entries.erase(std::string(static_cast<const char*>(key), 8));
    return r;
  }
  // Only BPF_NOEXIST (a gauge's value put back by the sweep).
  int Update(const void* key, const void* value, uint64_t flags) override {
    if (on_update) on_update();
    if (flags != BPF_NOEXIST) return -EINVAL;
    const std::string k(static_cast<const char*>(key), 8);
    if (entries.count(k)) return -EEXIST;
    std::memcpy(&entries[k], value, 8);
    return 0;
  }
  int LookupAndDeleteBatch(const void*, void*, void*, void*, uint32_t*) override { return -EINVAL; }
  int LookupBatch(const void* in, void* out, void* keys, void* values, uint32_t* count) override {
    ++batch_calls;
    if (!batch) return -EINVAL;
    uint64_t pos = 0;
    if (in != nullptr) std::memcpy(&pos, in, 8);
    auto it = entries.begin();
    std::advance(it, std::min<uint64_t>(pos, entries.size()));
    uint32_t n = 0;
    for (; it != entries.end() && n < *count; ++it, ++n) {
      std::memcpy(static_cast<char*>(keys) + 8 * n, it->first.data(), 8);
      std::memcpy(static_cast<char*>(values) + 8 * n, &it->second, 8);
    }
    pos += n;
    std::memcpy(out, &pos, 8);
    *count = n;
    return it == entries.end() ? -ENOENT : 0;
  }
};

MapShape Shape() {
  MapShape s;
  s.key_size = 8;
  s.slots = 1;
  s.cpus = 1;
  s.max_entries = 100;
  return s;
}

// Key 1 is a live task's series; keys 100.. are exited tasks' series.
constexpr uint64_t kLive = 1;

// get_next_key restarts from the first key when the previous key was deleted meanwhile: the
// fallback walk must still read each entry once (it used to count the live series twice).
TEST(ReadMapTest, GetNextKeyRestartDoesNotCountTwice) {
  FakeMap m;
  m.batch = false;
  m.entries[Key(kLive)] = 10;
  for (uint64_t k = 100; k < 105; ++k) m.entries[Key(k)] = 1;
  m.on_get_next_key = [&] {
    if (m.get_next_key_calls == 4) m.entries.erase(Key(101));  // the previous key, deleted meanwhile
  };
  bool batch = true;
  auto out = ReadMap(&m, Shape(), &batch);
  EXPECT_FALSE(batch);  // refused once: not tried again
  std::map<uint64_t, uint64_t> got;
  for (auto& e : out) got[KeyOf(e.key)] += e.value[0];
  EXPECT_EQ(got, (std::map<uint64_t, uint64_t>{{1, 10}, {100, 1}, {101, 1}, {102, 1}, {103, 1}, {104, 1}}));
  EXPECT_EQ(out.size(), 6u);
  EXPECT_GT(m.get_next_key_calls, 7);  // the walk did restart
}

TEST(ReadMapTest, BatchReadsEveryEntryOnce) {
  FakeMap m;
  for (uint64_t k = 0; k < 1000; ++k) m.entries[Key(k)] = k;
  bool batch = true;
  auto out = ReadMap(&m, Shape(), &batch);
  EXPECT_TRUE(batch);
  ASSERT_EQ(out.size(), 1000u);
  for (uint64_t k = 0; k < 1000; ++k) EXPECT_EQ(out[k].value[0], KeyOf(out[k].key));
  EXPECT_EQ(m.get_next_key_calls, 0);
  EXPECT_EQ(m.batch_calls, 4);  // 256 at a time
}

// Label key = the program key, except that keys >= 100 are dead tasks.
MapSeries Series(FakeMap* m) {
  return MapSeries(std::unique_ptr<MapAccess>(m), Shape(), [](std::string_view k) { return std::string(k); });
}

// A live counter never decreases between two scrapes while the sweep takes exited tasks'
// series out of the map, even when a scrape's walk restarts; and each dead task's value is on
// the next page exactly, then gone.
TEST(MapSeriesTest, LiveCounterNeverDecreasesWhileTheSweepFolds) {
  for (bool batch : {true, false}) {
    auto* m = new FakeMap;
    m->batch = batch;
    MapSeries s = Series(m);
    auto dead = [](const std::string& lk) { return KeyOf(lk) >= 100; };
    uint64_t last = 0, next_dead = 100;
    for (int round = 0; round < 50; ++round) {
      m->entries[Key(kLive)] += 3;  // the live task keeps counting
      for (int i = 0; i < 4; ++i) m->entries[Key(next_dead++)] = 7;
      // Another deleter (bpftool, an old daemon) removes a dead key mid-walk of the scrape.
      m->on_get_next_key = [&] {
        if (m->get_next_key_calls % 5 == 2 && !m->entries.empty()) m->entries.erase(std::prev(m->entries.end()));
      };
      if (round % 2 == 0) {
        auto r = s.Sweep(1'000'000'000ULL * round, 0, dead);
        EXPECT_EQ(r.idle, 0u);
      }
      m->on_get_next_key = nullptr;
      auto page = s.Read();
      ASSERT_EQ(page.count(Key(kLive)), 1u);
      EXPECT_GE(page[Key(kLive)][0], last) << "round " << round;
      EXPECT_EQ(page[Key(kLive)][0], 3u * (round + 1));
      last = page[Key(kLive)][0];
    }
  }
}

// The map holds 2,000 series; 6,000 tasks exit with no scrape in between. The sweep
// makes room at once (it used to wait for a scrape), and every dead task's value reaches the
// next page exactly.
TEST(MapSeriesTest, SweepMakesRoomWithoutAScrapeAndKeepsEveryValue) {
  auto* m = new FakeMap;
  MapSeries s = Series(m);
  auto dead = [](const std::string& lk) { return KeyOf(lk) >= 100; };
  uint64_t task = 100, want = 0;
  for (int wave = 0; wave < 3; ++wave) {
    for (int i = 0; i < 2000; ++i, ++task) {
      ASSERT_LT(m->entries.size(), 2000u) << "full: the next task would be dropped";
      m->entries[Key(task)] = task % 13 + 1;
      want += task % 13 + 1;
      if (m->entries.size() == 1999) s.Sweep(wave, 0, dead);
    }
    s.Sweep(wave, 0, dead);
  }
  EXPECT_TRUE(m->entries.empty());
  EXPECT_EQ(s.retired_size(), 6000u);
  uint64_t got = 0;
  for (auto& [k, v] : s.Read()) got += v[0];
  EXPECT_EQ(got, want);
  EXPECT_EQ(s.retired_size(), 0u);  // exported: gone from the next page
  EXPECT_TRUE(s.Read().empty());
}

// A retired value stays while a live series has its label key (a pid reused), so the counter
// goes on from its total; the sweep takes the value with lookup_and_delete (one step: an
// increment just before it is kept), or lookup + delete where the kernel refuses that.
TEST(MapSeriesTest, ReusedLabelKeyContinuesAndTheDeleteKeepsTheLatestValue) {
  for (bool lad : {true, false}) {
    auto* m = new FakeMap;
    m->lookup_and_delete = lad;
    MapSeries s = Series(m);
    m->entries[Key(200)] = 5;
    bool exited = true;
    auto dead = [&](const std::string&) { return exited; };
    m->on_delete = [&] { m->entries[Key(200)] += 1; };  // a last hit lands just before the unlink
    auto r = s.Sweep(1, 0, dead);
    m->on_delete = nullptr;
    EXPECT_EQ(r.exited, 1u);
    EXPECT_EQ(s.uses_lookup_and_delete(), lad);
    m->entries[Key(200)] = 2;  // pid 200 reused before any scrape
    exited = false;
    auto page = s.Read();
    // lookup_and_delete folded 6; lookup then delete read 5 before the hit (the documented window).
    EXPECT_EQ(page[Key(200)][0], lad ? 8u : 7u);
    EXPECT_EQ(s.retired_size(), 1u);  // kept: a live series shares its label key
    m->entries[Key(200)] = 4;
    EXPECT_EQ(s.Read()[Key(200)][0], lad ? 10u : 9u);
  }
}

// Idle series leave the map after idle_ns unchanged, their value on the next page once.
TEST(MapSeriesTest, IdleSeriesAreFoldedThenDropped) {
  auto* m = new FakeMap;
  MapSeries s = Series(m);
  m->entries[Key(1)] = 4;
  m->entries[Key(2)] = 4;
  EXPECT_EQ(s.Sweep(0, 10, nullptr).idle, 0u);
  m->entries[Key(2)] = 5;
  auto r = s.Sweep(10, 10, nullptr);
  EXPECT_EQ(r.idle, 1u);  // key 1 unchanged for 10 ns; key 2 changed
  EXPECT_EQ(m->entries.count(Key(1)), 0u);
  auto page = s.Read();
  EXPECT_EQ(page[Key(1)][0], 4u);
  EXPECT_EQ(page[Key(2)][0], 5u);
  EXPECT_EQ(s.Read().count(Key(1)), 0u);
}

// A dead task's series whose final value a scrape already exported leaves the page at the sweep
// (as on the perf engine); one that changed after the scrape is kept for one more page.
TEST(MapSeriesTest, AlreadyExportedFinalValueIsNotKept) {
  auto* m = new FakeMap;
  MapSeries s = Series(m);
  m->entries[Key(300)] = 9;
  m->entries[Key(301)] = 9;
  EXPECT_EQ(s.Read()[Key(300)][0], 9u);
  m->entries[Key(301)] = 10;  // a last hit after the scrape
  auto r = s.Sweep(1, 0, [](const std::string&) { return true; });
  EXPECT_EQ(r.exited, 2u);
  EXPECT_EQ(s.retired_size(), 1u);
  auto page = s.Read();
  EXPECT_EQ(page.count(Key(300)), 0u);
  EXPECT_EQ(page[Key(301)][0], 10u);
}

// A gauge (SetMayIdle): a series unchanged for idle_ns goes only when may_idle holds on its
// value, and what is taken out is dropped, not retired. Windowed: a dead task's series waits for
// may_idle too. Standing: it goes whatever its value.
TEST(MapSeriesTest, MayIdleKeepsGaugesAndDropsWhatItTakes) {
  for (auto kind : {MapSeries::Gauge::kWindowed, MapSeries::Gauge::kStanding}) {
    auto* m = new FakeMap;
    MapSeries s = Series(m);
    s.SetMayIdle([](const std::vector<uint64_t>& v) { return v[0] == 0; }, kind);
    m->entries[Key(1)] = 6;    // stands at 6
    m->entries[Key(2)] = 0;    // at 0
    m->entries[Key(300)] = 5;  // a dead task's
    EXPECT_EQ(s.Sweep(0, 10, nullptr).idle, 0u);
    auto r = s.Sweep(20, 10, [](const std::string& lk) { return KeyOf(lk) >= 100; });
    const bool windowed = kind == MapSeries::Gauge::kWindowed;
    EXPECT_EQ(r.idle, 1u);
    EXPECT_EQ(r.exited, windowed ? 0u : 1u);
    EXPECT_EQ(m->entries.count(Key(1)), 1u);
    EXPECT_EQ(m->entries.count(Key(2)), 0u);
    EXPECT_EQ(m->entries.count(Key(300)), windowed ? 1u : 0u);
    EXPECT_EQ(s.retired_size(), 0u);
    auto page = s.Read();
    EXPECT_EQ(page.count(Key(2)), 0u);
    EXPECT_EQ(page.count(Key(300)), windowed ? 1u : 0u);
  }
}

// A program changes a series between the sweep's walk and its take: the taken value fails
// may_idle and is put back whole; if a program re-created the key before the put-back, a
// standing value is retired and stays on the page (added to the live one) while it is not 0.
TEST(MapSeriesTest, GaugeChangedMidSweepIsPutBackOrRetired) {
  for (bool recreated : {false, true}) {
    SCOPED_TRACE(recreated ? "re-created" : "put back");
    auto* m = new FakeMap;
    MapSeries s = Series(m);
    s.SetMayIdle([](const std::vector<uint64_t>& v) { return v[0] == 0; }, MapSeries::Gauge::kStanding);
    m->entries[Key(1)] = 0;
    s.Sweep(0, 10, nullptr);
    m->on_delete = [&] { m->entries[Key(1)] = 4; };                 // + 4 between the walk and the take
    if (recreated) m->on_update = [&] { m->entries[Key(1)] = 1; };  // + 1 into a new entry
    auto r = s.Sweep(20, 10, nullptr);
    m->on_delete = nullptr;
    if (!recreated) {
      EXPECT_EQ(r.idle, 0u);
      EXPECT_EQ(m->entries[Key(1)], 4u);
      EXPECT_EQ(s.Read()[Key(1)][0], 4u);
    } else {
      EXPECT_EQ(r.idle, 0u) << "still on the page";
      EXPECT_EQ(s.Read()[Key(1)][0], 5u);
      m->entries.erase(Key(1));
      EXPECT_EQ(s.Read()[Key(1)][0], 4u) << "a retired standing value other than 0 stays";
      m->on_update = nullptr;
      s.Sweep(30, 0, [](const std::string&) { return true; });  // its task exited
      EXPECT_EQ(s.Read().count(Key(1)), 0u) << "a retired standing value goes with its task";
    }
  }
}

}  // namespace
}  // namespace tpe::bpf

namespace tpe::bpf {
namespace {

// A native histogram's cells (SetSeriesOf): keys 101, 102 are series 1, 201 series 2. A series
// goes idle only when none of its keys changes, leaves whole (one removal), and a retired key stays
// while another key of its series is live.
TEST(MapSeriesTest, CellsOfOneSeriesAreSweptTogether) {
  auto* m = new FakeMap;
  MapSeries s = Series(m);
  s.SetSeriesOf([](const std::string& k) { return std::to_string(KeyOf(k) / 100); });
  m->entries[Key(101)] = 4;
  m->entries[Key(102)] = 1;
  m->entries[Key(201)] = 7;
  EXPECT_EQ(s.Sweep(0, 10, nullptr).idle, 0u);
  m->entries[Key(102)] = 2;  // series 1 changes through one cell only
  auto r = s.Sweep(10, 10, nullptr);
  EXPECT_EQ(r.idle, 1u);                      // series 2, whole
  EXPECT_EQ(m->entries.count(Key(101)), 1u);  // unchanged, but its series is not idle
  EXPECT_EQ(m->entries.count(Key(201)), 0u);
  r = s.Sweep(20, 10, nullptr);
  EXPECT_EQ(r.idle, 1u);  // series 1: both cells at once
  EXPECT_TRUE(m->entries.empty());
  m->entries[Key(102)] = 1;  // the series comes back through one cell
  auto page = s.Read();
  EXPECT_EQ(page[Key(101)][0], 4u);
  EXPECT_EQ(page[Key(102)][0], 3u);
  EXPECT_EQ(page[Key(201)][0], 7u);  // series 2 was on no page yet: its final value, once
  page = s.Read();                   // 101 stays while 102 is live: the series never loses a cell
  EXPECT_EQ(page[Key(101)][0], 4u);
  EXPECT_EQ(page.count(Key(201)), 0u);
  // A series retired, back through a new cell, then idle again: the new cell's final value was on
  // a page, but with the retired cells beside it; dropping it would lower the series' count.
  m->entries.clear();
  (void)s.Read();
  s.Sweep(40, 10, nullptr);  // forget states
  m->entries[Key(401)] = 4;
  s.Sweep(50, 10, nullptr);
  EXPECT_EQ(s.Sweep(60, 10, nullptr).idle, 1u);  // 401 retired, not yet on a page
  m->entries[Key(402)] = 1;
  page = s.Read();
  auto at = [&](uint64_t k) -> uint64_t {  // 0 when the page has no such key
    auto it = page.find(Key(k));
    return it == page.end() || it->second.empty() ? 0 : it->second[0];
  };
  EXPECT_EQ(at(401) + at(402), 5u);
  s.Sweep(70, 10, nullptr);
  EXPECT_EQ(s.Sweep(80, 10, nullptr).idle, 1u);  // 402 exported as is, but 401 is retired beside it
  page = s.Read();
  EXPECT_EQ(at(401) + at(402), 5u);
  // Exited: `dead` is asked of the series.
  m->entries[Key(301)] = 1;
  m->entries[Key(302)] = 1;
  r = s.Sweep(30, 0, [](const std::string& series) { return series == "3"; });
  EXPECT_EQ(r.exited, 1u);
  EXPECT_EQ(m->entries.count(Key(301)) + m->entries.count(Key(302)), 0u);
}

}  // namespace
}  // namespace tpe::bpf
