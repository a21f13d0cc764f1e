#include "daemon/reader.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <ctime>
#include <limits>

#include "common/clock.h"
#include "decode/sample.h"
#include "perf/perf_event.h"
#include "perf/records.h"

namespace tpe {
Reader::Reader(Plan* plan, std::deque<CpuRing>* rings, ProcessImages* images, unwind::CfiCache* tables)
    : rings_(rings), images_(images), tables_(tables) {
  SetPlan(plan);
}

void Reader::SetPlan(Plan* plan) {
  plan_ = plan;
  check_time_ns_ = 0;  // a pending gap check belongs to the events it read
  ordered_ = plan->needs_ordering || plan->needs_comm;
  by_id_.clear();
  last_hit_ = 0;
  bool learns = false;
  for (const auto* events : {&plan_->events, &plan_->draining}) {
    for (auto& e : *events) {
      for (uint64_t id : e->ids) {
        if (id != 0) by_id_.emplace_back(id, e.get());
      }
      learns = learns || e->learns_mappings();
    }
  }
  std::sort(by_id_.begin(), by_id_.end());
  const bool learnt = learn_images_;
  learn_images_ = images_ != nullptr && learns;
  // The records that follow are not learnt: what is known would go stale (a later plan that
  // learns again starts from /proc).
  if (learnt && !learn_images_) images_->Clear();
  for (auto& m : plan_->metrics) {
    if (m.collector != nullptr) m.collector->set_user_stacks(images_, tables_);
  }
  // 100 ms while a metric (not a profile: renders catch up with a mark) counts ring samples.
  idle_ns_ = kIdleNs;
  for (const auto* events : {&plan_->events, &plan_->draining}) {
    for (auto& e : *events) {
      for (auto& [collector, index] : e->consumers) {
        if (collector != nullptr && !collector->is_profile()) idle_ns_ = kMetricIdleNs;
      }
    }
  }
}

EventPlan* Reader::FindEvent(uint64_t id) {
  if (last_hit_ < by_id_.size() && by_id_[last_hit_].first == id) return by_id_[last_hit_].second;
  auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::make_pair(id, static_cast<EventPlan*>(nullptr)));
  if (it == by_id_.end() || it->first != id) return nullptr;
  last_hit_ = static_cast<size_t>(it - by_id_.begin());
  return it->second;
}

void Reader::Index(CpuRing* r) {
  r->head = r->ring->LoadHead();
  r->delivered = false;
  if (r->head - r->ring->tail() > r->ring->data_size()) {
    // More unread bytes than the ring holds: a data_head that cannot be right. Nothing in it
    // can be trusted; skip to it (counted).
    r->errors.Add(1);
    r->ring->StoreTail(r->head);
    return;
  }
  RingCursor cursor = r->ring->Cursor(r->head);
  RawRecord rec;
  for (;;) {
    RingCursor::Result res = cursor.Next(&rec);
    if (res == RingCursor::Result::kEnd) break;
    if (res == RingCursor::Result::kCorrupt) {
      // Nothing after a garbled header can be trusted: the rest of this batch is dropped.
      r->errors.Add(1);
      return;
    }
    uint64_t t = 0;
    if (!RecordTime(rec.type, rec.bytes, &t)) t = 0;  // too short for a time: dispatched (and counted) at once
    r->pending.push_back({t, rec.type, rec.bytes});
    r->delivered = true;
    r->last_time_ns = t;
    r->bytes_read.Add(rec.bytes.size());
  }
}

void Reader::HoldAndRelease(CpuRing* r) {
  const size_t left = r->pending.size() - r->next;
  if (left > 0) {
    // Copy the records not dispatched yet into the other side buffer (they may live in the
    // ring, in its wrap scratch, or in the current side buffer).
    std::vector<uint8_t>& dst = r->held[1 - r->cur_held];
    size_t total = 0;
    for (size_t i = r->next; i < r->pending.size(); ++i) total += r->pending[i].bytes.size();
    dst.clear();
    dst.reserve(total);
    for (size_t i = r->next; i < r->pending.size(); ++i) {
      dst.insert(dst.end(), r->pending[i].bytes.begin(), r->pending[i].bytes.end());
    }
    size_t off = 0;
    for (size_t i = r->next; i < r->pending.size(); ++i) {
      CpuRing::Pending p = r->pending[i];
      p.bytes = Bytes(dst.data() + off, p.bytes.size());
      off += p.bytes.size();
      r->pending[i - r->next] = p;
    }
    r->cur_held = 1 - r->cur_held;
    held_records_.Add(left);
  }
  r->pending.resize(left);
  r->next = 0;
  if (r->head != r->ring->tail()) r->ring->StoreTail(r->head);
}

