// The reader: drains every CPU's perf ring in rounds and dispatches records in timestamp order.
//
// One round (as tools/lib/perf's read_init → read_event/consume → read_done, over all rings):
//   1. note T = CLOCK_MONOTONIC now, then acquire-load each ring's data_head and index the
//      records up to it (time, bytes);
//   2. merge the rings by timestamp and dispatch every record stamped before a limit that no
//      record still to come can precede (perf's "ordered events"). Per ring: a CPU writes its
//      ring in time order, except for records of nested interrupts, so a ring that delivered
//      records this round will not later deliver one stamped much before its last one
//      (bound: last time − kNestingSlackNs); a ring that delivered nothing may still be
//      committing a record stamped just before T (bound: T − kQuietSlackNs). The limit is the
//      smallest bound. PERF_RECORD_COMM/FORK/EXIT thus reach the comm table before the samples
//      that follow them, and latency starts before their ends, whichever CPUs they ran on;
//   3. copy the few records too young to dispatch out of the ring into a side buffer, and
//      release-store data_tail = data_head once per ring. The ring is never held back.
// Without ordering needs (no comm labels, no latency) every record is dispatched at once.
// About once a second the collectors sweep their series (Collector::Sweep): idle ones go, and
// those of tasks whose PERF_RECORD_EXIT arrived become removable; and each sampled event's hits
// are checked against its samples and lost samples (EventPlan::unaccounted).
//
// Dispatch: PERF_RECORD_SAMPLE → the event (by PERF_SAMPLE_IDENTIFIER) → each collector;
// COMM/FORK/EXIT → CommTable (and, with MMAP2, → ProcessImages: a profile's user frames);
// LOST/LOST_SAMPLES → the CPU ring's lost count (a LOST record's
// `lost` covers every event writing into the ring, task records too, and its id is only the
// event that happened to write next: per-event losses come from PERF_FORMAT_LOST instead), and a
// LOST record puts the CommTable's names in doubt (CommTable::OnLost);
// other types are stepped over by header.size and counted.
//
// Thread-safety: one thread calls Round(); the counters it exposes are relaxed atomics.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "collectors/comm_table.h"
#include "common/metric_desc.h"
#include "common/scoped_fd.h"
#include "perf/ring_buffer.h"
#include "plan/plan.h"
#include "process/process_images.h"
#include "unwind/cfi_cache.h"

namespace tpe {

// How far a ring that delivered records may still go back in time (nested IRQ/NMI records).
inline constexpr uint64_t kNestingSlackNs = 50'000;
// How long before the round's start a record may be stamped and still be uncommitted on a ring
// that delivered nothing this round. The stamp-to-commit gap is microseconds; 1 ms also covers
// a vCPU briefly descheduled by the hypervisor mid-write.
inline constexpr uint64_t kQuietSlackNs = 1'000'000;
// The reader's longest sleep between rounds (Reader::idle_ns): while a metric counts ring
// samples, and otherwise.
inline constexpr uint64_t kMetricIdleNs = 100'000'000;
inline constexpr uint64_t kIdleNs = 1'000'000'000;

struct CpuRing {
  int cpu = 0;
  ScopedFd owner;  // the ring-owner perf event (MakeRingOwnerAttr); the ring maps it
  std::unique_ptr<RingBuffer> ring;
  RelaxedCounter bytes_read;
  RelaxedCounter lost_samples;  // from PERF_RECORD_LOST / LOST_SAMPLES
  RelaxedCounter errors;        // garbled ring data (a header that cannot be right)

  // Records read but not yet dispatched: first those held over from earlier rounds (bytes in
  // held[cur_held]), then this round's (bytes in the ring, or its wrap scratch).
  struct Pending {
    uint64_t time_ns;
    uint32_t type;
    Bytes bytes;
  };
  std::vector<Pending> pending;
  size_t next = 0;               // first pending record not dispatched
  std::vector<uint8_t> held[2];  // side buffers for held records, used alternately
  int cur_held = 0;
  uint64_t head = 0;          // data_head loaded this round
  bool delivered = false;     // records were indexed this round
  uint64_t last_time_ns = 0;  // timestamp of the last record indexed this round
};

class Reader {
 public:
  // `images` (optional, outlives the reader): where PERF_RECORD_MMAP2 and the exec, fork and
  // exit records go, and where the plan's profiles normalize their samples' user frames;
  // `tables` (optional, outlives the reader): the unwind tables their "dwarf" stacks are
  // unwound with.
  Reader(Plan* plan, std::deque<CpuRing>* rings, ProcessImages* images = nullptr, unwind::CfiCache* tables = nullptr);

