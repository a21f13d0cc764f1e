// ProcessImages: what each process maps, kept as a history of process images, so that a stack is
// named with the mappings its process had when the stack was taken — not those of render time,
// after an exec, a pid reused by another process, or an exit.
//
// An image is what a process maps from an exec (or its fork) to the next one. The table is fed
// by the reader thread with the task and mapping records in their time order (perf_event_open(2)
// PERF_RECORD_*; the records are dispatched in time order with the samples):
//  - PERF_RECORD_MMAP2 (attr.mmap2: executable mappings): a mapping of the process's current
//    image, replacing what it overlaps as mmap(2) over an old range does;
//  - PERF_RECORD_COMM with PERF_RECORD_MISC_COMM_EXEC: the current image ends, a new empty one
//    starts at the record's time, known whole from then on ("complete");
//  - PERF_RECORD_FORK of a new process (pid != ppid): its first image starts at the record's
//    time as a copy of the parent's current one — read from /proc/PPID/maps first when the parent
//    predates what the daemon learnt (a pre-forking server started before the daemon);
//  - PERF_RECORD_EXIT of the thread-group leader (tid == pid): the current image ends.
// A process first needed by a sample (it predates the daemon, or its records were lost in a full
// ring) is read from /proc/PID/maps then, at most once a second per process; an image that
// predates what was learnt starts at time 0. A full ring (OnLost: PERF_RECORD_LOST) may have
// dropped any process's exec or mmap records: every live process's current image is then in
// doubt, read again from /proc when a sample next needs it, and unused (kNoFile frames) while
// that read fails (the process is gone) — never the image of the program it ran before.
//
// Frames: Normalize (the perf engine, at sample time: the process's current image is the
// sample's) turns user instruction addresses into (file, offset) frames (UserFrame,
// process/mapped_files.h); NormalizeAt (the bpf engine, at render time) does it with the image the
// process had at a given time: the last one that started at or before it (the bpf program stamps
// a sample with the time of its process's last exec or fork, which the kernel traces after the
// records that start the image). A file is identified (stat of /proc/PID/map_files/START-END,
// else /proc/PID/root/PATH, else PATH; the inode must be the mapping's) when a frame first needs
// it; reading no file, this is a stat per mapping used.
//
// Bounded: the images hold at most `max_bytes` (estimated); past that, images go in this order:
// ended images that no sample used, oldest first; ended ones that a sample used; then the current
// images of live processes (read again from /proc when a sample needs them). Counted in
// stats().evicted. A lookup that lands on an evicted image gives kNoFile frames, never another
// image's.
//
// Thread-safety: every method from any thread (one mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/metric_desc.h"
#include "process/mapped_files.h"

namespace tpe {

// A user frame, normalized: the file it lies in and its offset there. kNoFile: in no mapping known
// for its process (offset 0). For anonymous memory (MappedFile::kAnonymous) the offset is the
// address itself (perf map files name addresses).
struct UserFrame {
  FileId file = kNoFile;
  uint64_t offset = 0;
  auto operator<=>(const UserFrame&) const = default;
};

class ProcessImages {
 public:
  struct Options {
    std::string proc_root = "/proc";  // tests use a fake tree
    size_t max_bytes = size_t{64} << 20;
  };
  // `files` (not owned, outlives this): where mapped files are interned.
  ProcessImages(MappedFiles* files, Options options);
  explicit ProcessImages(MappedFiles* files) : ProcessImages(files, Options{}) {}

  // The records, in time order; `time_ns`: the record's CLOCK_MONOTONIC stamp. pid 0 (a task
  // outside the daemon's pid namespace, which the kernel reports as 0) is ignored.
  void OnMmap(uint64_t time_ns, uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, uint32_t maj, uint32_t min,
              uint64_t ino, uint32_t prot, std::string_view filename);
  void OnExec(uint64_t time_ns, uint32_t pid);
  void OnFork(uint64_t time_ns, uint32_t ppid, uint32_t pid);
  void OnExit(uint64_t time_ns, uint32_t pid, uint32_t tid);
  // A ring lost records (PERF_RECORD_LOST): the current images of live processes are in doubt.
  void OnLost();
  // Forgets every process and image (the records stop coming: nothing known would stay true).
  // The interned paths and mapped files stay; stats' counters (evicted, proc_reads) too.
  void Clear();

  // Appends the frames of `ips` (user instruction addresses, leaf first: ips[0] the exact pc,
  // the others return addresses, looked up at ip - 1) to `out`, with `pid`'s current image, and
  // marks that image as used by a sample (kept longer). `now_ns` (CLOCK_MONOTONIC) paces the
  // /proc reads.
  void Normalize(uint32_t pid, std::span<const uint64_t> ips, uint64_t now_ns, std::vector<UserFrame>* out);
  // The same with the image `pid` had at `image_ns` (0: the one that predates what was learnt;
  // ~0: the latest). A process nothing is known of is read from /proc now (if it lives).
  void NormalizeAt(uint32_t pid, uint64_t image_ns, std::span<const uint64_t> ips, uint64_t now_ns,
                   std::vector<UserFrame>* out);

  // The code at `address` (looked up as given: no return-address adjustment) in `pid`'s current
  // image, for an unwinder at sample time: its file and the address's file offset (anonymous
  // memory: the address, and `*anonymous` true), or kNoFile. Reads /proc as Normalize does and
  // marks the image used by a sample. `span` (optional): the mapping the address lies in, so that
  // an unwinder can place the walk's later addresses in it without asking again.
  struct CodeSpan {
    uint64_t start = 0, end = 0;  // [start, end): addresses of the mapping
    uint64_t pgoff = 0;           // the file offset at `start` (file-backed)
    FileId file = kNoFile;        // kNoFile: nothing found (the other fields are 0)
    bool anonymous = false;       // offsets are the addresses themselves
    // The code at `address` of this span (`address` in [start, end)).
    UserFrame At(uint64_t address) const { return UserFrame{file, anonymous ? address : address - start + pgoff}; }
  };
  UserFrame CodeAt(uint32_t pid, uint64_t address, uint64_t now_ns, bool* anonymous, CodeSpan* span = nullptr);

