// The table of latency starts waiting for their end: a fixed-capacity open-addressing hash map
// (linear probing, backward-shift deletion) from a fixed-size binary key (up to kMaxKeyBytes:
// e.g. pid, or dev+sector) to {start time, start label id}. Capacity is set once, so no
// operation allocates. The slots come from calloc: the kernel backs them with zero pages until
// a key is written, so resident memory follows the keys in use, not max_entries (64 bytes a
// slot, 2 slots per entry).
//
// Thread-safety: single-threaded (the reader thread).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "decode/field_extractor.h"

namespace tpe {

// The key of a start or an end in the table: each of `fields` read from `raw` as 8 bytes, in
// order (start and end keys are equal exactly when their fields' values are). False when a
// field lies outside `raw`.
bool BuildMatchKey(const std::vector<FieldExtractor>& fields, Bytes raw, std::string* key);

class InflightTable {
 public:
  static constexpr size_t kMaxKeyBytes = 32;

  struct Start {
    uint64_t time_ns = 0;
    uint32_t label_id = 0;
  };

  // At most `max_entries` entries at once.
  explicit InflightTable(size_t max_entries);
  ~InflightTable();
  InflightTable(const InflightTable&) = delete;
  InflightTable& operator=(const InflightTable&) = delete;

  enum class PutResult { kInserted, kReplaced, kFull };
  // Records a start for `key` (at most kMaxKeyBytes; longer keys are cut). A start already
  // there for the key is replaced (kReplaced); kFull when max_entries are in flight.
  // `replaced`, when not null, receives the start that was replaced.
  PutResult Put(std::string_view key, Start start, Start* replaced = nullptr);
  // Removes and returns the start for `key`; false when there is none.
  bool Take(std::string_view key, Start* out);
  // Removes every start older than `cutoff_ns`; returns how many. Scans the table only when a
  // start may be that old (a lower bound of the oldest start is kept), so calling it often on a
  // large, idle or fast-moving table costs nothing.
  size_t ExpireBefore(uint64_t cutoff_ns);
  // The same, calling `expired(start)` for each start removed.
  size_t ExpireBefore(uint64_t cutoff_ns, const std::function<void(const Start&)>& expired);
  // Full scans done by ExpireBefore (for tests).
  size_t scans() const { return scans_; }

  size_t size() const { return size_; }
  size_t max_entries() const { return max_entries_; }

 private:
  struct Slot {     // trivial: all-zero bytes are an empty slot
    uint64_t hash;  // 0 = empty
    uint8_t len;
    char key[kMaxKeyBytes];
    Start start;
  };
  static uint64_t Hash(std::string_view key);
  size_t Find(std::string_view key, uint64_t h) const;  // slot index or npos
  void EraseAt(size_t i);

  Slot* slots_;  // owned; calloc'ed, capacity mask_ + 1
  size_t mask_;
  size_t size_ = 0;
  size_t max_entries_;
  uint64_t oldest_bound_ns_ = UINT64_MAX;  // no start in the table is older
  size_t scans_ = 0;
};

}  // namespace tpe