  // Switches dispatch to `plan` (a reload) and re-reads its events' ids (also after a CPU's
  // events were reopened); hands the plan's collectors the process images. Records still held from before go to the
  // event that now has their id, or are counted as other records when no event has it any more.
  void SetPlan(Plan* plan);

  // One round over all rings. `flush_all`: dispatch everything read (at shutdown).
  void Round(bool flush_all);

  // A mark: `fn` is called on the reader thread with the plan once every record stamped before
  // `at_ns` (CLOCK_MONOTONIC) has been dispatched and none stamped at or after it — the
  // collectors' state exactly at that instant (a ?seconds=N profile window's bounds). Marks
  // whose time has passed run in the next round; a flush_all round (shutdown) runs them all.
  // Any thread.
  void AddMark(uint64_t at_ns, std::function<void(const Plan&)> fn);

  // How long the reader thread may sleep between rounds when no ring reaches its watermark and
  // no mark is due (ns): 100 ms while a metric counts the rings' samples (its /metrics counts
  // lag by at most that), 1 s when only profiles read the rings (a render or a ?seconds window
  // catches up with a mark first, which wakes the reader) or nothing does. The gap check, the
  // sweeps and the CPU check run every second either way. Set by SetPlan; reader thread.
  uint64_t idle_ns() const { return idle_ns_; }
  // CLOCK_MONOTONIC ns of the earliest pending mark; ~0: none. Any thread.
  uint64_t next_mark_ns() const { return next_mark_ns_.load(std::memory_order_relaxed); }

  uint64_t other_records() const { return other_records_.Get(); }
  uint64_t sample_errors() const { return sample_errors_.Get(); }
  uint64_t held_records() const { return held_records_.Get(); }
  CommTable& comms() { return comms_; }

 private:
  void Index(CpuRing* r);
  void HoldAndRelease(CpuRing* r);
  void Dispatch(const CpuRing::Pending& p, uint32_t cpu);

  Plan* plan_;                  // not owned; outlives the reader
  std::deque<CpuRing>* rings_;  // not owned
  // PERF_SAMPLE_IDENTIFIER → event (Plan::events and Plan::draining), sorted by id: events × CPUs
  // entries, and for "pid" events one per thread and CPU; the last hit is tried first.
  EventPlan* FindEvent(uint64_t id);
  std::vector<std::pair<uint64_t, EventPlan*>> by_id_;
  size_t last_hit_ = 0;
  CommTable comms_;
  ProcessImages* images_;
  // The plan has events that learn mappings (EventPlan::learns_mappings): only then do the task
  // records reach images_ (else a fork would read its parent's /proc/PID/maps and every process
  // image would be kept, for no profile).
  bool learn_images_ = false;
  unwind::CfiCache* tables_;
  // Marks by time; next_mark_ns_ is the first one's (max: none), read on every dispatch.
  void RunMarks(uint64_t before_ns);
  std::mutex marks_mu_;
  std::multimap<uint64_t, std::function<void(const Plan&)>> marks_;
  std::atomic<uint64_t> next_mark_ns_{~0ull};
  uint64_t last_sweep_ns_ = 0;
  // Unaccounted hits (EventPlan::unaccounted): the counts of every sampled event are read, then
  // the clock (check_time_ns_); once every record stamped before that time has been dispatched,
  // hits − lost − (samples stamped up to then) is a lower bound of the hits that never became a
  // sample or a lost sample (a hit counted before the read is stamped before the clock; a few
  // stamped before it may not be counted yet, which only lowers the bound).
  void StartGapCheck();
  void FinishGapCheck();
  uint64_t check_time_ns_ = 0;  // 0: no check pending
  uint64_t last_check_ns_ = 0;
  bool ordered_;
  uint64_t idle_ns_ = 0;
  RelaxedCounter held_records_;
  RelaxedCounter other_records_;
  RelaxedCounter sample_errors_;  // PERF_RECORD_SAMPLEs too short for their declared layout
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kRingOtherRecordsTotalDesc{
    "tracepoint_exporter_ring_other_records_total",
    "Ring records of types not used (stepped over) or samples of unknown ids.", MetricKind::kCounter};

}  // namespace tpe
