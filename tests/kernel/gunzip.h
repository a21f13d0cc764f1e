// The profile tests' gzip reader: a /debug/pprof body (gzip, at most 8 MiB inflated) as bytes,
// "" when it is not a whole gzip stream.
#pragma once

#include <zlib.h>

#include <string>

namespace tpe::testing {

inline std::string Gunzip(const std::string& gz) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return "";
  std::string out(8 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  out.resize(rc == Z_STREAM_END ? z.total_out : 0);
  inflateEnd(&z);
  return out;
}

}  // namespace tpe::testing
