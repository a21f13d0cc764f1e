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
// A file is opened only if it is still the one the frames were taken in (process/
// mapped_file_open.h: through the process that mapped it, or by path; untrusted, bounded; the
// inode, size and mtime of when a sample first used it): a file overwritten or replaced since is
// not read, and its frames keep file and offset (Stats::file_changed). ELF files are read within
// elf::ElfLimits; perf maps through PerfMapCache (owner, namespace, size checks). Refusals are
// counted in the caller's FileRefusalCounts.
//
// Thread-safety: not thread-safe; one renderer uses a Symbolizer at a time. The caches it is
// given are shared by renders (thread-safe). Files are read lazily, once per render at most.
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

#include "common/untrusted_file.h"
#include "elf/elf_file.h"
#include "process/mapped_files.h"
#include "process/process_images.h"
#include "profile/elf_cache.h"
#include "profile/kallsyms.h"
#include "profile/perf_map_reader.h"
#include "profile/pprof_builder.h"

namespace tpe {

// What a symbolizer reads through (each optional, not owned, outliving it): files read by earlier
// renders and where this one keeps those it reads; the perf maps of JIT code; where refused files
// are counted.
struct SymbolizerCaches {
  ElfFileCache* elf = nullptr;
  PerfMapCache* perf_maps = nullptr;
  FileRefusalCounts* elf_refusals = nullptr;
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

  using Caches = SymbolizerCaches;
  // `files` (not owned, outlives this): what UserFrame::file refers to. `kallsyms`: the kernel's
  // symbols (null or hidden: no kernel frame named). `proc_root`: where /proc is (tests use a
  // fake tree).
  Symbolizer(const MappedFiles* files, std::shared_ptr<const Kallsyms> kallsyms, Caches caches = {},
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
    std::shared_ptr<const PerfMap> perf_map;  // JIT code: read at the first frame that needs it
    bool perf_map_read = false;
    uint64_t id = 0;
  };
  MappingIds& MappingFor(FileId id, PprofBuilder* builder);
  uint64_t PseudoMappingId(const std::string& name, PprofBuilder* builder);
  // Forgets the per-builder ids when `builder` is another one than they were made with.
  void UseBuilder(PprofBuilder* builder);

  const MappedFiles* files_;
  std::shared_ptr<const Kallsyms> kallsyms_;  // never null
  Caches caches_;
  std::string proc_root_;
  Stats stats_;
  std::set<uint64_t> kernel_misses_;
  uint64_t builder_ = 0;  // PprofBuilder::instance() of the builder the ids below are its
  std::unordered_map<FileId, MappingIds> mappings_;
  std::map<std::string, uint64_t> pseudo_ids_;  // "[unknown]", "[kernel.kallsyms]", "[xfs]" -> id
};

}  // namespace tpe
