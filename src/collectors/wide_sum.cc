#include "collectors/wide_sum.h"

namespace tpe {

bool DecodeWide(uint64_t commit, uint64_t lo, uint64_t announce, uint128* sum) {
  const uint64_t top = lo >> 63;
  uint64_t t;
  if (announce == commit) {
    if ((commit & 1) != top) return false;  // cannot happen when read in order; read again
    t = commit;
  } else if (announce == commit + 1) {
    t = (commit & 1) == top ? commit : announce;  // lo from before or after the carry's store
  } else {
    return false;
  }
  *sum = (static_cast<uint128>(t >> 1) << 64) | lo;
  return true;
}

void EncodeWide(uint128 sum, uint64_t words[kWideWords]) {
  const uint64_t t = static_cast<uint64_t>(sum >> 63);
  words[kWideCommit] = t;
  words[kWideLo] = static_cast<uint64_t>(sum);
  words[kWideAnnounce] = t;
}

bool AddWide(uint64_t to[kWideWords], const uint64_t v[kWideWords]) {
  uint128 a, b;
  if (!DecodeWide(to[kWideCommit], to[kWideLo], to[kWideAnnounce], &a) ||
      !DecodeWide(v[kWideCommit], v[kWideLo], v[kWideAnnounce], &b)) {
    return false;
  }
  EncodeWide(a + b, to);
  return true;
}

}  // namespace tpe
