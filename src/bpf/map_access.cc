#include "bpf/map_access.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "bpf/map_syscall_priority.h"
#include "collectors/wide_sum.h"
#include "common/file_util.h"

namespace tpe::bpf {
namespace {

constexpr int kENOTSUPP = 524;  // the kernel-internal ENOTSUPP that bpf(2) can return

int Result(int r) { return r < 0 ? (errno != 0 ? -errno : r) : 0; }

}  // namespace

// No FifoMapSyscall: BPF_MAP_GET_NEXT_KEY holds no bpf_prog_active (map_syscall_priority.h).
int KernelMap::GetNextKey(const void* key, void* next) {
  errno = 0;
  return Result(bpf_map_get_next_key(fd_, key, next));
}
int KernelMap::Lookup(const void* key, void* value) {
  FifoMapSyscall fifo;
  errno = 0;
  return Result(bpf_map_lookup_elem(fd_, key, value));
}
int KernelMap::Delete(const void* key) {
  FifoMapSyscall fifo;
  errno = 0;
  return Result(bpf_map_delete_elem(fd_, key));
}
int KernelMap::LookupAndDelete(const void* key, void* value) {
  FifoMapSyscall fifo;
  errno = 0;
  return Result(bpf_map_lookup_and_delete_elem(fd_, key, value));
}
int KernelMap::LookupBatch(const void* in_batch, void* out_batch, void* keys, void* values, uint32_t* count) {
  FifoMapSyscall fifo;
  errno = 0;
  return Result(
      bpf_map_lookup_batch(fd_, const_cast<void*>(in_batch), out_batch, keys, values, count, /*opts=*/nullptr));
}

int KernelMap::Update(const void* key, const void* value, uint64_t flags) {
  FifoMapSyscall fifo;
  errno = 0;
  return Result(bpf_map_update_elem(fd_, key, value, flags));
}
int KernelMap::LookupAndDeleteBatch(const void* in_batch, void* out_batch, void* keys, void* values, uint32_t* count) {
  FifoMapSyscall fifo;
  errno = 0;
  return Result(bpf_map_lookup_and_delete_batch(fd_, const_cast<void*>(in_batch), out_batch, keys, values, count,
                                                /*opts=*/nullptr));
}

uint64_t MapMemoryBytes(int fd) {
  auto text = ReadFileToString("/proc/self/fdinfo/" + std::to_string(fd));
  if (!text.ok()) return 0;
  const size_t at = text->find("memlock:");
  if (at == std::string::npos) return 0;
  return std::strtoull(text->c_str() + at + 8, nullptr, 10);
}

bool Unsupported(int err) { return err == -EINVAL || err == -kENOTSUPP || err == -EOPNOTSUPP; }

bool SumCpus(const uint64_t* raw, const MapShape& shape, std::vector<uint64_t>* out) {
  const uint32_t slots = shape.slots;
  const uint32_t wide_end = std::min(slots, shape.wide_at + kWideWords * shape.wide_sums);
  out->assign(slots, 0);
  bool consistent = true;
  for (uint32_t c = 0; c < shape.cpus; ++c) {
    const uint64_t* cpu = raw + static_cast<size_t>(c) * slots;
    for (uint32_t i = 0; i < slots; ++i) {
      if (i < shape.wide_at || i >= wide_end) (*out)[i] += cpu[i];
    }
    for (uint32_t i = shape.wide_at; i + kWideWords <= wide_end; i += kWideWords) {
      if (AddWide(out->data() + i, cpu + i)) continue;
      consistent = false;
      // Torn across two carries: the last completed carry, or the one in progress.
      uint64_t lenient[kWideWords] = {cpu[i + kWideCommit], cpu[i + kWideLo], cpu[i + kWideCommit]};
      if ((lenient[kWideCommit] & 1) != lenient[kWideLo] >> 63) lenient[kWideAnnounce] = lenient[kWideCommit] + 1;
      AddWide(out->data() + i, lenient);
    }
  }
  return consistent;
}

void AddValues(std::vector<uint64_t>* to, const std::vector<uint64_t>& v, const MapShape& shape) {
  if (to->size() < v.size()) to->resize(v.size(), 0);
  const size_t wide_end = std::min<size_t>(v.size(), shape.wide_at + kWideWords * shape.wide_sums);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i < shape.wide_at || i >= wide_end) (*to)[i] += v[i];
  }
  for (size_t i = shape.wide_at; i + kWideWords <= wide_end; i += kWideWords) AddWide(to->data() + i, v.data() + i);
}

