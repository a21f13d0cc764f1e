// Histogram bucket layouts and the index of a value, with Prometheus `le` semantics: a value v
// falls in the first bucket whose upper bound b satisfies v <= b; values above the last bound
// fall in the implicit +Inf bucket (index == bounds().size()).
//
//   exp2     {min, max}           bounds min, 2·min, 4·min, ... up to the first >= max
//   linear   {start, width, count} bounds start, start+width, ..., start+(count-1)·width
//   explicit {bounds: [...]}       strictly increasing bounds
//
// Index() is O(1) for exp2 (the exponent of v/min from frexp: bit arithmetic, no search) and
// linear (one division); explicit uses a binary search.
//
// Pure; immutable after construction; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace tpe {

class Buckets {
 public:
  enum class Type { kExp2, kLinear, kExplicit };

  // Errors (InvalidArgument, naming the offending parameter): min <= 0, max <= min, more than
  // kMaxBuckets bounds, width <= 0, count < 1, bounds empty or not strictly increasing.
  static StatusOr<Buckets> Exp2(double min, double max);
  static StatusOr<Buckets> Linear(double start, double width, size_t count);
  static StatusOr<Buckets> Explicit(std::vector<double> bounds);
  // No bounds: every value in the +Inf bucket (a native-only histogram's classic side).
  static Buckets None() { return Buckets(Type::kExplicit, {}); }

  static constexpr size_t kMaxBuckets = 256;

  // The bucket of `v`: 0..bounds().size() (the last is +Inf).
  size_t Index(double v) const;

  const std::vector<double>& bounds() const { return bounds_; }

 private:
  Buckets(Type t, std::vector<double> bounds) : type_(t), bounds_(std::move(bounds)) {}
  Type type_;
  std::vector<double> bounds_;
  double min_ = 0, start_ = 0, width_ = 0;
};

}  // namespace tpe
