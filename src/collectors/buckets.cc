#include "collectors/buckets.h"

#include <algorithm>
#include <cmath>

namespace tpe {

StatusOr<Buckets> Buckets::Exp2(double min, double max) {
  if (!(min > 0) || !std::isfinite(min)) return InvalidArgument("exp2 buckets: min must be > 0");
  if (!(max > min) || !std::isfinite(max)) return InvalidArgument("exp2 buckets: max must be greater than min");
  std::vector<double> b;
  for (double v = min;; v *= 2) {
    if (!std::isfinite(v)) return InvalidArgument("exp2 buckets: max is too large (a bound would be infinite)");
    b.push_back(v);
    if (v >= max) break;
    if (b.size() >= kMaxBuckets) return InvalidArgument("exp2 buckets: max/min spans more than 256 buckets");
  }
  Buckets out(Type::kExp2, std::move(b));
  out.min_ = min;
  return out;
}

StatusOr<Buckets> Buckets::Linear(double start, double width, size_t count) {
  if (!(width > 0) || !std::isfinite(width)) return InvalidArgument("linear buckets: width must be > 0");
  if (!std::isfinite(start)) return InvalidArgument("linear buckets: start must be a finite number");
  if (count < 1 || count > kMaxBuckets) return InvalidArgument("linear buckets: count must be 1..256");
  std::vector<double> b(count);
  for (size_t i = 0; i < count; ++i) {
    b[i] = start + width * static_cast<double>(i);
    if (i > 0 && !(b[i] > b[i - 1])) {
      return InvalidArgument("linear buckets: width is too small for start (bound " + std::to_string(i) +
                             " equals bound " + std::to_string(i - 1) + " in double precision)");
    }
  }
  Buckets out(Type::kLinear, std::move(b));
  out.start_ = start;
  out.width_ = width;
  return out;
}

StatusOr<Buckets> Buckets::Explicit(std::vector<double> bounds) {
  if (bounds.empty()) return InvalidArgument("explicit buckets: bounds must not be empty");
  if (bounds.size() > kMaxBuckets) return InvalidArgument("explicit buckets: at most 256 bounds");
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]))
      return InvalidArgument("explicit buckets: bounds[" + std::to_string(i) + "] is not finite");
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return InvalidArgument("explicit buckets: bounds must be strictly increasing; bounds[" + std::to_string(i) +
                             "] is not greater than bounds[" + std::to_string(i - 1) + "]");
    }
  }
  return Buckets(Type::kExplicit, std::move(bounds));
}

size_t Buckets::Index(double v) const {
  const size_t n = bounds_.size();
  switch (type_) {
    case Type::kExp2: {
      if (!(v > min_)) return 0;  // also NaN
      int e = 0;
      const double m = std::frexp(v / min_, &e);  // v/min = m·2^e, m in [0.5, 1)
      // Smallest k with v/min <= 2^k: e-1 when v/min is exactly 2^(e-1), else e.
      size_t k = static_cast<size_t>(m == 0.5 ? e - 1 : e);
      // Guard the rounding of v/min at the boundary itself.
      if (k > 0 && k - 1 < n && v <= bounds_[k - 1]) --k;
      if (k < n && v > bounds_[k]) ++k;
      return std::min(k, n);
    }
    case Type::kLinear: {
      if (!(v > start_)) return 0;
      // The quotient only estimates the bucket (it may round either way at a bound, also at
      // the last one); the bounds themselves decide.
      const double q = std::ceil((v - start_) / width_);
      size_t k = q >= static_cast<double>(n) ? n : static_cast<size_t>(q);
      if (k > 0 && v <= bounds_[k - 1]) --k;
      if (k < n && v > bounds_[k]) ++k;
      return k;
    }
    case Type::kExplicit:
      return static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  }
  return n;
}

}  // namespace tpe
