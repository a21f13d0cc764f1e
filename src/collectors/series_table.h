// A table of series (one per distinct label set) with one writer and concurrent scrapes.
//
// The writer (the reader thread) finds a series by its binary label key with one hash lookup
// and no allocation; only a label set never seen before allocates, once, and takes the mutex
// to append it. Values are updated with relaxed atomic stores (single writer), so a scrape —
// which takes the mutex only to walk the list of series — never blocks the writer per event.
//
// Series have a lifetime (docs/ARCHITECTURE.md "Series have a lifetime"):
//  * Sweep() (the writer, about once a second) removes series whose value has not changed for
//    `idle_ns` (settings.series_idle_timeout_seconds; 0 = never), and marks removable the series
//    of tasks that exited (pid/tid labels; the caller tells which keys through `is_exited`). A
//    removable series is removed once a scrape has exported its final value.
//  * At most `max_series` series exist. When full, FindOrInsert first evicts the oldest
//    removable series (a dead task's) to make room — so under fork churn a new task's series
//    appears at once — and only when there is none returns null (the caller counts the drop in
//    tracepoint_exporter_series_dropped_total).
// Removals are counted by reason (removed_idle(), removed_exited()).
//
// V must have `uint64_t Count() const` that changes whenever the series is updated. It may have
// `bool MayIdle() const`: while false, the series never goes idle (a gauge standing at a value
// other than 0, collectors/gauge.h); its task's exit still removes it.
//
// Thread-safety: FindOrInsert and Sweep from one writer thread; ForEach from any thread.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tpe {

template <typename V>
class SeriesTable {
 public:
  explicit SeriesTable(size_t max_series) : max_series_(max_series) {}
  SeriesTable(const SeriesTable&) = delete;
  SeriesTable& operator=(const SeriesTable&) = delete;

  // The series for `key`, created on first sight (then `init(value)` runs under the lock, so
  // a concurrent scrape never sees it half-built); null when the table is full and no series is
  // removable.
  template <typename Init>
  V* FindOrInsert(std::string_view key, Init&& init) {
    auto it = index_.find(key);
    if (it != index_.end()) return &it->second->value;
    if (index_.size() >= max_series_ && !EvictRemovable()) return nullptr;
    Entry* e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      entries_.emplace_back(std::string(key), next_id_++);
      e = &entries_.back();
      e->self = std::prev(entries_.end());
      init(e->value);
    }
    e->last_change_ns = now_ns_;
    index_.emplace(std::string_view(e->key), e);
    return &e->value;
  }

  V* FindOrInsert(std::string_view key) {
    return FindOrInsert(key, [](V&) {});
  }

  // The series for `key`, or null (nothing created). Writer thread.
  V* Find(std::string_view key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->value;
  }

  // See above. `now_ns`: a monotonic clock (the samples' CLOCK_MONOTONIC is fine).
  // `is_exited(key)`: whether the task a pid/tid label of `key` names has exited.
  template <typename IsExited>
  void Sweep(uint64_t now_ns, uint64_t idle_ns, IsExited&& is_exited) {
    now_ns_ = now_ns;
    std::vector<Entry*> idle, exited;
    for (auto& [key, e] : index_) {
      const uint64_t c = e->value.Count();
      if (c != e->last_count) {
        e->last_count = c;
        e->last_change_ns = now_ns;
      }
      if constexpr (requires(const V& v) { v.MayIdle(); }) {
        if (!e->value.MayIdle()) e->last_change_ns = now_ns;
      }
      if (idle_ns != 0 && now_ns - e->last_change_ns >= idle_ns) {
        idle.push_back(e);
        continue;
      }
      if (!e->removable && is_exited(key)) {
        e->removable = true;
        removable_.push_back(e->key);
      }
      if (e->removable && e->scraped.load(std::memory_order_relaxed) == c) exited.push_back(e);
    }
    for (Entry* e : idle) Erase(e);
    for (Entry* e : exited) Erase(e);
    if (removable_.size() > 2 * max_series_ + 64) {  // keys of series a sweep removed pile up
      std::deque<std::string> still;
      for (auto& k : removable_) {
        auto it = index_.find(k);
        if (it != index_.end() && it->second->removable) still.push_back(std::move(k));
      }
      removable_.swap(still);
    }
    removed_idle_.fetch_add(idle.size(), std::memory_order_relaxed);
    removed_exited_.fetch_add(exited.size(), std::memory_order_relaxed);
  }

  size_t size() const { return index_.size(); }  // writer thread only

  // Calls f(key, value) for every series. Values may be read while the writer updates them.
  template <typename F>
  void ForEach(F&& f) const {
    ForEachWithId([&](uint64_t, std::string_view key, const V& value) { f(key, value); });
  }
  // The same with f(id, key, value): `id` names the series for as long as this table lives (a
  // series removed and made again gets a new one), and the series come in increasing id order,
  // so two walks can be merged without looking keys up.
  template <typename F>
  void ForEachWithId(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      // Noted before f reads the value, so the value exported is at least this count.
      e.scraped.store(e.value.Count(), std::memory_order_relaxed);
      f(e.id, std::string_view(e.key), e.value);
    }
  }

  uint64_t removed_idle() const { return removed_idle_.load(std::memory_order_relaxed); }
  uint64_t removed_exited() const { return removed_exited_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    Entry(std::string k, uint64_t i) : key(std::move(k)), id(i) {}
    std::string key;
    const uint64_t id;  // increasing in entries_' order (appended with the next id)
    V value;
    typename std::list<Entry>::iterator self;
    uint64_t last_count = 0;                            // writer only
    uint64_t last_change_ns = 0;                        // writer only
    bool removable = false;                             // writer only: its task exited
    mutable std::atomic<uint64_t> scraped{UINT64_MAX};  // Count() when a scrape last exported it
  };

  void Erase(Entry* e) {
    index_.erase(std::string_view(e->key));
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(e->self);
  }

  // Removes the oldest removable series still present; false when there is none.
  bool EvictRemovable() {
    while (!removable_.empty()) {
      auto it = index_.find(removable_.front());
      const bool present = it != index_.end() && it->second->removable;
      if (present) {
        Erase(it->second);
        removable_.pop_front();
        removed_exited_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      removable_.pop_front();  // already removed by a sweep
    }
    return false;
  }

  const size_t max_series_;
  // Writer only; views into entries_. Abseil's open-addressing table (a probe of its control
  // bytes, then the slot): a sample's lookup touches fewer cache lines than a node-based map's.
  absl::flat_hash_map<std::string_view, Entry*> index_;
  std::list<Entry> entries_;           // stable addresses; guarded by mu_
  std::deque<std::string> removable_;  // writer only: keys of dead tasks' series, oldest first
  uint64_t now_ns_ = 0;                // writer only: the last sweep's clock
  uint64_t next_id_ = 0;               // guarded by mu_
  std::atomic<uint64_t> removed_idle_{0}, removed_exited_{0};
  mutable std::mutex mu_;
};

}  // namespace tpe
