// Prometheus native histograms (sparse exponential buckets): the layout, the bucket of an integer
// field value, the per-series counts of the perf engine, and the schema reduction clients make
// when a series has too many buckets.
//
// Definition (Prometheus, "Native Histograms" spec; client_golang's histogram.go): with schema s
// (here 0..8), bucket i holds the values v with 2^((i-1)·2^-s) < |v| <= 2^(i·2^-s), i.e.
// i = ceil(log2(|v|)·2^s); positive and negative values have separate buckets; |v| <=
// zero_threshold goes to the zero bucket.
//
// Values are v = raw × scale for an integer `raw` (a field, or a latency in ns with scale 1e-9),
// and the bucket is chosen from `raw` with integer operations only, the same on both engines
// (the bpf program runs the same table, bpf/programs.cc): for raw in octave o (2^o <= |raw| <
// 2^(o+1)), the boundaries 2^(i·2^-s)/scale inside the octave, shifted to [2^63, 2^64), are one
// set for every octave (x_{i+2^s} = 2·x_i); so the bucket is a base index, plus o·2^s, plus the
// number of the 2^s integer "mantissa thresholds" below raw << (63 - o). The scale is taken as
// the decimal number it was written as (1e-9 is 1/10^9, not the double nearest it), so that a
// value exactly on a power-of-two boundary (10^9 ns × 1e-9 = 1 s) is in the bucket below it, as
// the double product a Prometheus client would bucket; those boundaries are computed with
// integers, the irrational ones (2^(i·2^-s), i not a multiple of 2^s) in long double: a raw
// within one part in 2^62 of one may be placed on its other side.
//
// Pure except NativeCounts; thread-safety as stated per class.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "collectors/collector.h"
#include "collectors/snapshot.h"
#include "common/status.h"

namespace tpe {

struct NativeOptions {
  int schema = 3;                    // 0..8: 2^schema buckets per power of two
  double zero_threshold = 0x1p-128;  // client_golang's default; >= 0
  uint32_t max_buckets = 160;        // populated buckets per series before the schema is reduced; >= 1
  static constexpr int kMinSchema = 0, kMaxSchema = 8;
  static constexpr uint32_t kMaxMaxBuckets = 65536;
};

// Lowers the schema one step at a time (bucket i -> ceil(i/2), client_golang's
// doubleBucketWidth) while more than `max_buckets` buckets are populated and the schema is above
// -4 (Prometheus's lowest). Returns how many steps it took (0: unchanged).
int ReduceToMaxBuckets(NativeSnapshot* h, uint32_t max_buckets);

// The layout of one metric's native buckets for raw × scale.
//
// A position packs the bucket of a raw value into one int32: 0 the zero bucket; 1 + p for a
// positive value, -(1 + p) for a negative one, with p = o·2^s + (thresholds below the
// mantissa) in [0, 64·2^s]; bucket index = base() + p.
class NativeLayout {
 public:
  // Errors (InvalidArgument, naming the parameter): schema outside 0..8, zero_threshold < 0 or
  // not finite, max_buckets outside 1..65536, scale 0 or not finite. A negative scale turns
  // positive raw values into negative buckets and back.
  static StatusOr<NativeLayout> Make(const NativeOptions& o, double scale);

  // The position of `raw` (two's complement when is_signed, else unsigned).
  int32_t Position(int64_t raw, bool is_signed) const;
  // The position of a magnitude |raw| (> zero_max(): not the zero bucket; the sign is the caller's).
  uint32_t MagnitudePosition(uint64_t magnitude) const;
  int32_t IndexOfPosition(uint32_t p) const { return base_ + static_cast<int32_t>(p); }

  const NativeOptions& options() const { return options_; }
  double scale() const { return scale_; }  // as given (negative when it flips the sign)
  // Magnitudes 0..zero_max() are in the zero bucket (raw × scale <= zero_threshold).
  uint64_t zero_max() const { return zero_max_; }
  int32_t base() const { return base_; }
  // 2^schema thresholds, ascending, each in [2^63, 2^64).
  const std::vector<uint64_t>& mantissa_thresholds() const { return thresholds_; }
  // Positions per sign: 64·2^s + 1.
  uint32_t positions() const { return (64u << options_.schema) + 1; }

 private:
  NativeLayout() = default;
  NativeOptions options_;
  double scale_ = 1;
  uint64_t zero_max_ = 0;
  int32_t base_ = 0;
  std::vector<uint64_t> thresholds_;
};

// The perf engine's counts of one native series: the zero bucket, and per sign 65 chunks of
// 2^schema counters allocated on first use (a series costs about 1 KiB plus 8 bytes per bucket of
// each octave it touched).
//
// Thread-safety: Observe from one writer thread; Count and Snapshot from any thread (a chunk is
// published with release before its counters are read).
class NativeCounts {
 public:
  explicit NativeCounts(int schema) : schema_(schema) {}
  ~NativeCounts();
  NativeCounts(const NativeCounts&) = delete;
  NativeCounts& operator=(const NativeCounts&) = delete;

  void Observe(int32_t position);
  uint64_t Count() const;
  // Buckets by index (layout.IndexOfPosition), without the sum.
  NativeSnapshot Snapshot(const NativeLayout& layout) const;

 private:
  static constexpr int kChunks = 65;
  RelaxedCounter* Chunk(int sign, uint32_t chunk);
  int schema_;
  RelaxedCounter zero_;
  std::atomic<RelaxedCounter*> chunks_[2][kChunks] = {};
};

}  // namespace tpe