void Reader::Dispatch(const CpuRing::Pending& p, uint32_t cpu) {
  switch (p.type) {
    case PERF_RECORD_SAMPLE: {
      // The event (from its identifier, first) says the layout: which optional fields it has.
      uint64_t id = 0;
      if (!SampleId(p.bytes, &id)) {
        sample_errors_.Add(1);
        return;
      }
      EventPlan* ep = FindEvent(id);
      Sample s;
      const SampleLayout layout = ep == nullptr
                                      ? SampleLayout{}
                                      : SampleLayout{.cgroup = ep->cgroup,
                                                     .callchain = ep->callchain != 0,
                                                     .period = ep->clock(),
                                                     .regs_user = ep->stack_user_bytes > 0 ? kSampleRegsUserCount : 0,
                                                     .stack_user = ep->stack_user_bytes > 0};
      if (!ParseSample(p.bytes, &s, layout)) {
        sample_errors_.Add(1);
        return;
      }
      s.cpu = cpu;
      if (ep == nullptr) {
        other_records_.Add(1);
        return;
      }
      ep->samples.Add(1);
      if (check_time_ns_ != 0 && s.time_ns > check_time_ns_) ++ep->samples_after_check;
      for (auto& [collector, index] : ep->consumers) {
        // A metric added by a reload on a kept perf event starts at the reload: records still
        // in the ring from before it are not its to count.
        if (s.time_ns < collector->active_since_ns()) continue;
        collector->OnSample(index, s, &comms_);
      }
      return;
    }
    case PERF_RECORD_COMM: {
      CommRecord c;
      if (!ParseCommRecord(p.bytes, &c)) return;
      comms_.OnComm(c.tid, c.comm);
      if (c.exec && learn_images_) images_->OnExec(p.time_ns, c.pid);
      return;
    }
    case PERF_RECORD_FORK: {
      TaskRecord t;
      if (!ParseTaskRecord(p.bytes, &t)) return;
      comms_.OnFork(t.ptid, t.tid);
      if (learn_images_) images_->OnFork(p.time_ns, t.ppid, t.pid);
      return;
    }
    case PERF_RECORD_EXIT: {
      TaskRecord t;
      if (!ParseTaskRecord(p.bytes, &t)) return;
      comms_.OnExit(t.tid);
      if (learn_images_) images_->OnExit(p.time_ns, t.pid, t.tid);
      return;
    }
    case PERF_RECORD_MMAP2: {
      Mmap2Record m;
      if (!ParseMmap2Record(p.bytes, &m)) {
        sample_errors_.Add(1);
        return;
      }
      if (learn_images_) {
        images_->OnMmap(p.time_ns, m.pid, m.addr, m.len, m.pgoff, m.maj, m.min, m.ino, m.prot, m.filename);
      }
      return;
    }
    case PERF_RECORD_LOST:
    case PERF_RECORD_LOST_SAMPLES: {
      LostRecord l;
      if (!ParseLostRecord(p.type, p.bytes, &l)) return;
      // A full ring drops task records too (a LOST_SAMPLES record counts samples only).
      if (p.type == PERF_RECORD_LOST) {
        comms_.OnLost();
        if (learn_images_) images_->OnLost();
      }
      for (auto& r : *rings_) {
        if (r.cpu == static_cast<int>(cpu)) r.lost_samples.Add(l.lost);
      }
      return;
    }
    default:
      other_records_.Add(1);
      return;
  }
}

void Reader::AddMark(uint64_t at_ns, std::function<void(const Plan&)> fn) {
  std::lock_guard<std::mutex> lock(marks_mu_);
  marks_.emplace(at_ns, std::move(fn));
  next_mark_ns_.store(marks_.begin()->first, std::memory_order_relaxed);
}

