// Bounds-checked little-endian (host order) reads from a byte span.
//
// Used on untrusted bytes: ring buffer records and tracepoint raw payloads. Every read checks
// its bounds and fails (returns false / std::nullopt) instead of reading past the end.
// Pure; thread-safe on distinct objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>

namespace tpe {

using Bytes = std::span<const uint8_t>;

// Reads a T at byte `offset` of `b`; nullopt when [offset, offset+sizeof(T)) is out of range.
template <typename T>
inline std::optional<T> LoadAt(Bytes b, size_t offset) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (offset > b.size() || b.size() - offset < sizeof(T)) return std::nullopt;
  T v;
  std::memcpy(&v, b.data() + offset, sizeof(T));
  return v;
}

// Sequential reader: each Read advances the position; a failed read leaves it unchanged.
class ByteReader {
 public:
  explicit ByteReader(Bytes b) : b_(b) {}

  template <typename T>
  bool Read(T* out) {
    auto v = LoadAt<T>(b_, pos_);
    if (!v) return false;
    *out = *v;
    pos_ += sizeof(T);
    return true;
  }
  // Returns the next `n` bytes as a span, or false if fewer remain.
  bool ReadSpan(size_t n, Bytes* out) {
    if (b_.size() - pos_ < n) return false;
    *out = b_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool Skip(size_t n) {
    if (b_.size() - pos_ < n) return false;
    pos_ += n;
    return true;
  }
  size_t position() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }

 private:
  Bytes b_;
  size_t pos_ = 0;
};

}  // namespace tpe
