#include "collectors/inflight_table.h"

#include <algorithm>
#include <cstdlib>

namespace tpe {

bool BuildMatchKey(const std::vector<FieldExtractor>& fields, Bytes raw, std::string* key) {
  key->clear();
  for (const auto& f : fields) {
    int64_t v = 0;
    if (!f.ReadInteger(raw, &v)) return false;
    key->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  return true;
}

InflightTable::InflightTable(size_t max_entries) : max_entries_(max_entries) {
  max_capacity_ = kMinCapacity;
  while (max_capacity_ < max_entries * 2) max_capacity_ <<= 1;  // load factor <= 0.5: short probes
  slots_ = static_cast<Slot*>(std::calloc(kMinCapacity, sizeof(Slot)));
  // Out of memory: a table that holds nothing; every Put reports kFull (counted as
  // table_full), nothing crashes.
  if (slots_ == nullptr) max_entries_ = 0;
  mask_ = slots_ == nullptr ? 0 : kMinCapacity - 1;
}

bool InflightTable::Grow() {
  if (slots_ == nullptr || mask_ + 1 >= max_capacity_) return false;
  const size_t cap = (mask_ + 1) * 2;
  Slot* grown = static_cast<Slot*>(std::calloc(cap, sizeof(Slot)));
  if (grown == nullptr) return false;
  for (size_t i = 0; i <= mask_; ++i) {
    if (slots_[i].hash == 0) continue;
    size_t j = slots_[i].hash & (cap - 1);
    while (grown[j].hash != 0) j = (j + 1) & (cap - 1);
    grown[j] = slots_[i];
  }
  std::free(slots_);
  slots_ = grown;
  mask_ = cap - 1;
  return true;
}

InflightTable::~InflightTable() { std::free(slots_); }

uint64_t InflightTable::Hash(std::string_view key) {
  // Keys are 8-byte integer fields: mix a word at a time (murmur3's finalizer per word).
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ key.size();
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, key.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  for (; i < key.size(); ++i) h = (h ^ static_cast<unsigned char>(key[i])) * 0x100000001b3ULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h | 1;  // never 0 (0 marks an empty slot)
}

size_t InflightTable::Find(std::string_view key, uint64_t h) const {
  if (slots_ == nullptr) return static_cast<size_t>(-1);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return static_cast<size_t>(-1);
    if (s.hash == h && s.len == key.size() && std::memcmp(s.key, key.data(), key.size()) == 0) return i;
  }
}

InflightTable::PutResult InflightTable::Put(std::string_view key, Start start, Start* replaced) {
  key = key.substr(0, kMaxKeyBytes);
  const uint64_t h = Hash(key);
  size_t i = Find(key, h);
  oldest_bound_ns_ = std::min(oldest_bound_ns_, start.time_ns);
  if (i != static_cast<size_t>(-1)) {
    if (replaced != nullptr) *replaced = slots_[i].start;
    slots_[i].start = start;
    return PutResult::kReplaced;
  }
  if (size_ >= max_entries_) return PutResult::kFull;
  // Half full: double. When it cannot (out of memory), fill on while a slot stays empty
  // (probes end at an empty slot).
  if ((size_ + 1) * 2 > mask_ + 1 && !Grow() && size_ + 1 >= mask_ + 1) return PutResult::kFull;
  for (i = h & mask_; slots_[i].hash != 0; i = (i + 1) & mask_) {
  }
  Slot& s = slots_[i];
  s.hash = h;
  s.len = static_cast<uint8_t>(key.size());
  std::memcpy(s.key, key.data(), key.size());
  s.start = start;
  ++size_;
  return PutResult::kInserted;
}

void InflightTable::EraseAt(size_t i) {
  // Backward-shift deletion: pull later entries of the probe run into the hole.
  size_t hole = i;
  for (size_t j = (i + 1) & mask_; slots_[j].hash != 0; j = (j + 1) & mask_) {
    const size_t home = slots_[j].hash & mask_;
    // Move j into the hole if its home is not cyclically in (hole, j].
    const bool home_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!home_between) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole].hash = 0;
  --size_;
}

bool InflightTable::Take(std::string_view key, Start* out) {
  key = key.substr(0, kMaxKeyBytes);
  const size_t i = Find(key, Hash(key));
  if (i == static_cast<size_t>(-1)) return false;
  *out = slots_[i].start;
  EraseAt(i);
  return true;
}

size_t InflightTable::ExpireBefore(uint64_t cutoff_ns) { return ExpireBefore(cutoff_ns, nullptr); }

size_t InflightTable::ExpireBefore(uint64_t cutoff_ns, const std::function<void(const Start&)>& expired) {
  // Nothing can be older than the bound: no scan (an idle table, or starts that end quickly,
  // cost nothing; a full scan happens about once per timeout, not once a call).
  if (size_ == 0 || cutoff_ns <= oldest_bound_ns_) return 0;
  ++scans_;
  size_t removed = 0;
  uint64_t oldest = UINT64_MAX;
  for (size_t i = 0; slots_ != nullptr && i <= mask_;) {
    if (slots_[i].hash != 0 && slots_[i].start.time_ns < cutoff_ns) {
      if (expired) expired(slots_[i].start);
      EraseAt(i);  // may pull a later entry into i: look at i again
      ++removed;
    } else {
      if (slots_[i].hash != 0) oldest = std::min(oldest, slots_[i].start.time_ns);
      ++i;
    }
  }
  oldest_bound_ns_ = oldest;
  return removed;
}

}  // namespace tpe
