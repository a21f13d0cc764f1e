// JIT symbols from a perf map file, /tmp/perf-PID.map, which runtimes write for code they
// generate (Node --perf-basic-prof, CPython 3.12 -X perf, JVM agents such as perf-map-agent).
//
// Source: the format perf documents in tools/perf/Documentation/jit-interface.txt: one line per
// symbol, "START SIZE symbolname", START and SIZE in hex (with or without "0x"); the name may
// contain spaces. Later lines win where code was regenerated at the same address.
//
// Pure; thread-safety: immutable after Parse.
// PerfMapCache (perf_map_reader.h) finds and reads these files safely; Parse only parses text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpe {

class PerfMap {
 public:
  struct Entry {
    uint64_t start = 0;  // first address
    uint64_t size = 0;   // bytes
    std::string name;
  };

  // At most this many lines of one file are parsed by default: 2^20 entries cost about 48 MiB
  // plus their names, and a runtime's map rarely reaches 10^5 lines.
  static constexpr size_t kDefaultMaxEntries = size_t{1} << 20;

  // Parses the file's text. Malformed lines (a runtime killed mid-write leaves a partial last
  // line) are skipped and counted in malformed(). Of a text with more than `max_entries`
  // complete lines, only the last `max_entries` are parsed (a runtime appends: the newest code is
  // last) and the others are counted in truncated().
  static PerfMap Parse(std::string_view text, size_t max_entries = kDefaultMaxEntries);

  // The entry whose [start, start + size) holds `address`, or nullptr.
  const Entry* Lookup(uint64_t address) const;

  size_t size() const { return entries_.size(); }
  size_t malformed() const { return malformed_; }
  size_t truncated() const { return truncated_; }
  // Approximate heap and object bytes this map holds (entries and their names), for caches
  // bounded in bytes.
  uint64_t memory_bytes() const;

 private:
  std::vector<Entry> entries_;  // sorted by start; of entries with one start, the last written
  size_t malformed_ = 0;
  size_t truncated_ = 0;
};

}  // namespace tpe
