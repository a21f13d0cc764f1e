#include "collectors/native_buckets.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <string>

namespace tpe {
namespace {

// 2^(k·2^-s) in long double: 2^q exactly times 2^(r·2^-s) for k = q·2^s + r, 0 <= r < 2^s, so
// the error is that of one exp2l of an argument in [0, 1) (about one part in 2^63).
long double Boundary(int64_t k, int s) {
  const int64_t per = int64_t{1} << s;
  int64_t q = k / per, r = k % per;
  if (r < 0) {
    r += per;
    --q;
  }
  return std::ldexp(std::exp2l(static_cast<long double>(r) / static_cast<long double>(per)), static_cast<int>(q));
}

// A positive number as the fraction p/q of its shortest decimal form (std::to_chars: the digits
// that read back as the same double), e.g. 1e-9 as 1/10^9 and 0.001 as 1/1000: what the user
// wrote, so that 10^9 ns × 1e-9 is 1 s exactly, on the boundary of bucket 0, as the double
// product 1e9 × 1e-9 == 1.0 a Prometheus client would bucket. Empty when p or q needs more than
// 64 bits.
struct Fraction {
  uint64_t p, q;
};
std::optional<Fraction> DecimalFraction(double d) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d);
  if (r.ec != std::errc()) return std::nullopt;
  uint64_t m = 0;
  int exp10 = 0, digits = 0;
  bool after_point = false;
  const char* c = buf;
  for (; c < r.ptr && *c != 'e'; ++c) {
    if (*c == '.') {
      after_point = true;
      continue;
    }
    if (*c < '0' || *c > '9' || ++digits > 19) return std::nullopt;
    m = m * 10 + static_cast<uint64_t>(*c - '0');
    if (after_point) --exp10;
  }
  if (c < r.ptr) exp10 += std::atoi(c + 1);
  if (m == 0) return std::nullopt;
  Fraction f{m, 1};
  for (; exp10 > 0; --exp10) {
    if (f.p > std::numeric_limits<uint64_t>::max() / 10) return std::nullopt;
    f.p *= 10;
  }
  for (; exp10 < 0; ++exp10) {
    if (f.q > std::numeric_limits<uint64_t>::max() / 10) return std::nullopt;
    f.q *= 10;
  }
  return f;
}

using U128 = unsigned __int128;
int BitLength(U128 v) {
  int n = 0;
  for (; v != 0; v >>= 1) ++n;
  return n;
}

// The sign of 2^J − p/q (compares 2^J·q with p, or q with p·2^-J).
int ComparePow2(int64_t J, const Fraction& f) {
  U128 a = f.q, b = f.p;
  if (J >= 0) {
    if (J + BitLength(a) > 127) return 1;
    a <<= J;
  } else {
    if (-J + BitLength(b) > 127) return -1;
    b <<= -J;
  }
  return a > b ? 1 : a < b ? -1 : 0;
}

// floor(2^e · q / p) when it fits 64 bits and the arithmetic 128 (else empty).
std::optional<uint64_t> FloorPow2Over(int64_t e, const Fraction& f) {
  U128 num = f.q, den = f.p;
  if (e >= 0) {
    if (e + BitLength(num) > 127) return std::nullopt;
    num <<= e;
  } else {
    if (-e + BitLength(den) > 127) return std::nullopt;
    den <<= -e;
  }
  const U128 r = num / den;
  if (r > std::numeric_limits<uint64_t>::max()) return std::nullopt;
  return static_cast<uint64_t>(r);
}

// floor((a/b) / (p/q)) = floor(a·q / (b·p)), when it fits.
std::optional<uint64_t> FloorRatio(const Fraction& ab, const Fraction& pq) {
  const U128 num = static_cast<U128>(ab.p) * pq.q, den = static_cast<U128>(ab.q) * pq.p;
  const U128 r = num / den;
  if (r > std::numeric_limits<uint64_t>::max()) return std::nullopt;
  return static_cast<uint64_t>(r);
}

// ceil(i/2) for any sign: bucket i of schema s lies in bucket ceil(i/2) of schema s-1.
int32_t HalfUp(int32_t i) { return i >= 0 ? (i + 1) / 2 : -((-i) / 2); }

