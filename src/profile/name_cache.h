// Names of user frames kept across renders, so that a continuous profile scraped every few
// seconds names each distinct (file, offset) once in the daemon's life, not at every render.
//
// A FileId names one file as it was when a sample first used it (MappedFiles: ids never reused,
// the identity includes inode, size and mtime), so a name found in it stays right for as long as
// the id exists: the cache keeps only what cannot improve later — addresses named, or found in no
// symbol, from a file read with its debug information settled (no debuginfod fetch still
// pending: a later render would name more) — and never JIT code (a perf map names addresses
// that the runtime reuses). Which results qualify is the Symbolizer's decision (symbolizer.h);
// this is the store.
//
// Bounded by entries; past the bound it starts over empty (counted), so a host whose code keeps
// changing costs a re-naming now and then, never unbounded memory.
//
// Thread-safety: every method, from any thread (renders run concurrently).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "process/mapped_files.h"

namespace tpe {

struct SymbolFrame;
struct SymbolMapping;

class NameCache {
 public:
  // 65,536 names: the distinct frames of a busy host's continuous profile many times over
  // (bench/unwind_cost.sh's both views hold ~6,000), at ~150 bytes each ~10 MiB at most.
  static constexpr size_t kDefaultMaxEntries = 65536;
  explicit NameCache(size_t max_entries = kDefaultMaxEntries) : max_entries_(max_entries) {}

  // One address: its mapping (shared by a file's names) and its frames, innermost first (empty
  // when no symbol holds it: `no_symbol`).
  struct Name {
    std::shared_ptr<const SymbolMapping> mapping;
    std::shared_ptr<const std::vector<SymbolFrame>> frames;
    bool no_symbol = false;
  };
  // An address in a file: its offset, and whether it is a return address (named by offset - 1).
  struct Key {
    FileId file = kNoFile;
    uint64_t offset = 0;
    bool return_address = false;
    bool operator==(const Key&) const = default;
  };

  // For each of `keys`, the name kept (`out` resized to keys.size(); an entry without mapping
  // where none is kept). Returns how many were found.
  size_t Find(std::span<const Key> keys, std::vector<Name>* out) const;
  // How many of `keys` are kept (not counted in stats()).
  size_t CountKept(std::span<const Key> keys) const;
  // Keeps `name` under `key` (replacing what was there). When the cache holds max_entries it is
  // emptied first (Stats::resets).
  void Put(const Key& key, Name name);

  struct Stats {
    uint64_t hits = 0, misses = 0, resets = 0;
    size_t entries = 0;
  };
  Stats stats() const;

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()((k.offset * 2 + k.return_address) * 0x9e3779b97f4a7c15ULL ^ k.file);
    }
  };
  const size_t max_entries_;
  mutable std::mutex mu_;
  std::unordered_map<Key, Name, KeyHash> names_;
  mutable Stats stats_;
};

}  // namespace tpe
