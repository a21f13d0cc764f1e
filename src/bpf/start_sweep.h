// Latency starts that waited longer than the timeout, taken out of the kernel's starts map
// (programs.h "latency") by user space without losing or double counting one.
//
// The race this exists for: a sweep that reads the map and then deletes an expired start by its
// key deletes whatever holds that key at the time of the delete — a start written in between by
// a program on another CPU is lost, and the expired one it replaced is counted twice (the start
// program counted it replaced, the sweep expired). bpf(2) has no "delete if unchanged", so the
// sweep *takes* entries instead, with a command that unlinks each entry and returns the value it
// unlinked under the bucket lock, and settles each taken entry by what it held:
//   * an expired start: counted `expired`;
//   * a fresh start (a program rewrote the key since the read): put back with BPF_NOEXIST; if
//     another start took the key meanwhile (-EEXIST) the taken one counts `replaced`, as the start
//     program would have counted it; if the map filled meanwhile (-E2BIG, -ENOMEM) `table_full`.
// So every start is counted exactly once: observed (by its end) + replaced + expired + table_full
// + series_limit == starts. An end that runs in the microseconds between a take and the put back
// finds no start and counts `no_start`; its start is put back and later expires (both counted).
//
// How entries are taken, by what the kernel has (include/uapi/linux/bpf.h; kernel/bpf/hashtab.c):
//   kLookupAndDelete  BPF_MAP_LOOKUP_AND_DELETE_ELEM on hash maps (Linux 5.14): only the starts
//                     the read found expired are taken, one by one.
//   kBatch            BPF_MAP_LOOKUP_AND_DELETE_BATCH (Linux 5.6): when the read found an expired
//                     start, the map is taken a chunk of buckets at a time and the fresh starts
//                     of each chunk put back at once (the window above applies to every start
//                     pending at that moment, not only to the expired ones).
//   kCheckThenDelete  neither (before 5.6): lookup, compare with what the read saw, delete. The
//                     race above remains between the lookup and the delete (two syscalls).
// A command the kernel refuses (EINVAL, ENOTSUPP, EOPNOTSUPP) moves the sweeper to the next mode
// for good.
//
// Thread-safety: one sweeper is used by one thread at a time (the metric's sweep); the map may be
// changed by programs on every CPU meanwhile, which is the point.
#pragma once

#include <cstdint>
#include <string>

#include "bpf/map_access.h"

namespace tpe::bpf {

struct StartSweepCounts {
  uint64_t expired = 0;     // expired starts taken out of the map by this sweep
  uint64_t replaced = 0;    // fresh starts taken and found replaced by a newer start when put back
  uint64_t table_full = 0;  // fresh starts taken that could not be put back (map full or ENOMEM)
  uint64_t inflight = 0;    // starts pending after the sweep: the read's unexpired entries
};

class StartSweeper {
 public:
  enum class Mode { kLookupAndDelete, kBatch, kCheckThenDelete };
  // `map`: the starts map (not owned; outlives the sweeper). `shape`: key_size = the match key's
  // bytes; slots = the value's bytes / 8 (the first u64 is the start's bpf_ktime_get_ns()); cpus 1.
  // `timeout_ns`: a start older than this is expired (the end program's test: now - start >
  // timeout). `mode`: the first mode to try (the kernel's features; see above).
  StartSweeper(MapAccess* map, MapShape shape, uint64_t timeout_ns, Mode mode);

  // One sweep at `now_ns` (CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns). Nothing is taken when
  // the read finds no expired start.
  StartSweepCounts Sweep(uint64_t now_ns);

  Mode mode() const { return mode_; }
  static const char* ModeName(Mode mode);

 private:
  bool Expired(uint64_t start_ns, uint64_t now_ns) const;
  // Settles one taken entry (see the header).
  void Settle(const char* key, const char* value, uint64_t now_ns, StartSweepCounts* out);
  // kBatch: takes the whole map chunk by chunk. False when the kernel refused the command before
  // taking anything.
  bool TakeAll(uint64_t now_ns, StartSweepCounts* out);

  MapAccess* map_;
  const MapShape shape_;
  const uint64_t timeout_ns_;
  Mode mode_;
  bool read_batch_ = true;  // ReadMap's BPF_MAP_LOOKUP_BATCH
};

}  // namespace tpe::bpf