void Reader::RunMarks(uint64_t before_ns) {
  for (;;) {
    std::function<void(const Plan&)> fn;
    {
      std::lock_guard<std::mutex> lock(marks_mu_);
      if (marks_.empty() || (before_ns != ~0ull && marks_.begin()->first >= before_ns)) break;
      fn = std::move(marks_.begin()->second);
      marks_.erase(marks_.begin());
      next_mark_ns_.store(marks_.empty() ? ~0ull : marks_.begin()->first, std::memory_order_relaxed);
    }
    fn(*plan_);
  }
}

void Reader::StartGapCheck() {
  for (auto& ep : plan_->events) {
    if (!ep->sampled) continue;
    ep->check_counts = ep->ReadCounts();
    ep->samples_after_check = 0;
  }
  check_time_ns_ = MonotonicNs();
}

void Reader::FinishGapCheck() {
  for (auto& ep : plan_->events) {
    // A clock event's kernel count is ns of the clock, not hits: no gap to measure.
    if (!ep->sampled || ep->clock()) continue;
    const uint64_t seen = ep->samples.Get() - ep->samples_after_check + ep->check_counts.lost;
    if (ep->check_counts.count > seen && ep->check_counts.count - seen > ep->unaccounted.Get()) {
      ep->unaccounted.v.store(ep->check_counts.count - seen, std::memory_order_relaxed);
    }
  }
  check_time_ns_ = 0;
}

void Reader::Round(bool flush_all) {
  const uint64_t now = MonotonicNs();
  if (check_time_ns_ == 0 && now - last_check_ns_ >= 1'000'000'000ULL && !flush_all) {
    last_check_ns_ = now;
    StartGapCheck();
  }
  for (auto& r : *rings_) Index(&r);
  uint64_t limit = std::numeric_limits<uint64_t>::max();
  if (ordered_ && !flush_all) {
    for (const auto& r : *rings_) {
      const uint64_t bound = r.delivered ? (r.last_time_ns > kNestingSlackNs ? r.last_time_ns - kNestingSlackNs : 0)
                                         : (now > kQuietSlackNs ? now - kQuietSlackNs : 0);
      limit = std::min(limit, bound);
    }
  }

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
    if (p.time_ns >= next_mark_ns_.load(std::memory_order_relaxed)) RunMarks(p.time_ns + 1);
    Dispatch(p, static_cast<uint32_t>(best->cpu));
  }
  // Every record stamped before the limit is dispatched (without ordering: before the quiet
  // slack, the time a record may take to be committed); at shutdown, every record.
  if (next_mark_ns_.load(std::memory_order_relaxed) != ~0ull) {
    const uint64_t done = flush_all                                       ? ~0ull
                          : limit != std::numeric_limits<uint64_t>::max() ? limit
                          : now > kQuietSlackNs                           ? now - kQuietSlackNs
                                                                          : 0;
    RunMarks(done == ~0ull ? done : done + 1);
  }
  // Every record stamped up to the check was dispatched once the limit passed it (a round that
  // started a quiet-slack later indexed whatever was still being committed then).
  if (check_time_ns_ != 0) {
    const bool all_dispatched =
        limit != std::numeric_limits<uint64_t>::max() ? limit >= check_time_ns_ : now >= check_time_ns_ + kQuietSlackNs;
    if (all_dispatched) FinishGapCheck();
  }
  for (auto& r : *rings_) HoldAndRelease(&r);
  for (auto& m : plan_->metrics) {
    if (m.collector) m.collector->OnRoundEnd();  // null once a reload moved it to the next pipeline
  }
  if (now - last_sweep_ns_ >= 1'000'000'000ULL || flush_all) {
    last_sweep_ns_ = now;
    const double idle_s = plan_->settings.series_idle_timeout_seconds;
    const uint64_t idle_ns = idle_s > 0 ? static_cast<uint64_t>(idle_s * 1e9) : 0;
    const TaskExited exited = [this](uint32_t tid) { return comms_.HasExited(tid); };
    for (auto& m : plan_->metrics) {
      Collector* c = m.collector.get();
      if (c && !c->SweepsOffReader()) c->Sweep(now, idle_ns, exited);  // the others: collectors/sweeper.h
    }
  }
}

}  // namespace tpe