BatchWalk WalkBatches(MapAccess* map, uint32_t key_size, size_t value_bytes, bool take,
                      const std::function<void(const char* keys, const char* values, uint32_t n)>& each) {
  uint32_t chunk = 256;
  uint64_t in_batch = 0, out_batch = 0;
  bool first = true;
  std::vector<char> keys;
  std::vector<uint64_t> values;  // u64 words: per-CPU values are read as u64 slots
  for (;;) {
    keys.resize(static_cast<size_t>(chunk) * key_size);
    values.resize((static_cast<size_t>(chunk) * value_bytes + 7) / 8);
    uint32_t count = chunk;
    const void* in = first ? nullptr : &in_batch;
    const int r = take ? map->LookupAndDeleteBatch(in, &out_batch, keys.data(), values.data(), &count)
                       : map->LookupBatch(in, &out_batch, keys.data(), values.data(), &count);
    if (r == 0 || r == -ENOENT) {
      each(keys.data(), reinterpret_cast<const char*>(values.data()), count);
      if (r == -ENOENT) return BatchWalk::kDone;
      in_batch = out_batch;
      first = false;
      continue;
    }
    if (r == -ENOSPC && chunk < (1u << 20)) {  // one bucket holds more than `chunk` entries
      chunk *= 2;
      continue;
    }
    return first ? BatchWalk::kRefused : BatchWalk::kFailed;
  }
}

namespace {

// Reads of one entry whose wide sum keeps reading torn (SumCpus) before its last read is taken.
constexpr int kTornRereads = 100;

// e->value from its per-CPU words `raw` (value_words u64, a buffer the lookups may reuse); an
// entry read torn is looked up again. False when it was deleted meanwhile.
bool SumEntry(MapAccess* map, const MapShape& shape, uint64_t* raw, MapEntry* e) {
  for (int i = 0; !SumCpus(raw, shape, &e->value) && i < kTornRereads; ++i) {
    if (map->Lookup(e->key.data(), raw) != 0) return false;
  }
  return true;
}

// BPF_MAP_LOOKUP_BATCH: false when the kernel refused it (or failed midway: the caller starts
// over with get_next_key).
bool ReadBatch(MapAccess* map, const MapShape& shape, std::vector<MapEntry>* out) {
  const size_t value_words = static_cast<size_t>(shape.slots) * shape.cpus;
  std::vector<uint64_t> raw(value_words);
  const BatchWalk walk = WalkBatches(
      map, shape.key_size, value_words * 8, /*take=*/false, [&](const char* keys, const char* values, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) {
          MapEntry e;
          e.key.assign(keys + static_cast<size_t>(i) * shape.key_size, shape.key_size);
          std::copy_n(reinterpret_cast<const uint64_t*>(values) + i * value_words, value_words, raw.data());
          if (SumEntry(map, shape, raw.data(), &e)) out->push_back(std::move(e));
        }
      });
  if (walk == BatchWalk::kDone) return true;
  out->clear();
  return false;
}

}  // namespace

std::vector<MapEntry> ReadMap(MapAccess* map, const MapShape& shape, bool* batch) {
  std::vector<MapEntry> out;
  if (*batch) {
    if (ReadBatch(map, shape, &out)) return out;
    *batch = false;  // refused (an old kernel) or failed midway: the get_next_key walk from here on
  }
  const size_t value_words = static_cast<size_t>(shape.slots) * shape.cpus;
  std::vector<uint64_t> raw(value_words);
  std::set<std::string> seen;
  std::string cur(shape.key_size, '\0'), next(shape.key_size, '\0');
  const void* prev = nullptr;
  // A walk restarts at the first key whenever its previous key was deleted: bounded so that a
  // map emptied and refilled faster than we walk cannot keep us here.
  const size_t max_steps = 4 * static_cast<size_t>(std::max<uint32_t>(shape.max_entries, 1)) + 64;
  for (size_t step = 0; step < max_steps && map->GetNextKey(prev, next.data()) == 0; ++step) {
    cur = next;
    prev = cur.data();
    if (!seen.insert(cur).second) continue;                  // a restart: read already
    if (map->Lookup(cur.data(), raw.data()) != 0) continue;  // deleted meanwhile
    MapEntry e{cur, {}};
    if (SumEntry(map, shape, raw.data(), &e)) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace tpe::bpf
