// Builders of synthetic perf records for unit tests (ring cursor, record parsers, reader).
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace tpe::testing {

// Appends the bytes of `v` (host order) to `b`.
template <typename T>
void AppendValue(std::vector<uint8_t>* b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b->insert(b->end(), p, p + sizeof(T));
}

// A whole record: struct perf_event_header {type, misc, size} followed by `body`.
inline std::vector<uint8_t> MakeRecord(uint32_t type, const std::vector<uint8_t>& body, uint16_t misc = 0) {
  perf_event_header h{type, misc, static_cast<uint16_t>(sizeof(h) + body.size())};
  std::vector<uint8_t> r(sizeof(h) + body.size());
  std::memcpy(r.data(), &h, sizeof(h));
  if (!body.empty()) std::memcpy(r.data() + sizeof(h), body.data(), body.size());
  return r;
}

}  // namespace tpe::testing
