#include "bpf/start_sweep.h"

#include <linux/bpf.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace tpe::bpf {

StartSweeper::StartSweeper(MapAccess* map, MapShape shape, uint64_t timeout_ns, Mode mode)
    : map_(map), shape_(shape), timeout_ns_(timeout_ns), mode_(mode) {}

const char* StartSweeper::ModeName(Mode mode) {
  switch (mode) {
    case Mode::kLookupAndDelete:
      return "lookup_and_delete";
    case Mode::kBatch:
      return "lookup_and_delete_batch";
    case Mode::kCheckThenDelete:
      return "lookup_then_delete";
  }
  return "?";
}

bool StartSweeper::Expired(uint64_t start_ns, uint64_t now_ns) const {
  return now_ns > start_ns && now_ns - start_ns > timeout_ns_;
}

void StartSweeper::Settle(const char* key, const char* value, uint64_t now_ns, StartSweepCounts* out) {
  uint64_t start_ns = 0;
  std::memcpy(&start_ns, value, 8);
  if (Expired(start_ns, now_ns)) {
    ++out->expired;
    return;
  }
  const int r = map_->Update(key, value, BPF_NOEXIST);
  if (r == 0) return;  // put back: still pending
  if (r == -EEXIST) {
    ++out->replaced;  // a newer start holds the key: this one was replaced
  } else {
    ++out->table_full;  // -E2BIG (full) or -ENOMEM: it cannot wait for its end any more
  }
}

bool StartSweeper::TakeAll(uint64_t now_ns, StartSweepCounts* out) {
  const size_t value_bytes = static_cast<size_t>(shape_.slots) * 8;
  const BatchWalk walk = WalkBatches(
      map_, shape_.key_size, value_bytes, /*take=*/true, [&](const char* keys, const char* values, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) {
          Settle(keys + static_cast<size_t>(i) * shape_.key_size, values + i * value_bytes, now_ns, out);
        }
      });
  return walk != BatchWalk::kRefused;  // a failure midway keeps what was settled
}

StartSweepCounts StartSweeper::Sweep(uint64_t now_ns) {
  StartSweepCounts out;
  std::vector<MapEntry> expired;
  for (MapEntry& e : ReadMap(map_, shape_, &read_batch_)) {
    if (e.value.empty()) continue;
    if (Expired(e.value[0], now_ns)) {
      expired.push_back(std::move(e));
    } else {
      ++out.inflight;
    }
  }
  if (expired.empty()) return out;
  std::vector<char> value(static_cast<size_t>(shape_.slots) * 8);
  if (mode_ == Mode::kLookupAndDelete) {
    for (size_t i = 0; i < expired.size(); ++i) {
      const int r = map_->LookupAndDelete(expired[i].key.data(), value.data());
      if (r == 0) {
        Settle(expired[i].key.data(), value.data(), now_ns, &out);
      } else if (Unsupported(r)) {
        mode_ = Mode::kBatch;  // before 5.14: take the map in chunks (none of these was taken)
        break;
      }
      // -ENOENT: an end took it first and counted it.
    }
    if (mode_ == Mode::kLookupAndDelete) return out;
  }
  if (mode_ == Mode::kBatch) {
    StartSweepCounts taken;
    if (TakeAll(now_ns, &taken)) {
      out.expired += taken.expired;
      out.replaced += taken.replaced;
      out.table_full += taken.table_full;
      return out;
    }
    mode_ = Mode::kCheckThenDelete;
  }
  for (const MapEntry& e : expired) {
    if (map_->Lookup(e.key.data(), value.data()) != 0) continue;  // an end took it
    uint64_t now_value = 0;
    std::memcpy(&now_value, value.data(), 8);
    if (now_value != e.value[0]) continue;  // a newer start replaced it (the program counted it)
    if (map_->Delete(e.key.data()) == 0) ++out.expired;
  }
  return out;
}

}  // namespace tpe::bpf
