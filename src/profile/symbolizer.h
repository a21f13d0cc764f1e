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
// Names come, in order, from the file's own .symtab (else .dynsym), then a separate debug file
// (symbols/debug_lookup.h: the build-id directory, .gnu_debuglink, .gnu_debugdata, debuginfod),
// looked up once per file when the file lacks a .symtab or DWARF; source lines and inlined
// functions from DWARF (the file's own, else the debug file's; symbols/dwarf_info.h). A file whose
// debug file a debuginfod server is still fetching is named without it; Prepare waits for such
// fetches at most SymbolizerCaches::debuginfod_wait, and a later render names what arrived.
//
// What comes out is neutral (no output format): per address, its mapping (SymbolMapping) and its
// frames {function, file, line, inlined}, innermost first. Addresses are named in batches per
// mapping (SymbolizeUser), as pprof's own symbolizer does. The renderer (renderer.h) makes pprof
// Locations of them.
//
// Thread-safety: not thread-safe; one renderer uses a Symbolizer at a time. The caches it is
// given are shared by renders (thread-safe). Files are read lazily, once per render at most.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
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
#include "profile/name_cache.h"
#include "profile/perf_map_reader.h"
#include "symbols/debug_cache.h"
#include "symbols/debug_lookup.h"

namespace tpe {

// What a symbolizer reads through (each optional, not owned, outliving it): files read by earlier
// renders and where this one keeps those it reads; the perf maps of JIT code; where refused files
// are counted; separate debug files (where they are looked for, what was found, a debuginfod
// client, how long Prepare waits for its fetches, and the counts of each source's outcome).
struct SymbolizerCaches {
  ElfFileCache* elf = nullptr;
  PerfMapCache* perf_maps = nullptr;
  FileRefusalCounts* elf_refusals = nullptr;
  symbols::DebugCache* debug = nullptr;                        // null: no debug file looked for, no DWARF read
  const symbols::DebugLookupOptions* debug_options = nullptr;  // null: the defaults
  symbols::DebuginfodClient* debuginfod = nullptr;
  symbols::DebugInfoCounts* debug_counts = nullptr;
  std::chrono::milliseconds debuginfod_wait{0};
  // Names kept from earlier renders (null: every render names every address). The symbolizer
  // keeps there what cannot improve later (name_cache.h) and reads files only for what is not.
  NameCache* names = nullptr;
};

// One function at an address.
struct SymbolFrame {
  std::string function;  // "" when no symbol holds the address
  std::string file;      // source file (DWARF); "" when unknown
  int64_t line = 0;      // source line (DWARF); 0 when unknown
  bool inlined = false;  // inlined into the next frame of its address
};

// A mapping the symbolizer's addresses lie in. Addresses are normalized: a user file's are file
// offsets, the kernel's and modules' offsets from their base, JIT code's its addresses.
struct SymbolMapping {
  std::string file;      // path as the process saw it, "[kernel.kallsyms]", "[xfs.ko]", "[jit pid N]", "[unknown]"
  std::string build_id;  // GNU build id as lowercase hex; "" when unknown
  uint64_t limit = 0;    // end of the addresses (the file's size), exclusive
  uint64_t key = 0;      // tells apart mappings otherwise equal (two files of one path)
};

// One named address.
struct SymbolizedAddress {
  uint64_t address = 0;  // normalized (SymbolMapping); 0 for a frame that only names ("[unknown]")
  uint32_t mapping = 0;  // Symbolizer::mapping(index)
  // Innermost first: the functions inlined at the address (inlined = true), then the function
  // holding it. Empty when nothing names it (address and mapping remain).
  std::vector<SymbolFrame> frames;
  // Why it is not named: no symbol holds it (in a known mapping), or it lies in no mapping known
  // for its process (frames then hold one "[unknown]").
  enum class Miss : uint8_t { kNone, kNoSymbol, kUnknownMapping };
  Miss miss = Miss::kNone;
};

class Symbolizer {
 public:
  struct Stats {
    uint64_t frames = 0;               // frames named or not
    uint64_t unsymbolized = 0;         // in a known mapping, but no symbol holds the address
    uint64_t unknown_mapping = 0;      // user frames in no mapping known for their process
    uint64_t kernel_unsymbolized = 0;  // kernel frames no symbol holds (part of unsymbolized)
    uint64_t file_changed = 0;         // files no longer the ones sampled (or gone): not read
    uint64_t inlined = 0;              // inlined frames named (DWARF), besides `frames`
  };

