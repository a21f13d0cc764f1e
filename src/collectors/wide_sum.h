// Exact sums past 2^64: a 128-bit sum of u64 values that one writer adds to and any thread reads
// without a lock, never seeing a torn value. Both engines keep value sums this way (counters that
// add a field, histogram and latency _sum, native histograms' sample sum): the perf engine in
// WideSum below, the bpf engine in three u64 of a per-CPU map value that its programs write in
// the same order (bpf/programs.h "Wide sums") and user space decodes with DecodeWide.
//
// The words. A sum S (< 2^127) is kept as
//   [0] commit    T = floor(S / 2^63), written last
//   [1] lo        S mod 2^64
//   [2] announce  T, written first
// The top bit of lo is T's lowest bit (T = 2·floor(S / 2^64) + top bit of lo), so the carry into
// the high word is read from lo itself. An add of d <= 2^63 raises T by 0 or 1 (d > 2^63 is added
// as two halves): when T stays, the writer stores lo alone; when it rises (lo's top bit flips:
// lo crossed 2^63, or wrapped past 2^64), it stores announce = T + 1, then lo, then commit = T + 1.
// A reader loads commit (c), then lo, then announce (a), in that order:
//   a == c      no carry overlapped the read: T = c (lo's top bit agrees);
//   a == c + 1  one carry overlapped it, its lo stored or not: T is whichever of c, c + 1 has
//               lo's top bit as its lowest bit — exact whether or not the writer was stopped
//               between its stores (a preempted bpf program, a descheduled reader thread);
//   otherwise   the reader stalled across two carries (2^63 or more added between its loads):
//               read again.
// Each of those reads is a value the sum held during the read, so successive reads never
// decrease. The order needs the writer's stores and the reader's loads to be seen in program
// order: release/acquire here; on x86-64 (TSO) for the bpf programs' plain stores and the
// kernel's word-by-word copy of a map value (bpf_long_memcpy, ascending).
//
// Rendering: ToDouble rounds the exact sum to the nearest double once (IEEE round-to-nearest
// even), so two engines holding the same sum render the same double, and a larger sum never
// renders smaller. Exact up to 2^127 (2^63 adds of the largest u64): beyond it T wraps.
//
// Signed values (a histogram of a signed field): two sums, of the values >= 0 and of the
// magnitudes of the negative ones; the value is their difference (ToDouble of a signed __int128).
//
// Thread-safety: WideSum::Add from one writer thread; Get, Count from any thread. The free
// functions are pure.
#pragma once

#include <atomic>
#include <cstdint>

namespace tpe {

using uint128 = unsigned __int128;
using int128 = __int128;

inline constexpr uint32_t kWideWords = 3;  // u64 words of one wide sum
enum WideWord : uint32_t { kWideCommit = 0, kWideLo = 1, kWideAnnounce = 2 };

// The sum the words (commit, lo, announce as a reader loaded them, in that order) hold, into
// *sum; false when they were read across more than one carry (read them again).
bool DecodeWide(uint64_t commit, uint64_t lo, uint64_t announce, uint128* sum);
// The words of `sum` at rest (commit == announce). `sum` < 2^127.
void EncodeWide(uint128 sum, uint64_t words[kWideWords]);
// Adds the sum `v` holds to the sum `to` holds, leaving `to` at rest: for summing per-CPU values
// and retired ones (all-zero words are the sum 0). False, `to` unchanged, when either does not
// decode.
bool AddWide(uint64_t to[kWideWords], const uint64_t v[kWideWords]);

// The nearest double (ties to even).
inline double ToDouble(uint128 v) { return static_cast<double>(v); }
inline double ToDouble(int128 v) { return static_cast<double>(v); }

// A sum one thread adds to and any thread reads (see the top).
class WideSum {
 public:
  // Adds `d` (any u64). Writer thread only.
  void Add(uint64_t d) {
    if (d > uint64_t{1} << 63) {  // two halves, each <= 2^63
      AddSmall(d >> 1);
      d -= d >> 1;
    }
    AddSmall(d);
  }
  // The sum (a value it held during the call). Any thread.
  uint128 Get() const {
    for (;;) {
      const uint64_t c = commit_.load(std::memory_order_acquire);
      const uint64_t lo = lo_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint64_t a = announce_.load(std::memory_order_relaxed);
      uint128 sum;
      if (DecodeWide(c, lo, a, &sum)) return sum;
    }
  }
  // Changes with every non-zero add (what SeriesTable watches). Any thread.
  uint64_t Count() const { return lo_.load(std::memory_order_relaxed); }

 private:
  void AddSmall(uint64_t d) {  // d <= 2^63: T rises by at most 1
    const uint64_t lo = lo_.load(std::memory_order_relaxed);
    const uint64_t next = lo + d;
    if (((lo ^ next) >> 63) == 0) {
      lo_.store(next, std::memory_order_relaxed);
      return;
    }
    const uint64_t t = commit_.load(std::memory_order_relaxed) + 1;
    announce_.store(t, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    lo_.store(next, std::memory_order_relaxed);
    commit_.store(t, std::memory_order_release);
  }
  std::atomic<uint64_t> commit_{0}, lo_{0}, announce_{0};
};

}  // namespace tpe
