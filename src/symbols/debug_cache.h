// What was found of each binary's debug information (debug_lookup.h: a separate debug file, or the
// binary's own DWARF; or nothing), kept across renders so that a file is looked up, and counted,
// once while it is kept. Bounded in entries and in bytes (the DWARF sections libdw holds and the
// debug files' symbols, as each entry was put), least recently used first out.
//
// Keys are the caller's (a mapped file's identity, e.g. its FileId). Thread-safety: every method,
// from any thread. Entries are shared (shared_ptr).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "elf/elf_file.h"
#include "symbols/debug_counts.h"
#include "symbols/dwarf_info.h"

namespace tpe::symbols {

struct DebugEntry {
  std::optional<DebugSource> source;          // where `names`/`dwarf` came from; nullopt: the binary itself or none
  std::string display;                        // the debug file, for messages
  std::shared_ptr<const elf::ElfFile> names;  // the debug file's symbols; null: the binary's
  std::shared_ptr<const DwarfInfo> dwarf;     // DWARF (the debug file's or the binary's); null: none
};

class DebugCache {
 public:
  explicit DebugCache(size_t max_entries = 256, uint64_t max_bytes = uint64_t{48} << 20)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}
  std::shared_ptr<const DebugEntry> Find(const std::string& key);
  // Keeps `entry` (the most recent), letting the least recent go while over either bound (an entry
  // over max_bytes alone is not kept: its render uses it, the next one looks it up again).
  void Put(const std::string& key, std::shared_ptr<const DebugEntry> entry);
  size_t size() const;
  uint64_t bytes() const;
  static uint64_t BytesOf(const DebugEntry& entry);

 private:
  struct Slot {
    std::shared_ptr<const DebugEntry> entry;
    std::list<std::string>::iterator lru;
    uint64_t bytes = 0;
  };
  void Erase(const std::string& key);  // mu_ held
  const size_t max_entries_;
  const uint64_t max_bytes_;
  uint64_t bytes_ = 0;  // guarded by mu_
  mutable std::mutex mu_;
  std::unordered_map<std::string, Slot> entries_;  // guarded by mu_
  std::list<std::string> lru_;                     // guarded by mu_; front: most recent
};

}  // namespace tpe::symbols
