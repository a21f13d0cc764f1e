// User-space access to one BPF hash map (BPF_MAP_TYPE_HASH or PERCPU_HASH), behind an interface
// so that tests can replay what other CPUs and processes do to the map between two syscalls.
//
// MapAccess is the bpf(2) commands we use (include/uapi/linux/bpf.h; libbpf's bpf.h wrappers):
//   BPF_MAP_GET_NEXT_KEY, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM,
//   BPF_MAP_LOOKUP_AND_DELETE_ELEM (hash maps since 5.14), BPF_MAP_LOOKUP_BATCH and
//   BPF_MAP_LOOKUP_AND_DELETE_BATCH (5.6).
// Each returns 0 or a negative errno, as the kernel does.
//
// ReadMap() reads every entry exactly once, whatever deletes happen meanwhile (an entry whose wide
// sum was read torn, SumCpus, is looked up again):
//   * with BPF_MAP_LOOKUP_BATCH where the kernel has it (the walk goes bucket by bucket and never
//     restarts);
//   * otherwise with get_next_key, which restarts from the first key when the key it was given has
//     been deleted meanwhile (htab_map_get_next_key: "key was not found, return the first key"), so
//     keys already read are skipped: no entry is counted twice.
//
// Thread-safety: a MapAccess is as thread-safe as the kernel's map (KernelMap: any thread);
// ReadMap keeps no state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tpe::bpf {

class MapAccess {
 public:
  virtual ~MapAccess() = default;
  // `key` null: the first key. -ENOENT after the last key.
  virtual int GetNextKey(const void* key, void* next) = 0;
  // `value`: value_size bytes, or one 8-byte-rounded value per possible CPU for per-CPU maps.
  virtual int Lookup(const void* key, void* value) = 0;
  virtual int Delete(const void* key) = 0;
  // `flags`: BPF_ANY, BPF_NOEXIST (-EEXIST when the key is there) or BPF_EXIST. -E2BIG when the
  // map is full, -ENOMEM when the kernel cannot allocate the element.
  virtual int Update(const void* key, const void* value, uint64_t flags) = 0;
  // The value, and the entry unlinked, in one command. -EINVAL/-ENOTSUPP/-EOPNOTSUPP where the
  // kernel does not have it for this map type.
  virtual int LookupAndDelete(const void* key, void* value) = 0;
  // Up to *count entries from the position `in_batch` (null: the start) names; *count is set to
  // the number returned and `out_batch` to the next position (8 bytes). -ENOENT: the walk is done
  // (*count entries were still returned); -ENOSPC: one bucket holds more than *count entries.
  virtual int LookupBatch(const void* in_batch, void* out_batch, void* keys, void* values, uint32_t* count) = 0;
  // As LookupBatch, and every entry returned is unlinked under its bucket's lock in the same
  // command (htab_map_lookup_and_delete_batch: a whole bucket at a time).
  virtual int LookupAndDeleteBatch(const void* in_batch, void* out_batch, void* keys, void* values,
                                   uint32_t* count) = 0;
};

// The map behind a map fd, through libbpf. Does not own the fd.
class KernelMap : public MapAccess {
 public:
  explicit KernelMap(int fd) : fd_(fd) {}
  int GetNextKey(const void* key, void* next) override;
  int Lookup(const void* key, void* value) override;
  int Delete(const void* key) override;
  int LookupAndDelete(const void* key, void* value) override;
  int LookupBatch(const void* in_batch, void* out_batch, void* keys, void* values, uint32_t* count) override;
  int Update(const void* key, const void* value, uint64_t flags) override;
  int LookupAndDeleteBatch(const void* in_batch, void* out_batch, void* keys, void* values, uint32_t* count) override;

 private:
  int fd_;
};

// The shape of a map's values as user space reads them: `slots` u64 per CPU copy, `cpus` copies
// (PossibleCpus() for per-CPU maps, 1 otherwise), summed slot by slot — except wide sums.
struct MapShape {
  uint32_t key_size = 8;
  uint32_t slots = 1;
  uint32_t cpus = 1;
  uint32_t max_entries = 0;  // bounds the get_next_key walk (a map that keeps changing)
  // A (per-CPU) array: every entry always exists and none can be deleted (EINVAL), so
  // MapSeries::Sweep removes nothing from it.
  bool array = false;
  // Slots [wide_at, wide_at + kWideWords × wide_sums) are that many 128-bit sums of three words
  // each (collectors/wide_sum.h): added up as sums, and left at rest (commit == announce).
  uint32_t wide_at = 0, wide_sums = 0;
};

struct MapEntry {
  std::string key;
  std::vector<uint64_t> value;  // `slots` u64, summed over CPUs
};

// Walks the map a chunk of buckets at a time with BPF_MAP_LOOKUP_BATCH, or with `take`
// BPF_MAP_LOOKUP_AND_DELETE_BATCH (every entry returned is unlinked), calling `each(keys,
// values, n)` per chunk: n keys of key_size bytes and n values of value_bytes bytes. A bucket
// larger than the chunk doubles it. Returns kDone at the end of the map, kRefused when the kernel
// refused the command before returning anything (EINVAL on kernels without it), kFailed when a
// later call failed (what was handed to `each` stays handed).
enum class BatchWalk { kDone, kRefused, kFailed };
BatchWalk WalkBatches(MapAccess* map, uint32_t key_size, size_t value_bytes, bool take,
                      const std::function<void(const char* keys, const char* values, uint32_t n)>& each);

// Every entry of the map, each once (see above). `batch`: in/out — whether to try
// BPF_MAP_LOOKUP_BATCH; set to false when the kernel refused it (EINVAL, ENOTSUPP, EOPNOTSUPP), so
// later reads go straight to the fallback.
std::vector<MapEntry> ReadMap(MapAccess* map, const MapShape& shape, bool* batch);

// Sums shape.cpus copies of shape.slots u64 in `raw` into *out (shape.slots values), wide sums as
// sums. False when a CPU's wide sum was read across two carries (DecodeWide): read the entry
// again; *out then takes that CPU's sum as of its last completed carry or the one in progress,
// whichever lo's top bit names (a reader stalled that long: never seen).
bool SumCpus(const uint64_t* raw, const MapShape& shape, std::vector<uint64_t>* out);
// Adds `v` (summed values of `shape`) into *to slot by slot, wide sums as sums; *to grows to v's
// size (zeros: the sum 0).
void AddValues(std::vector<uint64_t>* to, const std::vector<uint64_t>& v, const MapShape& shape);

// The kernel memory charged to the map behind `fd` (bytes): the "memlock:" line of
// /proc/self/fdinfo/<fd> (kernel/bpf/syscall.c bpf_map_show_fdinfo; bpf_map_memory_usage() on
// 6.4+, an estimate of the up-front allocation before). 0 when unreadable.
uint64_t MapMemoryBytes(int fd);

// Whether `err` (negative errno) means "this kernel does not have the command for this map".
bool Unsupported(int err);

}  // namespace tpe::bpf
