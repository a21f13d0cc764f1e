// Names the frames of stacks: kernel frames through /proc/kallsyms, user frames through the
// process's mappings (ProcMapping: from /proc/PID/maps when a process is first seen, or from
// PERF_RECORD_MMAP2 records as it maps more), the ELF symbols of the mapped files (src/elf,
// opened as /proc/PID/root/PATH so a container's files are its own; once the process is gone,
// as PATH in the daemon's own root when that file has the same inode), and perf map files
// (/tmp/perf-PID.map in the process's root) for JIT code. A frame that cannot be named keeps its
// address and mapping (file, offset, build id), so a pprof server with the debug info can finish;
// one that is in no known mapping goes to the "[unknown]" mapping. Both are counted.
//
// Thread-safety: not thread-safe; one renderer uses a Symbolizer at a time (the caches are its
// state). Files are read lazily and cached by identity ("MAJOR:MINOR:INODE") and build id.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "elf/elf_file.h"
#include "profile/kallsyms.h"
#include "profile/perf_map.h"
#include "profile/pprof_builder.h"
#include "profile/process_maps.h"

namespace tpe {

// ELF symbol tables of mapped files by identity ("MAJOR:MINOR:INODE": a file replaced under its
// path is another inode) with the file's size and mtime (an inode number can be reused), shared by the renders of a
// process's life so that each file is read once, not at every scrape (reading them was 55 % of a render once
// /proc/kallsyms was cached). Holds at most `max_files`; past that the least recently used goes. Only files that were
// read are kept: one unreadable now may be readable through another process's root later. Thread-safety: every method
// from any thread.
class ElfCache {
 public:
  explicit ElfCache(size_t max_files = 128) : max_files_(max_files) {}
  // The file read before under `identity`, or null.
  std::shared_ptr<const elf::ElfFile> Find(const std::string& identity);
  // Keeps `file` (not null) under `identity`.
  void Put(const std::string& identity, std::shared_ptr<const elf::ElfFile> file);
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const elf::ElfFile> file;
    uint64_t used = 0;
  };
  size_t max_files_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> files_;
  uint64_t clock_ = 0;
};

class Symbolizer {
 public:
  struct Stats {
    uint64_t frames = 0;               // frames named or not
    uint64_t unsymbolized = 0;         // in a known mapping, but no symbol holds the address
    uint64_t unknown_mapping = 0;      // user frames in no mapping known for their process
    uint64_t kernel_unsymbolized = 0;  // kernel frames no symbol holds (part of unsymbolized)
  };

  // `proc_root`: where /proc is (tests use a fake tree); `kallsyms`: the kernel's symbols (an
  // empty or hidden table names no kernel frame).
  // The shared form: a table read once for many renders (KallsymsCache).
  Symbolizer(std::string proc_root, Kallsyms kallsyms);
  // `elf_cache` (optional, outliving this): files read by earlier renders, and where this one
  // keeps those it reads.
  Symbolizer(std::string proc_root, std::shared_ptr<const Kallsyms> kallsyms, ElfCache* elf_cache = nullptr);

  // Sets what `pid` maps (replacing what was known). Returns false when /proc/PID/maps cannot be
  // read (the process exited) and nothing was known; mappings learnt before stay.
  bool LoadProcessMaps(uint32_t pid);
  // Adds one mapping of `pid` (a PERF_RECORD_MMAP2), replacing what it overlaps.
  void AddMapping(uint32_t pid, const ProcMapping& mapping);
  // Sets what `pid` maps to `mappings` (sorted by start, not overlapping: LearntMaps'), e.g.
  // for a process that exited.
  void SetMappings(uint32_t pid, std::vector<ProcMapping> mappings);
  // Forgets `pid`'s mappings (after its last stack was rendered, when it exited).
  void ForgetProcess(uint32_t pid);
  bool Knows(uint32_t pid) const { return processes_.count(pid) != 0; }

  // Appends `ips` (leaf first) as frames to `out`, registering their mappings with `builder`.
  // User frames other than the leaf are return addresses: they are named by the call before them
  // (ip - 1), the frame keeps ip.
  void AppendUser(uint32_t pid, std::span<const uint64_t> ips, PprofBuilder* builder, std::vector<ProfileFrame>* out);
  void AppendKernel(std::span<const uint64_t> ips, PprofBuilder* builder, std::vector<ProfileFrame>* out);

  const Stats& stats() const { return stats_; }
  // Kernel addresses no symbol held (at most 1024 of them), for KallsymsCache::MarkMissed.
  const std::set<uint64_t>& kernel_misses() const { return kernel_misses_; }

 private:
  struct Process {
    std::vector<ProcMapping> mappings;  // sorted by start
    std::optional<PerfMap> perf_map;    // read once, when a frame is in an anonymous executable mapping
  };
  const elf::ElfFile* ElfFor(uint32_t pid, const ProcMapping& m);
  // The builder's mapping id for `m` of `pid` and its ELF file (null: none read), made once per
  // mapping and builder.
  struct MappingIds {
    const elf::ElfFile* elf = nullptr;
    uint64_t id = 0;
  };
  const MappingIds& MappingFor(uint32_t pid, const ProcMapping& m, PprofBuilder* builder);
  uint64_t PseudoMappingId(const std::string& name, PprofBuilder* builder);
  // Forgets the per-builder ids when `builder` is another one than they were made with.
  void UseBuilder(PprofBuilder* builder);
  // Forgets the ids of mappings held by pointer (the mappings of a process changed).
  void MappingsChanged() { mapping_ids_.clear(); }

  std::string proc_root_;
  std::shared_ptr<const Kallsyms> kallsyms_;  // never null
  ElfCache* elf_cache_ = nullptr;
  std::map<uint32_t, Process> processes_;
  std::map<std::string, std::shared_ptr<const elf::ElfFile>> elf_by_identity_;  // null: unreadable
  Stats stats_;
  std::set<uint64_t> kernel_misses_;
  uint64_t builder_ = 0;  // PprofBuilder::instance() of the builder the ids below are its
  std::unordered_map<const ProcMapping*, MappingIds> mapping_ids_;
  std::map<std::string, uint64_t> pseudo_ids_;  // "[unknown]", "[kernel.kallsyms]" -> id
};

}  // namespace tpe
