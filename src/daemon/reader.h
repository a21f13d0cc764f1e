// The reader: drains every CPU's perf ring in rounds and dispatches records in timestamp order.
//
// One round (as tools/lib/perf's read_init → read_event/consume → read_done, over all rings):
//   1. note T = CLOCK_MONOTONIC now; acquire-load each ring's data_head and index the records
//      not seen yet (time, position);
//   2. merge the rings by timestamp and dispatch every record older than the previous round's
//      T minus kReorderSlackNs (perf's "ordered events" idea): a record written on another CPU
//      with an earlier timestamp has been committed by then, so PERF_RECORD_COMM/FORK/EXIT
//      always reach the comm table before the samples that follow them;
//   3. release-store each ring's data_tail once, past the last dispatched record. Records not
//      yet old enough stay in the ring (and in the index) for the next round.
// Without ordering needs (no comm labels) every record is dispatched in the round it is read.
//
// Dispatch: PERF_RECORD_SAMPLE → the event (by PERF_SAMPLE_IDENTIFIER) → each collector;
// COMM/FORK/EXIT → CommTable; LOST/LOST_SAMPLES → per-event and per-CPU lost counts; other
// types are stepped over by header.size and counted.
//
// Thread-safety: one thread calls Round(); the counters it exposes are relaxed atomics.
#pragma once

#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "collectors/comm_table.h"
#include "daemon/plan.h"
#include "perf/ring_buffer.h"

namespace tpe {

inline constexpr uint64_t kReorderSlackNs = 2'000'000;  // 2 ms

struct CpuRing {
  int cpu = 0;
  std::unique_ptr<RingBuffer> ring;
  RelaxedCounter bytes_read;
  RelaxedCounter lost_samples;  // from PERF_RECORD_LOST / LOST_SAMPLES
  RelaxedCounter errors;        // garbled ring data (a header that cannot be right)

  // Index of records read but not yet dispatched.
  struct Pending {
    uint64_t time_ns;
    uint32_t type;
    Bytes bytes;
    uint64_t end;
  };
  std::vector<Pending> pending;
  size_t next = 0;        // first pending record not dispatched
  uint64_t scanned = 0;   // ring position up to which records are indexed
  bool initialized = false;
};

class Reader {
 public:
  Reader(Plan* plan, std::deque<CpuRing>* rings);

  // One round over all rings. `flush_all`: dispatch everything read (at shutdown).
  void Round(bool flush_all);

  uint64_t other_records() const { return other_records_.Get(); }
  uint64_t sample_errors() const { return sample_errors_.Get(); }
  uint64_t rounds() const { return rounds_.Get(); }
  CommTable& comms() { return comms_; }

 private:
  void Index(CpuRing* r);
  void Dispatch(const CpuRing::Pending& p, uint32_t cpu);

  Plan* plan_;                  // not owned; outlives the reader
  std::deque<CpuRing>* rings_;  // not owned
  std::unordered_map<uint64_t, EventPlan*> by_id_;
  CommTable comms_;
  bool ordered_;
  uint64_t prev_round_start_ns_ = 0;
  RelaxedCounter other_records_;
  RelaxedCounter sample_errors_;  // PERF_RECORD_SAMPLEs too short for their declared layout
  RelaxedCounter rounds_;
};

}  // namespace tpe
