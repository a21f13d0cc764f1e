// Fuzzes PerfMap::Parse (src/profile/perf_map.h), the text of /tmp/perf-PID.map files any user
// writes, and ParseProcessIdentity (src/profile/perf_map_reader.h) on the same text as a
// /proc/PID/status. Checks the entry bound and the truncation count, that Lookup only answers
// with an entry holding the address, and that memory_bytes() covers the entries.
//
// Input: <max_entries selector: u8> <text>. max_entries = 1 + selector % 64 (so truncation is
// reached), or the default bound when the selector is 255.
// Seeds: maps as runtimes write them and status files (fuzz/make_corpus.py).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "profile/perf_map.h"
#include "profile/perf_map_reader.h"

using namespace tpe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t max_entries = data[0] == 255 ? PerfMap::kDefaultMaxEntries : 1 + data[0] % 64;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const PerfMap map = PerfMap::Parse(text, max_entries);
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  TPE_FUZZ_CHECK(map.size() <= max_entries, "%zu entries past the bound %zu", map.size(), max_entries);
  TPE_FUZZ_CHECK(map.truncated() == (lines > max_entries ? lines - max_entries : 0), "truncated %zu of %zu lines",
                 map.truncated(), lines);
  TPE_FUZZ_CHECK(map.memory_bytes() >= map.size() * sizeof(PerfMap::Entry), "memory_bytes too small");
  // Every hex number in the text as an address to look up.
  for (size_t i = 0; i < text.size();) {
    uint64_t address = 0;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), address, 16);
    const size_t used = static_cast<size_t>(end - (text.data() + i));
    if (ec == std::errc()) {
      for (uint64_t a : {address, address - 1, address + 1}) {
        const PerfMap::Entry* e = map.Lookup(a);
        TPE_FUZZ_CHECK(e == nullptr || (a >= e->start && a - e->start < e->size),
                       "Lookup(0x%llx) gave [0x%llx, +0x%llx)", static_cast<unsigned long long>(a),
                       static_cast<unsigned long long>(e->start), static_cast<unsigned long long>(e->size));
      }
    }
    i += std::max<size_t>(used, 1);
  }
  auto id = ParseProcessIdentity(std::string(text), "fuzz/status");
  if (!id.ok()) {
    TPE_FUZZ_CHECK(id.status().message().starts_with("fuzz/status"), "error does not name the file: %s",
                   id.status().message().c_str());
  } else {
    TPE_FUZZ_CHECK(id->ns_tgid != 0, "pid 0 accepted");
  }
  return 0;
}
