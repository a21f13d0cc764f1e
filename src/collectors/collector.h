// The interface every metric type implements (counter here; histogram and latency build on it).
//
// OnSample runs on the reader thread for each decoded sample of an event the metric listens to,
// in timestamp order; it must not lock or allocate once a label set has been seen. Snapshot
// runs on a scrape thread, concurrently with OnSample.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collectors/comm_table.h"
#include "collectors/label_set.h"
#include "collectors/snapshot.h"
#include "common/metric_desc.h"
#include "common/status.h"
#include "decode/sample.h"

namespace tpe {

// A monotonically increasing count written by one thread and read by others.
struct RelaxedCounter {
  std::atomic<uint64_t> v{0};
  void Add(uint64_t d) { v.store(v.load(std::memory_order_relaxed) + d, std::memory_order_relaxed); }
  uint64_t Get() const { return v.load(std::memory_order_relaxed); }
  uint64_t Count() const { return Get(); }  // for SeriesTable
};

// Why a latency start or end made no observation, on both engines
// (tracepoint_exporter_latency_unmatched_total{reason}).
struct LatencyUnmatched {
  enum Reason { kReplaced, kNoStart, kTableFull, kExpired, kSeriesLimit, kReasonCount };
  static const char* Name(Reason r);
};

// One value of an engine self-metric family a collector reports, under the family's MetricDesc
// (declared beside the code that counts it: collectors/profile.h, bpf/bpf_metric.h).
struct EngineStat {
  const MetricDesc* desc = nullptr;  // its family, declared beside the code that counts it
  LabelPairs labels;
  double value = 0;
};

// Whether the task with this thread id (as PERF_RECORD_EXIT reports it) has exited.
using TaskExited = std::function<bool(uint32_t tid)>;

class StackProfile;   // collectors/profile.h
class ProcessImages;  // process/process_images.h
namespace unwind {
class CfiCache;  // unwind/cfi_cache.h
}  // namespace unwind

class Collector {
 public:
  virtual ~Collector() = default;
  virtual const std::string& name() const = 0;
  // `event_index`: which of the metric's events the sample is from (0 for single-event metrics).
  virtual void OnSample(size_t event_index, const Sample& s, CommTable* comms) = 0;
  virtual MetricSnapshot Snapshot() const = 0;
  // True when some label needs comm (the reader then tracks task records).
  virtual bool NeedsComm() const = 0;
  // True when samples must arrive in timestamp order across CPUs (latency pairing).
  virtual bool NeedsOrdering() const { return NeedsComm(); }
  // Called by the reader after each round (e.g. to expire stale state).
  virtual void OnRoundEnd() {}
  // Series lifetime (SeriesTable::Sweep), called by the reader about once a second: series
  // unchanged for `idle_ns` (0 = never) are removed; series whose pid/tid label names a task
  // that `exited` become removable. A metric that is full also sweeps for exited tasks at once
  // (at most every 100 ms) when a new label set arrives, so a new task's series gets in.
  virtual void Sweep(uint64_t /*now_ns*/, uint64_t /*idle_ns*/, const TaskExited& /*exited*/) {}
  // True when Sweep does syscalls (the bpf engine reads its maps): it then runs on the sweeper
  // thread (collectors/sweeper.h), not on the reader's, and is given no exited-task records.
  virtual bool SweepsOffReader() const { return false; }
  // Called on the sweeper thread while the kernel's BPF run-time stats are on for a cost window
  // (bpf/program_cost.h): `open` right after they were turned on, then !`open` right before
  // they are turned off. The bpf engine measures its programs' ns per run; others ignore it.
  virtual void OnCostWindow(bool /*open*/) {}
  // Series removed so far: {idle, task exited}.
  virtual std::pair<uint64_t, uint64_t> series_removed() const { return {0, 0}; }

  // Samples stamped before this time (CLOCK_MONOTONIC ns) are not counted: set for a metric
  // that a reload adds, so that it counts from the reload on although it may share perf
  // events (and their not yet read samples) with metrics kept from before.
  uint64_t active_since_ns() const { return active_since_ns_; }
  void set_active_since_ns(uint64_t t) { active_since_ns_ = t; }

  // Lifecycle: Attach starts counting where the kernel does it for the collector (the bpf
  // engine's programs); Detach stops it (counts freeze, Snapshot still reads them). Collectors
  // fed by samples do nothing here. Owning (main) thread.
  virtual Status Attach() { return Status::Ok(); }
  virtual void Detach() {}
  // True while Attach's kernel objects are attached (always false for sample-fed collectors).
  virtual bool attached() const { return false; }

  // Self-metric inputs.
  // Latency metrics: unmatched starts/ends by reason and starts in flight.
  virtual bool is_latency() const { return false; }
  // Profiles (collectors/profile.h): served as pprof, not on /metrics.
  virtual bool is_profile() const { return false; }
  // A profile's stacks (non-null exactly when is_profile()); lives as long as the collector.
  virtual const StackProfile* stack_profile() const { return nullptr; }
  // Where a profile fed samples normalizes their user frames and finds the unwind tables of the
  // code they run in (not owned; outlive the collector): set by the reader before it dispatches
  // a sample. Others ignore them.
  virtual void set_user_stacks(ProcessImages* /*images*/, unwind::CfiCache* /*tables*/) {}
  virtual uint64_t unmatched(LatencyUnmatched::Reason /*r*/) const { return 0; }
  virtual size_t inflight() const { return 0; }
  // Engine-specific self-metric values (the bpf engine's program runs, misses, map memory).
  virtual std::vector<EngineStat> EngineStats() const { return {}; }
  virtual uint64_t series_dropped() const { return series_dropped_.Get(); }
  virtual uint64_t decode_errors() const { return decode_errors_.Get(); }

 protected:
  // For a full metric: true (sweep now) at most once per 100 ms of trace time.
  bool RoomSweepDue(uint64_t now_ns) {
    if (now_ns < last_room_sweep_ns_ + 100'000'000ULL && last_room_sweep_ns_ != 0) return false;
    last_room_sweep_ns_ = now_ns;
    return true;
  }
  uint64_t last_room_sweep_ns_ = 0;
  uint64_t active_since_ns_ = 0;
  RelaxedCounter series_dropped_;
  RelaxedCounter decode_errors_;
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kDecodeErrorsTotalDesc{"tracepoint_exporter_decode_errors_total",
                                                   "Samples a metric could not decode (a field outside the record).",
                                                   MetricKind::kCounter};
inline constexpr MetricDesc kSeriesDroppedTotalDesc{
    "tracepoint_exporter_series_dropped_total",
    "Samples not counted because the metric reached settings.max_series_per_metric.", MetricKind::kCounter};
inline constexpr MetricDesc kSeriesRemovedTotalDesc{
    "tracepoint_exporter_series_removed_total",
    "Series removed, by reason: idle (unchanged for settings.series_idle_timeout_seconds) or "
    "task_exited (its pid/tid label names a task that exited; removed once its final value "
    "was scraped, or at once when the metric is full and a new series needs the room).",
    MetricKind::kCounter};

}  // namespace tpe