void Halve(std::vector<std::pair<int32_t, uint64_t>>* buckets) {
  std::vector<std::pair<int32_t, uint64_t>> out;
  out.reserve(buckets->size());
  for (const auto& [i, c] : *buckets) {
    const int32_t j = HalfUp(i);
    if (!out.empty() && out.back().first == j) {
      out.back().second += c;
    } else {
      out.push_back({j, c});
    }
  }
  *buckets = std::move(out);
}

void AddBuckets(std::vector<std::pair<int32_t, uint64_t>>* into, const std::vector<std::pair<int32_t, uint64_t>>& o) {
  std::map<int32_t, uint64_t> m(into->begin(), into->end());
  for (const auto& [i, c] : o) m[i] += c;
  into->assign(m.begin(), m.end());
}

}  // namespace

void NativeSnapshot::Add(const NativeSnapshot& o) {
  zero_count += o.zero_count;
  AddBuckets(&positive, o.positive);
  AddBuckets(&negative, o.negative);
}

int ReduceToMaxBuckets(NativeSnapshot* h, uint32_t max_buckets) {
  int steps = 0;
  while (h->populated() > max_buckets && h->schema > -4) {
    Halve(&h->positive);
    Halve(&h->negative);
    --h->schema;
    ++steps;
  }
  return steps;
}

StatusOr<NativeLayout> NativeLayout::Make(const NativeOptions& o, double scale) {
  if (o.schema < NativeOptions::kMinSchema || o.schema > NativeOptions::kMaxSchema) {
    return InvalidArgument("native buckets: schema must be 0..8, not " + std::to_string(o.schema));
  }
  if (!(o.zero_threshold >= 0) || !std::isfinite(o.zero_threshold)) {
    return InvalidArgument("native buckets: zero_threshold must be a finite number >= 0");
  }
  if (o.max_buckets < 1 || o.max_buckets > NativeOptions::kMaxMaxBuckets) {
    return InvalidArgument("native buckets: max_buckets must be 1..65536, not " + std::to_string(o.max_buckets));
  }
  if (!(scale != 0) || !std::isfinite(scale)) {
    return InvalidArgument("native buckets: the scale must be a finite number other than 0");
  }
  NativeLayout l;
  l.options_ = o;
  l.scale_ = scale;
  const int s = o.schema;
  const int64_t per = int64_t{1} << s;
  const std::optional<Fraction> frac = DecimalFraction(std::fabs(scale));
  const long double S = frac ? static_cast<long double>(frac->p) / static_cast<long double>(frac->q)
                             : static_cast<long double>(std::fabs(scale));
  // Whether 2^(k·2^-s) >= scale: exact (integers) at a power of two, where a value can sit on
  // the boundary itself; elsewhere the boundary is irrational and long double decides.
  auto at_least_scale = [&](int64_t k) {
    if (k % per == 0 && frac) return ComparePow2(k / per, *frac) >= 0;
    return Boundary(k, s) >= S;
  };
  // base: the bucket of raw 1, the least k with 2^(k·2^-s) >= scale.
  int64_t k0 = static_cast<int64_t>(std::ceil(std::log2l(S) * static_cast<long double>(per)));
  while (at_least_scale(k0 - 1)) --k0;
  while (!at_least_scale(k0)) ++k0;
  l.base_ = static_cast<int32_t>(k0);
  // Mantissa thresholds: the boundaries 2^((k0+j)·2^-s)/scale, j < 2^s, in octave 0 (in [1, 2)),
  // times 2^63, floored.
  const long double two63 = std::ldexp(1.0L, 63), two64 = std::ldexp(1.0L, 64);
  for (int64_t j = 0; j < per; ++j) {
    const int64_t k = k0 + j;
    std::optional<uint64_t> exact;
    if (k % per == 0 && frac) exact = FloorPow2Over(63 + k / per, *frac);
    uint64_t f;
    if (exact) {
      f = *exact;
    } else {
      const long double mu = std::floor(Boundary(k, s) / S * two63);
      f = mu >= two64  ? std::numeric_limits<uint64_t>::max()
          : mu < two63 ? uint64_t{1} << 63
                       : static_cast<uint64_t>(mu);
    }
    l.thresholds_.push_back(std::max(f, uint64_t{1} << 63));
  }
  std::sort(l.thresholds_.begin(), l.thresholds_.end());
  // zero_max: the largest magnitude x with x × scale <= zero_threshold.
  const std::optional<Fraction> zt = DecimalFraction(o.zero_threshold);
  if (o.zero_threshold == 0) {
    l.zero_max_ = 0;
  } else if (auto exact = zt && frac ? FloorRatio(*zt, *frac) : std::nullopt) {
    l.zero_max_ = *exact;
  } else {
    const long double zx = std::floor(static_cast<long double>(o.zero_threshold) / S);
    l.zero_max_ = zx >= two64 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(zx);
  }
  return l;
}

