// A profile's stacks (collectors/profile.h) rendered as a pprof Profile: frames named by a
// Symbolizer, kernel frames below the user frames they were entered from (pprof's leaf-first
// order: kernel leaf ... kernel entry, user leaf ... user root), the profile's labels and the
// process id as the label "pid". A part the engine lost (StackCount::kernel_lost/user_lost) is
// one frame "[kernel stack lost: <reason>]" in its place, so the samples still add up.
//
// ProfileRenderer owns what renders share: the kernel's symbols (KallsymsCache), the ELF files
// read (ElfFileCache, bounded in bytes), the perf maps (PerfMapCache), the debug files found
// (symbols::DebugCache), the user frames named (NameCache: a continuous profile's frames are
// named once, not at every scrape) and the debuginfod client, and the refusals' and sources' counts; the process images
// (for the bpf engine's raw user stacks, normalized here with the image their process had when the sample was counted)
// and the mapped files are the pipeline's.
//
// Thread-safety: AddStacks uses `symbolizer` (not thread-safe) for the call. ProfileRenderer::
// Render may be called from several threads at once (the caches are thread-safe; each render has
// its own symbolizer and builder).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collectors/profile.h"
#include "process/mapped_files.h"
#include "process/process_images.h"
#include "profile/kallsyms.h"
#include "profile/pprof_builder.h"
#include "profile/symbolizer.h"

namespace tpe {

// Adds every stack of `stacks` to `builder` (one pprof Sample each), named by `symbolizer`: every
// distinct address once, batched per mapping (Symbolizer::Prepare, then SymbolizeUser per file),
// each frame counted in symbolizer->stats() each time it occurs. Stacks whose user part is
// raw (StackCount::user) must be normalized first (ProfileRenderer does): it counts as unknown.
void AddStacks(const std::vector<StackCount>& stacks, Symbolizer* symbolizer, PprofBuilder* builder);
// One stack's user part (leaf first: user[0] at the exact pc, the others return addresses) or
// kernel part as frames appended to `out`, their mappings added to `builder` (tests and tools; a
// render uses AddStacks).
void AppendUser(Symbolizer* symbolizer, std::span<const UserFrame> user, PprofBuilder* builder,
                std::vector<ProfileFrame>* out);
void AppendKernel(Symbolizer* symbolizer, std::span<const uint64_t> ips, PprofBuilder* builder,
                  std::vector<ProfileFrame>* out);

class ProfileRenderer {
 public:
  struct Options {
    std::string proc_root = "/proc";
    std::string kallsyms_path = "/proc/kallsyms";
    ElfFileCache::Options elf_cache;
    // Separate debug files (symbols/debug_lookup.h); `debug_files` false: only the files' own
    // symbols, no DWARF.
    bool debug_files = true;
    symbols::DebugLookupOptions debug_lookup;
    // How long a render waits for debuginfod fetches it started (what arrives later is named by
    // a later render).
    std::chrono::milliseconds debuginfod_wait{2000};
  };
  // `images` and `files` (not owned) outlive the renderer.
  ProfileRenderer(ProcessImages* images, const MappedFiles* files, Options options);
  ProfileRenderer(ProcessImages* images, const MappedFiles* files) : ProfileRenderer(images, files, Options{}) {}

  struct Rendered {
    std::unique_ptr<PprofBuilder> builder;  // the profile: builder->profile(), builder->Gzipped()
    Symbolizer::Stats stats;
  };
  // Names `stacks` and builds their profile: sample type (`value_type`, `value_unit`), values
  // multiplied by `scale` (rounded; pprof values are integers, saturating at INT64_MAX), time
  // `time_ns` (ns since the epoch) and `duration_ns`.
  Rendered Render(std::vector<StackCount> stacks, const std::string& value_type, const std::string& value_unit,
                  double scale, int64_t time_ns, int64_t duration_ns);

 private:
  ProcessImages* images_;
  const MappedFiles* files_;
  const Options options_;
  KallsymsCache kallsyms_;
  ElfFileCache elf_files_;
  PerfMapCache perf_maps_;
  FileRefusalCounts elf_refusals_{"elf"};
  symbols::DebugCache debug_files_;
  NameCache names_;  // user frames named by earlier renders
  symbols::DebugInfoCounts debug_counts_;
  mutable std::mutex debuginfod_mu_;
  std::shared_ptr<symbols::DebuginfodClient> debuginfod_;  // guarded by debuginfod_mu_; null: off

 public:
  // Starts fetching debug files from debuginfod servers (`options.urls`, DEBUGINFOD_URLS'
  // meaning; "" stops), replacing the client there was. Any thread.
  void SetDebuginfod(const symbols::DebuginfodClient::Options& options);
  // Each debug-info source's outcomes (tracepoint_exporter_profile_debuginfo_total).
  const symbols::DebugInfoCounts& debug_counts() const { return debug_counts_; }
  // Files refused (common/untrusted_file.h) by reason: ELF files, perf maps.
  const FileRefusalCounts& elf_refusals() const { return elf_refusals_; }
  const FileRefusalCounts& perf_map_refusals() const { return perf_maps_.refusals(); }
};

}  // namespace tpe
