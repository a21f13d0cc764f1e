// The table of latency starts waiting for their end: a fixed-capacity open-addressing hash map
// (linear probing, backward-shift deletion) from a fixed-size binary key (up to kMaxKeyBytes:
// e.g. pid, or dev+sector) to {start time, start label id}. The table starts at kMinCapacity
// slots and doubles when half full, up to the power of two at least twice max_entries: memory
// follows the most starts ever in flight at once (64 bytes a slot, 2 to 4 slots per entry),
// not max_entries nor the number of distinct keys seen. A fixed table of max_entries * 2 slots
// would be written a page here and a page there by keys hashed all over it, and over hours
// every page would be resident (16 MiB per latency metric at the default max_inflight).
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
  static constexpr size_t kMinCapacity = 64;  // slots: one 4 KiB page

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
  // there for the key is replaced (kReplaced); kFull when max_entries are in flight (or when
  // the table could not double: out of memory). `replaced`, when not null, receives the start
  // that was replaced. Allocates only when the table doubles (at most log2(max_entries) times
  // over its life).
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
  // Slots allocated now (a power of two).
  size_t capacity() const { return slots_ == nullptr ? 0 : mask_ + 1; }

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
  // Doubles the slots and re-inserts every entry; false at max_capacity_ or out of memory.
  bool Grow();

  Slot* slots_ = nullptr;  // owned; calloc'ed, capacity mask_ + 1
  size_t mask_ = 0;
  size_t max_capacity_;  // the power of two at least twice max_entries
  size_t size_ = 0;
  size_t max_entries_;
  uint64_t oldest_bound_ns_ = UINT64_MAX;  // no start in the table is older
  size_t scans_ = 0;
};

}  // namespace tpe