  using Caches = SymbolizerCaches;
  // `files` (not owned, outlives this): what UserFrame::file refers to. `kallsyms`: the kernel's
  // symbols (null or hidden: no kernel frame named). `proc_root`: where /proc is (tests use a
  // fake tree).
  Symbolizer(const MappedFiles* files, std::shared_ptr<const Kallsyms> kallsyms, Caches caches = {},
             std::string proc_root = "/proc");

  // A user address: a file offset, and whether it is a return address (named by the call before
  // it: offset - 1) rather than the exact pc of the leaf.
  struct UserAddress {
    uint64_t offset = 0;
    bool return_address = false;
  };
  // Reads what naming `batches` (addresses per file) needs: the files holding an address that
  // Caches::names does not; when a debuginfod server is still fetching some of their debug files,
  // waits for those at most Caches::debuginfod_wait and looks again.
  void Prepare(const std::map<FileId, std::vector<UserAddress>>& batches);
  // Names `addresses` in file `file` (kNoFile: no mapping known; one "[unknown]" each), one
  // result per address, in order: from Caches::names where it holds them, else from the file
  // (read now if Prepare did not), keeping there what qualifies.
  std::vector<SymbolizedAddress> SymbolizeUser(FileId file, std::span<const UserAddress> addresses);
  // Names kernel instruction addresses (`return_address` as above).
  struct KernelAddress {
    uint64_t ip = 0;
    bool return_address = false;
  };
  std::vector<SymbolizedAddress> SymbolizeKernel(std::span<const KernelAddress> addresses);

  // The mapping of a SymbolizedAddress. Indices are this symbolizer's.
  const SymbolMapping& mapping(uint32_t index) const { return mappings_[index]; }

  // Frames are counted by who walks the stacks (each occurrence): the renderer.
  Stats& stats() { return stats_; }
  const Stats& stats() const { return stats_; }
  // Kernel addresses no symbol held (at most 1024 of them), for KallsymsCache::MarkMissed.
  const std::set<uint64_t>& kernel_misses() const { return kernel_misses_; }

 private:
  // What is known of one file for this symbolizer's life.
  struct FileState {
    std::optional<MappedFile> file;
    std::shared_ptr<const elf::ElfFile> elf;
    std::shared_ptr<const symbols::DebugEntry> debug;
    std::shared_ptr<const PerfMap> perf_map;  // JIT code: read at the first frame that needs it
    bool perf_map_read = false;
    bool debug_pending = false;  // a debuginfod fetch was in progress
    uint32_t mapping = 0;
    std::shared_ptr<const SymbolMapping> kept_mapping;  // mappings_[mapping], as names kept refer to it
  };
  FileState& StateFor(FileId id);
  // The file's debug information (cached), or null when none is looked for. Opens the file when
  // `fd` < 0 and it is needed. Sets state->debug_pending while debuginfod fetches.
  void FindDebug(FileId id, FileState* state, int fd);
  uint32_t PseudoMapping(const std::string& name);
  uint32_t AddMapping(SymbolMapping m);
  SymbolizedAddress NameUser(FileState& state, const UserAddress& a);
  // Keeps `a` (looked up in `state`) in Caches::names when it cannot improve later: from a file
  // read (not JIT code), its debug information settled (no debuginfod fetch pending).
  void Keep(FileId id, FileState& state, const UserAddress& ua, const SymbolizedAddress& a);
  // This symbolizer's mapping index for file `id`, whose kept names carry `m`.
  uint32_t MappingOfKept(FileId id, const SymbolMapping& m);
  // The keys of `addresses` in file `id`.
  static std::vector<NameCache::Key> KeysOf(FileId id, std::span<const UserAddress> addresses);

  const MappedFiles* files_;
  std::shared_ptr<const Kallsyms> kallsyms_;  // never null
  Caches caches_;
  std::string proc_root_;
  Stats stats_;
  std::set<uint64_t> kernel_misses_;
  std::vector<SymbolMapping> mappings_;
  std::unordered_map<FileId, FileState> states_;
  std::unordered_map<FileId, uint32_t> file_mappings_;  // a file's mapping index, by file read or names kept
  std::map<std::string, uint32_t> pseudo_;              // "[unknown]", "[kernel.kallsyms]", "[xfs.ko]" -> mapping
};

}  // namespace tpe