uint32_t NativeLayout::MagnitudePosition(uint64_t magnitude) const {
  const int o = 63 - __builtin_clzll(magnitude);
  const uint64_t m = magnitude << (63 - o);
  const auto below = std::lower_bound(thresholds_.begin(), thresholds_.end(), m) - thresholds_.begin();
  return (static_cast<uint32_t>(o) << options_.schema) + static_cast<uint32_t>(below);
}

int32_t NativeLayout::Position(int64_t raw, bool is_signed) const {
  const bool negative = (is_signed && raw < 0) != (scale_ < 0);
  const uint64_t magnitude =
      is_signed && raw < 0 ? uint64_t{0} - static_cast<uint64_t>(raw) : static_cast<uint64_t>(raw);
  if (magnitude <= zero_max_) return 0;
  const int32_t p = static_cast<int32_t>(MagnitudePosition(magnitude)) + 1;
  return negative ? -p : p;
}

NativeCounts::~NativeCounts() {
  for (auto& sign : chunks_) {
    for (auto& c : sign) delete[] c.load(std::memory_order_relaxed);
  }
}

RelaxedCounter* NativeCounts::Chunk(int sign, uint32_t chunk) {
  RelaxedCounter* c = chunks_[sign][chunk].load(std::memory_order_relaxed);
  if (c == nullptr) {
    c = new RelaxedCounter[size_t{1} << schema_];
    chunks_[sign][chunk].store(c, std::memory_order_release);
  }
  return c;
}

void NativeCounts::Observe(int32_t position) {
  if (position == 0) {
    zero_.Add(1);
    return;
  }
  const int sign = position < 0 ? 1 : 0;
  const uint32_t p = static_cast<uint32_t>(position < 0 ? -position : position) - 1;
  const uint32_t chunk = p >> schema_;
  if (chunk >= kChunks) return;  // cannot happen: p <= 64·2^s
  Chunk(sign, chunk)[p & ((1u << schema_) - 1)].Add(1);
}

uint64_t NativeCounts::Count() const {
  uint64_t n = zero_.Get();
  for (const auto& sign : chunks_) {
    for (const auto& c : sign) {
      const RelaxedCounter* chunk = c.load(std::memory_order_acquire);
      if (chunk == nullptr) continue;
      for (size_t i = 0; i < (size_t{1} << schema_); ++i) n += chunk[i].Get();
    }
  }
  return n;
}

NativeSnapshot NativeCounts::Snapshot(const NativeLayout& layout) const {
  NativeSnapshot out;
  out.schema = layout.options().schema;
  out.zero_threshold = layout.options().zero_threshold;
  out.zero_count = zero_.Get();
  for (int sign = 0; sign < 2; ++sign) {
    auto& into = sign == 0 ? out.positive : out.negative;
    for (uint32_t c = 0; c < kChunks; ++c) {
      const RelaxedCounter* chunk = chunks_[sign][c].load(std::memory_order_acquire);
      if (chunk == nullptr) continue;
      for (uint32_t i = 0; i < (1u << schema_); ++i) {
        const uint64_t n = chunk[i].Get();
        if (n != 0) into.push_back({layout.IndexOfPosition((c << schema_) + i), n});
      }
    }
  }
  return out;
}

}  // namespace tpe
