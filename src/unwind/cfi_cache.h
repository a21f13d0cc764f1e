// The unwind tables of the files samples run in, read once per file (FileId: a file's identity
// including its content as first seen), never per sample, and bounded in bytes; and the
// CodeLookup that joins them with the process images of a sample's time.
//
// A file is opened as untrusted through process/mapped_file_open.h (the process's map_files or
// root, or its path). A file that cannot be read now (its process and file are gone; refused)
// is remembered as tableless for 10 s, so its frames fall back to the frame pointer without a
// retry at every sample.
//
// Thread-safety: CfiCache's methods from any thread (one mutex); the tables it hands out are for
// one thread at a time (CfiTable) — the reader's. ProcessCodeLookup: one thread.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/metric_desc.h"
#include "common/untrusted_file.h"
#include "process/mapped_files.h"
#include "process/process_images.h"
#include "unwind/cfi_table.h"
#include "unwind/unwinder.h"

namespace tpe::unwind {

class CfiCache {
 public:
  struct Options {
    std::string proc_root = "/proc";
    uint64_t max_bytes = uint64_t{256} << 20;  // tables' CfiTable::memory_bytes
    size_t max_files = 1024;
    uint64_t retry_ns = 10'000'000'000;  // a file that could not be read is tried again after
  };
  struct Stats {
    uint64_t reads = 0;       // files read, with a table
    uint64_t unreadable = 0;  // attempts that found none (gone, changed, refused, not ELF, no CFI)
    uint64_t evictions = 0;
    uint64_t bytes = 0;
    size_t files = 0;
  };
  // `files` (not owned; outlives this): what FileIds name.
  CfiCache(const MappedFiles* files, Options options);
  explicit CfiCache(const MappedFiles* files) : CfiCache(files, Options{}) {}

  // The table of `file`, read now if needed; null when it has none or cannot be read.
  // `now_ns`: CLOCK_MONOTONIC.
  std::shared_ptr<const CfiTable> Get(FileId file, uint64_t now_ns);

  Stats stats() const;
  const FileRefusalCounts& refusals() const { return refusals_; }

 private:
  struct Entry {
    std::shared_ptr<const CfiTable> table;  // null: none (until failed_at_ns + retry_ns)
    uint64_t failed_at_ns = 0;
    std::list<FileId>::iterator lru;
    bool logged = false;  // its failure logged
  };
  void EvictLocked();

  const MappedFiles* files_;
  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<FileId, Entry> entries_;
  std::list<FileId> lru_;  // front: most recent
  Stats stats_;
  FileRefusalCounts refusals_{"unwind"};
};

// The mappings a walk has been in, each with its file's table (null: the file has none), held
// while it runs (the cache may let them go meanwhile). A walk's frames are mostly in a few
// mappings (an interpreter's, libc's): each is asked of the images and the cache once per walk,
// or once for many walks with a SpanMemo.
struct HeldSpan {
  ProcessImages::CodeSpan span;
  std::shared_ptr<const CfiTable> table;
};

// What the last walks of a few processes held, kept from one sample to the next (the reader
// thread's: one per profile), so that the samples of a process that keeps running the same
// code ask the images and the cache nothing: a process's spans hold while the images learnt
// nothing since (ProcessImages::generation: any mapping, exec, fork, exit, eviction or loss
// anywhere) and for at most `max_age_ns` (a file without a table is asked for again, as
// CfiCache retries it). Up to kProcesses processes, the oldest replaced.
//
// Thread-safety: one thread.
class SpanMemo {
 public:
  static constexpr size_t kProcesses = 8;
  explicit SpanMemo(uint64_t max_age_ns = 1'000'000'000) : max_age_ns_(max_age_ns) {}
  // The spans kept for `pid`, emptied first when they no longer hold (`generation`: the images'
  // now; `now_ns`: CLOCK_MONOTONIC). Valid until the next call.
  std::vector<HeldSpan>* For(uint32_t pid, uint64_t generation, uint64_t now_ns);
  // Lets every process's spans go (the images or the cache asked are others now).
  void Clear() { processes_ = {}; }

 private:
  struct Process {
    uint32_t pid = 0;
    uint64_t generation = 0, since_ns = 0, used = 0;
    std::vector<HeldSpan> held;
  };
  const uint64_t max_age_ns_;
  std::array<Process, kProcesses> processes_;
  uint64_t uses_ = 0;
};

// The code at an address of process `pid` at the sample's time: its current process image
// (ProcessImages::CodeAt) and the file's table (CfiCache::Get). With `memo`, the spans of the
// process's earlier walks are used while they hold (SpanMemo).
class ProcessCodeLookup : public CodeLookup {
 public:
  ProcessCodeLookup(ProcessImages* images, CfiCache* tables, uint32_t pid, uint64_t now_ns, SpanMemo* memo = nullptr)
      : images_(images),
        tables_(tables),
        pid_(pid),
        now_ns_(now_ns),
        held_(memo != nullptr ? memo->For(pid, images->generation(), now_ns) : &own_) {}
  CodeAt At(uint64_t address) override;

 private:
  ProcessImages* images_;
  CfiCache* tables_;
  uint32_t pid_;
  uint64_t now_ns_;
  std::vector<HeldSpan> own_;
  std::vector<HeldSpan>* held_;
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kProfileUnwindTablesDesc{
    "tracepoint_exporter_profile_unwind_tables",
    "The unwind tables (.eh_frame, .debug_frame) \"dwarf\" profiles hold, one per file: "
    "files, and their bytes (bound: 256 MiB).",
    MetricKind::kGauge};
inline constexpr MetricDesc kProfileUnwindTableReadsTotalDesc{
    "tracepoint_exporter_profile_unwind_table_reads_total",
    "Files read for their unwind tables, by result: read, unreadable (gone, refused, not "
    "x86-64 ELF, or no call frame information: its frames are walked by frame pointer; tried "
    "again after 10 s), evicted (to stay within the bound).",
    MetricKind::kCounter};

}  // namespace tpe::unwind
