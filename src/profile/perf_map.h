// JIT symbols from a perf map file, /tmp/perf-PID.map, which runtimes write for code they
// generate (Node --perf-basic-prof, CPython 3.12 -X perf, JVM agents such as perf-map-agent).
//
// Source: the format perf documents in tools/perf/Documentation/jit-interface.txt: one line per
// symbol, "START SIZE symbolname", START and SIZE in hex (with or without "0x"); the name may
// contain spaces. Later lines win where code was regenerated at the same address.
//
// Pure; thread-safety: immutable after Parse.
#pragma once

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

  // Parses the file's text. Malformed lines (a runtime killed mid-write leaves a partial last
  // line) are skipped and counted in malformed().
  static PerfMap Parse(std::string_view text);

  // The entry whose [start, start + size) holds `address`, or nullptr.
  const Entry* Lookup(uint64_t address) const;

  size_t size() const { return entries_.size(); }
  size_t malformed() const { return malformed_; }

 private:
  std::vector<Entry> entries_;  // sorted by start; of entries with one start, the last written
  size_t malformed_ = 0;
};

}  // namespace tpe
