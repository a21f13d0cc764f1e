// Names the frames of stacks: kernel frames through /proc/kallsyms, user frames — normalized to
// (file, offset) at sample time (process/process_images.h) — through the ELF symbols of the file
// (src/elf) and, for JIT code, the process's perf map file (/tmp/perf-PID.map in its root).
//
// What leaves the host (pprof, folded stacks, flame graphs) carries no absolute address: a
// kernel frame is its offset in the kernel image ("[kernel.kallsyms]", from `_text`) or in its
// module ("[xfs]"), a user frame its file offset in a Mapping of the file (memory_start 0,
// file_offset 0: address = file offset, as Parca Agent normalizes them) with the file's GNU
// build id, so a pprof server with the debug info can finish what the host could not. JIT frames
// keep their address (perf maps name addresses). A frame that cannot be named keeps its mapping
// and offset; one in no known mapping is "[unknown]". All counted (Stats).
//
// A file is opened only if it is still the one the frames were taken in: the inode, size and
// modification time stat(2) saw when a sample first used it (MappedFile) must match — through the
// process that mapped it (/proc/PID/map_files/START-END, /proc/PID/root/PATH) or by its path in
// the daemon's root (a process that exited): a file overwritten or replaced since is not read,
// and its frames keep file and offset (Stats::file_changed).
//
// Thread-safety: not thread-safe; one renderer uses a Symbolizer at a time. ElfCache is shared
// by renders (thread-safe). Files are read lazily, once per render at most.
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
#include "process/mapped_files.h"
#include "process/process_images.h"
#include "profile/kallsyms.h"
#include "profile/perf_map.h"
#include "profile/pprof_builder.h"

namespace tpe {

// ELF symbol tables of mapped files by FileId (an identity that includes the file's content as
// stat saw it), shared by the renders of a process's life so that each file is read once, not at
// every scrape (reading them was 55 % of a render once /proc/kallsyms was cached). Holds at most
// `max_files`; past that the least recently used goes. Only files that were read are kept.
// Thread-safety: every method from any thread.
class ElfCache {
 public:
  explicit ElfCache(size_t max_files = 128) : max_files_(max_files) {}
  // The file read before under `id`, or null.
  std::shared_ptr<const elf::ElfFile> Find(FileId id);
  // Keeps `file` (not null) under `id`.
  void Put(FileId id, std::shared_ptr<const elf::ElfFile> file);
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const elf::ElfFile> file;
    uint64_t used = 0;
  };
  size_t max_files_;
  mutable std::mutex mu_;
  std::map<FileId, Entry> files_;
  uint64_t clock_ = 0;
};

class Symbolizer {
 public:
  struct Stats {
    uint64_t frames = 0;               // frames named or not
    uint64_t unsymbolized = 0;         // in a known mapping, but no symbol holds the address
    uint64_t unknown_mapping = 0;      // user frames in no mapping known for their process
    uint64_t kernel_unsymbolized = 0;  // kernel frames no symbol holds (part of unsymbolized)
    uint64_t file_changed = 0;         // files no longer the ones sampled (or gone): not read
  };

  // `files` (not owned, outlives this): what UserFrame::file refers to. `kallsyms`: the kernel's
  // symbols (null or hidden: no kernel frame named). `elf_cache` (optional, outliving this):
  // files read by earlier renders, and where this one keeps those it reads. `proc_root`: where
  // /proc is (tests use a fake tree).
  Symbolizer(const MappedFiles* files, std::shared_ptr<const Kallsyms> kallsyms, ElfCache* elf_cache = nullptr,
             std::string proc_root = "/proc");

  // Appends `user` (leaf first: user[0] at the exact pc, the others return addresses, named by
  // the call before them) as frames to `out`, registering their mappings with `builder`.
  void AppendUser(std::span<const UserFrame> user, PprofBuilder* builder, std::vector<ProfileFrame>* out);
  // The same for kernel instruction addresses, leaf first.
  void AppendKernel(std::span<const uint64_t> ips, PprofBuilder* builder, std::vector<ProfileFrame>* out);

  const Stats& stats() const { return stats_; }
  // Kernel addresses no symbol held (at most 1024 of them), for KallsymsCache::MarkMissed.
  const std::set<uint64_t>& kernel_misses() const { return kernel_misses_; }

 private:
  // The file's ELF when it still is the one sampled (read or cached), else null.
  std::shared_ptr<const elf::ElfFile> OpenElf(FileId id, const MappedFile& f);
  // The builder's mapping id for `id` (and what was found of the file), made once per builder.
  struct MappingIds {
    std::optional<MappedFile> file;
    std::shared_ptr<const elf::ElfFile> elf;
    std::optional<PerfMap> perf_map;  // JIT code: read at the first frame that needs it
    uint64_t id = 0;
  };
  MappingIds& MappingFor(FileId id, PprofBuilder* builder);
  uint64_t PseudoMappingId(const std::string& name, PprofBuilder* builder);
  // Forgets the per-builder ids when `builder` is another one than they were made with.
  void UseBuilder(PprofBuilder* builder);

  const MappedFiles* files_;
  std::shared_ptr<const Kallsyms> kallsyms_;  // never null
  ElfCache* elf_cache_ = nullptr;
  std::string proc_root_;
  Stats stats_;
  std::set<uint64_t> kernel_misses_;
  uint64_t builder_ = 0;  // PprofBuilder::instance() of the builder the ids below are its
  std::unordered_map<FileId, MappingIds> mappings_;
  std::map<std::string, uint64_t> pseudo_ids_;  // "[unknown]", "[kernel.kallsyms]", "[xfs]" -> id
};

}  // namespace tpe
