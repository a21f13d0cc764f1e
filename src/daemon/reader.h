// The reader: drains every CPU's perf ring in rounds and dispatches records in timestamp order.
//
// One round (as tools/lib/perf's read_init → read_event/consume → read_done, over all rings):
//   1. note T = CLOCK_MONOTONIC now, then acquire-load each ring's data_head and index the
//      records up to it (time, bytes);
//   2. merge the rings by timestamp and dispatch every record older than T - kReorderSlackNs
//      (perf's "ordered events"): the kernel stamps a record a few microseconds before it
//      commits it, so any record stamped before that limit, on any CPU, was already in its
//      ring when we loaded data_head. PERF_RECORD_COMM/FORK/EXIT thus reach the comm table
//      before the samples that follow them, whichever CPU either ran on;
//   3. copy the few records too young to dispatch (at most kReorderSlackNs worth) out of the
//      ring into a side buffer, and release-store data_tail = data_head once per ring. The ring
//      is never held back, so ordering costs no ring space.
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

// How long before a round's start a record must be stamped to be dispatched in that round.
// The stamp-to-commit gap is microseconds; 2 ms also covers a vCPU briefly descheduled by the
// hypervisor mid-write.
inline constexpr uint64_t kReorderSlackNs = 2'000'000;

struct CpuRing {
  int cpu = 0;
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
  uint64_t head = 0;  // data_head loaded this round
};

class Reader {
 public:
  Reader(Plan* plan, std::deque<CpuRing>* rings);

  // One round over all rings. `flush_all`: dispatch everything read (at shutdown).
  void Round(bool flush_all);

  uint64_t other_records() const { return other_records_.Get(); }
  uint64_t sample_errors() const { return sample_errors_.Get(); }
  uint64_t rounds() const { return rounds_.Get(); }
  uint64_t held_records() const { return held_records_.Get(); }
  CommTable& comms() { return comms_; }

 private:
  void Index(CpuRing* r);
  void HoldAndRelease(CpuRing* r);
  void Dispatch(const CpuRing::Pending& p, uint32_t cpu);

  Plan* plan_;                  // not owned; outlives the reader
  std::deque<CpuRing>* rings_;  // not owned
  std::unordered_map<uint64_t, EventPlan*> by_id_;
  CommTable comms_;
  bool ordered_;
  RelaxedCounter held_records_;
  RelaxedCounter other_records_;
  RelaxedCounter sample_errors_;  // PERF_RECORD_SAMPLEs too short for their declared layout
  RelaxedCounter rounds_;
};

}  // namespace tpe
