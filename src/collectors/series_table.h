// A table of series (one per distinct label set) with one writer and concurrent scrapes.
//
// The writer (the reader thread) finds a series by its binary label key with one hash lookup
// and no allocation; only a label set never seen before allocates, once, and takes the mutex
// to append it. Values are updated with relaxed atomic stores (single writer), so a scrape —
// which takes the mutex only to walk the list of series — never blocks the writer per event.
// At most `max_series` series exist; beyond that FindOrInsert returns null and the caller
// counts the drop (self-metric tracepoint_exporter_series_dropped_total).
//
// Thread-safety: FindOrInsert from one writer thread; ForEach from any thread.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tpe {

template <typename V>
class SeriesTable {
 public:
  explicit SeriesTable(size_t max_series) : max_series_(max_series) {}
  SeriesTable(const SeriesTable&) = delete;
  SeriesTable& operator=(const SeriesTable&) = delete;

  // The series for `key`, created on first sight (then `init(value)` runs under the lock, so
  // a concurrent scrape never sees it half-built); null when the table is full.
  template <typename Init>
  V* FindOrInsert(std::string_view key, Init&& init) {
    auto it = index_.find(key);
    if (it != index_.end()) return &it->second->value;
    if (index_.size() >= max_series_) return nullptr;
    Entry* e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      e = &entries_.emplace_back(std::string(key));
      init(e->value);
    }
    index_.emplace(std::string_view(e->key), e);
    return &e->value;
  }

  V* FindOrInsert(std::string_view key) {
    return FindOrInsert(key, [](V&) {});
  }

  size_t size() const { return index_.size(); }  // writer thread only

  // Calls f(key, value) for every series. Values may be read while the writer updates them.
  template <typename F>
  void ForEach(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) f(std::string_view(e.key), e.value);
  }

 private:
  struct Entry {
    explicit Entry(std::string k) : key(std::move(k)) {}
    std::string key;
    V value;
  };
  const size_t max_series_;
  std::unordered_map<std::string_view, Entry*> index_;  // writer only; views into entries_
  std::deque<Entry> entries_;                           // stable addresses; guarded by mu_
  mutable std::mutex mu_;
};

}  // namespace tpe
