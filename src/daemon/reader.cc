#include "daemon/reader.h"

#include <linux/perf_event.h>

#include <ctime>
#include <limits>

#include "decode/sample.h"
#include "perf/records.h"

namespace tpe {
namespace {
uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

Reader::Reader(Plan* plan, std::deque<CpuRing>* rings) : plan_(plan), rings_(rings), ordered_(plan->needs_comm) {
  for (auto& e : plan_->events) {
    for (uint64_t id : e->ids) by_id_[id] = e.get();
  }
}

void Reader::Index(CpuRing* r) {
  if (!r->initialized) {
    r->scanned = r->ring->tail();
    r->initialized = true;
  }
  // Drop what was dispatched last round; keep the rest (still in the ring: tail not past it).
  if (r->next > 0) {
    r->pending.erase(r->pending.begin(), r->pending.begin() + static_cast<ptrdiff_t>(r->next));
    r->next = 0;
  }
  const uint64_t head = r->ring->LoadHead();
  // Records before `scanned` are already indexed.
  RingCursor c2 = r->ring->CursorFrom(r->scanned, head);
  RawRecord rec;
  for (;;) {
    RingCursor::Result res = c2.Next(&rec);
    if (res == RingCursor::Result::kEnd) break;
    if (res == RingCursor::Result::kCorrupt) {
      r->errors.Add(1);
      // Nothing after a garbled header can be trusted: drop the rest of this batch.
      r->pending.push_back({0, PERF_RECORD_MAX, Bytes(), head});
      r->scanned = head;
      return;
    }
    uint64_t t = 0;
    if (!RecordTime(rec.type, rec.bytes, &t)) t = 0;  // too short for a time: dispatch early, count there
    r->pending.push_back({t, rec.type, rec.bytes, rec.end});
    r->bytes_read.Add(rec.bytes.size());
  }
  r->scanned = c2.position();
}

void Reader::Dispatch(const CpuRing::Pending& p, uint32_t cpu) {
  switch (p.type) {
    case PERF_RECORD_SAMPLE: {
      Sample s;
      if (!ParseSample(p.bytes, &s)) {
        sample_errors_.Add(1);
        return;
      }
      s.cpu = cpu;
      auto it = by_id_.find(s.id);
      if (it == by_id_.end()) {
        other_records_.Add(1);
        return;
      }
      EventPlan* ep = it->second;
      ep->samples.Add(1);
      for (auto& [collector, index] : ep->consumers) collector->OnSample(index, s, &comms_);
      return;
    }
    case PERF_RECORD_COMM: {
      CommRecord c;
      if (ParseCommRecord(p.bytes, &c)) comms_.OnComm(c.tid, c.comm);
      return;
    }
    case PERF_RECORD_FORK: {
      TaskRecord t;
      if (ParseTaskRecord(p.bytes, &t)) comms_.OnFork(t.ptid, t.tid);
      return;
    }
    case PERF_RECORD_EXIT: {
      TaskRecord t;
      if (ParseTaskRecord(p.bytes, &t)) comms_.OnExit(t.tid);
      return;
    }
    case PERF_RECORD_LOST:
    case PERF_RECORD_LOST_SAMPLES: {
      LostRecord l;
      if (!ParseLostRecord(p.type, p.bytes, &l)) return;
      for (auto& r : *rings_) {
        if (r.cpu == static_cast<int>(cpu)) r.lost_samples.Add(l.lost);
      }
      auto it = by_id_.find(l.id);
      if (it != by_id_.end()) it->second->ring_lost.Add(l.lost);
      return;
    }
    default: other_records_.Add(1); return;
  }
}

void Reader::Round(bool flush_all) {
  rounds_.Add(1);
  const uint64_t now = MonotonicNs();
  for (auto& r : *rings_) Index(&r);
  uint64_t limit = std::numeric_limits<uint64_t>::max();
  if (ordered_ && !flush_all) limit = prev_round_start_ns_ > kReorderSlackNs ? prev_round_start_ns_ - kReorderSlackNs : 0;
  prev_round_start_ns_ = now;

  // k-way merge by timestamp (k = number of CPUs: a linear scan beats a heap here).
  for (;;) {
    CpuRing* best = nullptr;
    for (auto& r : *rings_) {
      if (r.next >= r.pending.size()) continue;
      const auto& p = r.pending[r.next];
      if (p.time_ns > limit) continue;
      if (best == nullptr || p.time_ns < best->pending[best->next].time_ns) best = &r;
    }
    if (best == nullptr) break;
    const auto& p = best->pending[best->next++];
    if (p.type != PERF_RECORD_MAX) Dispatch(p, static_cast<uint32_t>(best->cpu));
  }
  for (auto& r : *rings_) {
    if (r.next > 0) r.ring->StoreTail(r.pending[r.next - 1].end);
  }
}

}  // namespace tpe
