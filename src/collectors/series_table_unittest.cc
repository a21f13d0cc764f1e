#include "collectors/series_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collectors/collector.h"

namespace tpe {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

std::set<std::string> Keys(const SeriesTable<RelaxedCounter>& t) {
  std::set<std::string> out;
  t.ForEach([&](std::string_view k, const RelaxedCounter&) { out.emplace(k); });
  return out;
}

const auto kNoneExited = [](std::string_view) { return false; };

TEST(SeriesTableTest, IdleSeriesAreRemoved) {
  SeriesTable<RelaxedCounter> t(10);
  t.FindOrInsert("a")->Add(1);
  t.FindOrInsert("b")->Add(1);
  t.Sweep(1 * kSecond, 3 * kSecond, kNoneExited);  // both just changed
  t.FindOrInsert("a")->Add(1);
  t.Sweep(3 * kSecond, 3 * kSecond, kNoneExited);  // a changed again
  EXPECT_EQ(Keys(t), (std::set<std::string>{"a", "b"}));
  t.Sweep(4 * kSecond + 1, 3 * kSecond, kNoneExited);  // b unchanged for 3 s: gone; a for 1 s: kept
  EXPECT_EQ(Keys(t), (std::set<std::string>{"a"}));
  EXPECT_EQ(t.removed_idle(), 1u);
  t.Sweep(100 * kSecond, 0, kNoneExited);  // idle timeout 0: never
  EXPECT_EQ(Keys(t), (std::set<std::string>{"a"}));
  // A removed series that comes back starts again from 0.
  EXPECT_EQ(t.FindOrInsert("b")->Get(), 0u);
}

// Ids: increasing in the walk's order, kept by a series while it lives, new for a series made
// again after its removal (a window's baseline merges two walks by id).
TEST(SeriesTableTest, IdsIncreaseAlongTheWalkAndAreNeverReused) {
  SeriesTable<RelaxedCounter> t(10);
  auto ids = [&] {
    std::vector<std::pair<uint64_t, std::string>> out;
    t.ForEachWithId([&](uint64_t id, std::string_view k, const RelaxedCounter&) { out.emplace_back(id, k); });
    return out;
  };
  t.FindOrInsert("a")->Add(1);
  t.FindOrInsert("b")->Add(1);
  t.FindOrInsert("c")->Add(1);
  const auto first = ids();
  ASSERT_EQ(first.size(), 3u);
  EXPECT_LT(first[0].first, first[1].first);
  EXPECT_LT(first[1].first, first[2].first);
  t.Sweep(1 * kSecond, 3 * kSecond, kNoneExited);
  t.FindOrInsert("a")->Add(1);
  t.FindOrInsert("c")->Add(1);
  t.Sweep(5 * kSecond, 3 * kSecond, kNoneExited);  // b idle: gone
  t.FindOrInsert("b")->Add(1);                     // made again
  const auto second = ids();
  ASSERT_EQ(second.size(), 3u);
  EXPECT_EQ(second[0], first[0]);
  EXPECT_EQ(second[1], first[2]);
  EXPECT_EQ(second[2].second, "b");
  EXPECT_GT(second[2].first, first[2].first) << "a new id, not b's old one";
}

// Fork churn: the table is full of dead tasks' series; a new task's series still gets in.
TEST(SeriesTableTest, DeadTasksSeriesMakeRoomForNewOnes) {
  SeriesTable<RelaxedCounter> t(2);
  t.FindOrInsert("pid7")->Add(1);
  t.FindOrInsert("pid8")->Add(1);
  EXPECT_EQ(t.FindOrInsert("pid9"), nullptr);  // full, nobody dead: dropped (the caller counts it)
  auto exited7 = [](std::string_view k) { return k == "pid7"; };
  t.Sweep(1 * kSecond, 0, exited7);
  EXPECT_EQ(Keys(t).count("pid7"), 1u);           // removable, but its last value was never scraped
  RelaxedCounter* nine = t.FindOrInsert("pid9");  // full: the dead task's series makes room
  ASSERT_NE(nine, nullptr);
  nine->Add(1);
  EXPECT_EQ(Keys(t), (std::set<std::string>{"pid8", "pid9"}));
  EXPECT_EQ(t.removed_exited(), 1u);
}

TEST(SeriesTableTest, DeadTasksSeriesGoOnceTheirFinalValueWasScraped) {
  SeriesTable<RelaxedCounter> t(10);
  t.FindOrInsert("pid7")->Add(5);
  auto exited7 = [](std::string_view k) { return k == "pid7"; };
  t.Sweep(1 * kSecond, 0, exited7);
  EXPECT_EQ(Keys(t).size(), 1u);   // a scrape (Keys) has now exported 5
  t.FindOrInsert("pid7")->Add(1);  // a trailing sample after the scrape
  t.Sweep(2 * kSecond, 0, kNoneExited);
  EXPECT_EQ(Keys(t).size(), 1u);  // 6 was not exported yet when the sweep ran; this scrape exports it
  t.Sweep(3 * kSecond, 0, kNoneExited);
  EXPECT_TRUE(Keys(t).empty());
  EXPECT_EQ(t.removed_exited(), 1u);
}

}  // namespace
}  // namespace tpe
