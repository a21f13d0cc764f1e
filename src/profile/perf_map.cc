#include "profile/perf_map.h"

#include <algorithm>
#include <charconv>

namespace tpe {
namespace {

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

PerfMap PerfMap::Parse(std::string_view text, size_t max_entries) {
  PerfMap map;
  // Too many lines: skip the oldest (first) ones.
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  for (size_t skip = lines > max_entries ? lines - max_entries : 0; skip > 0; --skip) {
    text.remove_prefix(text.find('\n') + 1);
    ++map.truncated_;
  }
  std::vector<Entry> entries;
  entries.reserve(std::min(lines, max_entries));  // a partial last line is malformed
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const bool complete = nl != std::string_view::npos;
    std::string_view line = text.substr(0, nl);
    text = complete ? text.substr(nl + 1) : std::string_view();
    if (line.empty()) continue;

    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    Entry e;
    if (!complete || sp2 == std::string_view::npos || !ParseHex(line.substr(0, sp1), &e.start) ||
        !ParseHex(line.substr(sp1 + 1, sp2 - sp1 - 1), &e.size) || sp2 + 1 >= line.size()) {
      ++map.malformed_;
      continue;
    }
    e.name = std::string(line.substr(sp2 + 1));
    entries.push_back(std::move(e));
  }
  // Stable: of entries with one start the last written ends up last; keep it.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.start < b.start; });
  size_t kept = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i + 1 < entries.size() && entries[i + 1].start == entries[i].start) continue;
    if (kept != i) entries[kept] = std::move(entries[i]);
    ++kept;
  }
  entries.resize(kept);
  entries.shrink_to_fit();
  map.entries_ = std::move(entries);
  return map;
}

uint64_t PerfMap::memory_bytes() const {
  uint64_t bytes = sizeof(PerfMap) + entries_.capacity() * sizeof(Entry);
  for (const Entry& e : entries_) {
    // std::string keeps up to 15 characters in place (libstdc++'s short string buffer).
    if (e.name.capacity() > 15) bytes += e.name.capacity() + 1;
  }
  return bytes;
}

const PerfMap::Entry* PerfMap::Lookup(uint64_t address) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), address,
                             [](uint64_t a, const Entry& e) { return a < e.start; });
  if (it == entries_.begin()) return nullptr;
  --it;
  return address - it->start < it->size ? &*it : nullptr;
}

}  // namespace tpe