  // What is known of `pid`'s current image (tests, and the renderer's liveness checks).
  struct ImageInfo {
    uint64_t start_ns = 0;
    bool complete = false;  // learnt since its exec or fork, or read from /proc
    bool ended = false;     // the process exited
    size_t mappings = 0;
  };
  std::optional<ImageInfo> Current(uint32_t pid) const;

  // Bumped whenever any image changes (a mapping learnt or read, an image started, ended,
  // evicted, sampled first or put in doubt, Clear): what a caller kept of CodeAt's answers holds
  // while it is unchanged. Lock-free.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  struct Stats {
    size_t processes = 0, images = 0;
    size_t bytes = 0;         // estimated bytes held
    uint64_t evicted = 0;     // images dropped to stay within max_bytes
    uint64_t proc_reads = 0;  // /proc/PID/maps read
  };
  Stats stats() const;

 private:
  struct Mapping {
    uint64_t start = 0, end = 0, pgoff = 0, inode = 0;
    uint32_t dev_major = 0, dev_minor = 0;
    uint32_t path = 0;  // paths_ id; 0: anonymous memory
    FileId file = kNoFile;
    bool resolved = false;  // `file` is set (perhaps to kNoFile: the table was full)
  };
  struct Image {
    uint64_t id = 0;
    uint64_t start_ns = 0;
    bool complete = false, ended = false, sampled = false, evicted = false;
    bool doubted = false;                        // current when a ring lost records, not read from /proc since
    std::vector<Mapping> mappings;               // sorted by start, not overlapping
    std::tuple<int, uint64_t> evict_key{-1, 0};  // (tier, seq) in evict_order_; tier -1: not in it
    size_t bytes = 0;
  };
  struct Process {
    std::vector<std::unique_ptr<Image>> images;  // by start; the last is the current one
    bool exited = false;
    uint64_t proc_tried_ns = 0;  // the last /proc read (attempted), CLOCK_MONOTONIC; 0: never
  };

  uint32_t PathId(std::string_view path);
  Image* CurrentOf(Process* p) const { return p->images.empty() ? nullptr : p->images.back().get(); }
  Image* NewImage(uint32_t pid, Process* p, uint64_t start_ns);
  // Re-files `img` in the eviction order after its state changed, and its bytes.
  void Refile(uint32_t pid, Image* img);
  void EnforceBound();
  // Reads /proc/PID/maps into `pid`'s current image (a new one at 0 when it has none), unless
  // read less than a second ago. True when read.
  bool ReadProc(uint32_t pid, Process* p, uint64_t now_ns);
  void Frames(uint32_t pid, Process* p, Image* img, bool current, std::span<const uint64_t> ips, uint64_t now_ns,
              std::vector<UserFrame>* out);
  FileId Resolve(uint32_t pid, const Image& img, bool current, Mapping* m);
  static void Insert(std::vector<Mapping>* maps, Mapping m);
  // Keeps when /proc was last tried for a process nothing could be read of (at most 4096).
  void RememberFailure(uint32_t pid, uint64_t tried_ns);
  // Under mu_: `pid`'s process (made if new), its current image read from /proc when it is not
  // complete (paced: once a second).
  Process& Learn(uint32_t pid, uint64_t now_ns);
  // Under mu_, after a sample's frames were taken from `p`'s current image: marks it sampled (kept
  // longer); a process nothing could be read of is forgotten (its attempt remembered): false.
  bool AfterSample(uint32_t pid, Process* p);

  MappedFiles* files_;
  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, Process> procs_;
  std::unordered_map<uint32_t, uint64_t> failed_;  // pid -> last /proc attempt that read nothing
  std::vector<UserFrame> scratch_;                 // CodeAt's one frame (no allocation per call)
  std::unordered_map<std::string, uint32_t> path_ids_;
  std::vector<const std::string*> paths_;                                // id -> path (keys of path_ids_); [0] unused
  std::set<std::tuple<int, uint64_t, uint32_t, uint64_t>> evict_order_;  // (tier, seq, pid, image id)
  uint64_t next_id_ = 1, next_seq_ = 1;
  size_t bytes_ = 0;
  Stats counts_;
  std::atomic<uint64_t> generation_{0};  // written under mu_
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kProfileLearntProcessesDesc{
    "tracepoint_exporter_profile_learnt_processes",
    "Processes whose mappings are known (from PERF_RECORD_MMAP2 and the task records, or read "
    "from /proc/PID/maps), to name profiles' user frames with the mappings of their time.",
    MetricKind::kGauge};
inline constexpr MetricDesc kProfileLearntImagesDesc{
    "tracepoint_exporter_profile_learnt_images",
    "Process images (what a process maps from one exec or fork to the next) held, and "
    "the bytes they hold (bound: 64 MiB).",
    MetricKind::kGauge};
inline constexpr MetricDesc kProfileLearntProcessesEvictedTotalDesc{
    "tracepoint_exporter_profile_learnt_processes_evicted_total",
    "Process images forgotten to stay within the bound: ended ones no sample used first, then "
    "ended ones with samples, then live ones (read again from /proc when needed).",
    MetricKind::kCounter};

}  // namespace tpe
