// ELF symbol tables of mapped files, shared by the renders of a daemon's life so that each file
// is read once, not at every scrape, and bounded in bytes as well as in files: an ElfFile's
// memory_bytes() (symbols and their names: 114 bytes a function in libc, 178 in libLLVM-15) is
// what is counted, so a few binaries with hundreds of thousands of symbols cannot hold gigabytes.
//
// Keys are the caller's: a file's identity that changes when the file does, e.g.
// ElfFileCache::KeyOf (device, inode, size, mtime: an inode number alone is reused by other
// files on tmpfs, overlayfs and redeployed containers). Least recently used files go first.
// Only files that were read are kept: one unreadable now may be readable through another
// process's root later.
//
// Thread-safety: every method, from any thread. Files are shared (shared_ptr): one evicted while
// a render uses it lives until that render lets it go.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "elf/elf_file.h"

namespace tpe {

class ElfFileCache {
 public:
  struct Options {
    // 256 MiB: the libraries of a typical host (libc 0.3 MiB, libLLVM-15's 36,700 exported
    // functions 6.2 MiB) many times over; a 500,000-symbol binary (~96 MiB) twice; and the
    // largest file ElfLimits lets through (~180 MiB) once.
    uint64_t max_bytes = uint64_t{256} << 20;
    size_t max_files = 128;
  };
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;  // files dropped to stay within max_bytes / max_files
    uint64_t not_kept = 0;   // files larger than max_bytes alone: used by their render, not kept
  };

  ElfFileCache() : ElfFileCache(Options()) {}
  explicit ElfFileCache(Options options) : options_(options) {}

  // The file kept under `key`, or null (counted as a hit or a miss). Marks it most recently used.
  std::shared_ptr<const elf::ElfFile> Find(const std::string& key);
  // Keeps `file` (null is ignored) under `key`, replacing what was there, and drops the least
  // recently used files until the cache is within both bounds. A file whose memory_bytes()
  // exceeds max_bytes is not kept (Stats::not_kept).
  void Put(const std::string& key, std::shared_ptr<const elf::ElfFile> file);

  size_t size() const;     // files kept
  uint64_t bytes() const;  // their memory_bytes(), summed
  Stats stats() const;

  // "DEV:INODE:SIZE:MTIME_SEC.MTIME_NSEC" of `st`: a key that changes when the file does.
  static std::string KeyOf(const struct stat& st);

 private:
  struct Entry {
    std::shared_ptr<const elf::ElfFile> file;
    uint64_t bytes = 0;
    std::list<std::string>::iterator lru;  // position in lru_ (front: most recent)
  };
  void EraseLocked(std::unordered_map<std::string, Entry>::iterator it);

  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> files_;  // guarded by mu_
  std::list<std::string> lru_;                    // guarded by mu_
  uint64_t bytes_ = 0;                            // guarded by mu_
  Stats stats_;                                   // guarded by mu_
};

}  // namespace tpe
