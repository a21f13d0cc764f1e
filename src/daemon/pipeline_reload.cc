// Pipeline (pipeline.h): Reload, the swap of a running plan for the next one — unchanged metrics
// keep their collectors, perf events and bpf programs, nothing is counted twice or by neither.
#include <algorithm>
#include <string>
#include <vector>

#include "collectors/counter.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/pipeline.h"
#include "plan/bpf_parts.h"

namespace tpe {

namespace {
// Adds the final counts of `d` (an event a reload closed) to the self-metric base of the event of
// `plan` that the self-metrics show under the same name (display, filter, pid and mode).
void FoldIntoGroup(const EventPlan& d, Plan* plan) {
  for (auto& ep : plan->events) {
    if (ep->display != d.display || ep->filter != d.filter || ep->pid != d.pid || ep->sampled != d.sampled) continue;
    const EventCount c = d.ReadCounts();
    ep->base.count += c.count;
    ep->base.lost += c.lost;
    ep->samples.Add(d.samples.Get());
    ep->unaccounted.Add(d.unaccounted.Get());
    return;
  }
}

// Whether metric `j` of the running plan and metric `i` of the next one are the same metric, so
// that the next plan adopts the running collector (and its bpf programs or perf consumers): the
// same identity *and* the same engine. A metric that fell back to perf (e.g. its map creation
// failed with ENOMEM) and is planned on bpf at a reload (or the reverse) is a new collector that is
// attached or fed by the next plan's events; adopting the old one would leave it with neither a
// program nor a perf event, and it would count nothing from then on. Its series restart (a counter
// reset).
bool SameMetric(const Plan& running, size_t j, const Plan& next, size_t i) {
  const MetricPlan& r = running.metrics[j];
  const MetricPlan& n = next.metrics[i];
  return r.collector && r.identity == n.identity && r.engine == n.engine;
}

// Each new event paired with the running one that has the same perf events (null: opened anew);
// `taken[j]`: running event j is kept.
std::vector<EventPlan*> PairKeptEvents(const Plan& running, const Plan& next, std::vector<bool>* taken) {
  std::vector<EventPlan*> kept(next.events.size(), nullptr);
  taken->assign(running.events.size(), false);
  for (size_t i = 0; i < next.events.size(); ++i) {
    for (size_t j = 0; j < running.events.size(); ++j) {
      if (!(*taken)[j] && running.events[j]->SamePerfEvents(*next.events[i])) {
        kept[i] = running.events[j].get();
        (*taken)[j] = true;
        break;
      }
    }
  }
  return kept;
}

// The event self-metrics go on: kept events move with their fds and counts; a new perf event for
// an (event, filter) that existed in the other mode continues from the old one's counts; events
// the previous reload closed fold their final counts into the event that has their name now.
void CarryEventCounts(const Plan& running, const std::vector<EventPlan*>& kept, Plan* next) {
  for (size_t i = 0; i < next->events.size(); ++i) {
    EventPlan* ne = next->events[i].get();
    if (EventPlan* oe = kept[i]) {
      ne->fds = std::move(oe->fds);
      ne->task_fds = std::move(oe->task_fds);
      ne->ids = std::move(oe->ids);
      ne->retired = oe->retired;
      ne->base = oe->base;
      ne->samples.Add(oe->samples.Get());
      ne->unaccounted.Add(oe->unaccounted.Get());
      continue;
    }
    for (auto& oep : running.events) {
      if (oep->event == ne->event && oep->filter == ne->filter && oep->pid == ne->pid && oep->OpenFdCount() > 0) {
        ne->base = oep->ReadCounts();
        ne->samples.Add(oep->samples.Get());
        break;
      }
    }
  }
  for (auto& d : running.draining) FoldIntoGroup(*d, next);
}

// What AdoptCollectors did: the collectors that moved to the next plan, and the counting-mode
// counters among them (their kernel counts are rebound once the old events are disabled).
struct Adoption {
  struct Rebase {
    CounterCollector* counter;
    size_t next_index, running_index;
  };
  std::vector<Rebase> rebased;
  std::vector<Collector*> collectors;
};

// Kept metrics keep their collectors: each running collector whose metric the next plan has
// replaces the fresh one there (and in its events' consumers); a running bpf metric made of
// parts is taken over by the fresh one (its programs and maps go on). Metrics new to the next
// plan count from `swap_ns`, even on kept perf events with samples of the past in their rings.
Adoption AdoptCollectors(Plan* running, Plan* next, uint64_t swap_ns) {
  Adoption a;
  for (Collector* c : next->Collectors()) c->set_active_since_ns(swap_ns);
  for (size_t i = 0; i < next->metrics.size(); ++i) {
    for (size_t j = 0; j < running->metrics.size(); ++j) {
      if (!SameMetric(*running, j, *next, i)) continue;
      Collector* fresh = next->metrics[i].collector.get();
      std::unique_ptr<Collector> adopted = std::move(running->metrics[j].collector);
      a.collectors.push_back(adopted.get());
      if (auto* parts = dynamic_cast<BpfPartsMetric*>(fresh); parts != nullptr && adopted != nullptr) {
        // The running programs and maps go on in the next plan's metric, with the programs
        // AttachNew added; those on events it no longer has are detached (counts kept).
        if (auto* running_parts = dynamic_cast<BpfPartsMetric*>(adopted.get())) {
          adopted.release();
          parts->TakeOver(std::unique_ptr<BpfPartsMetric>(running_parts));
          a.collectors.back() = fresh;
          break;
        }
      }
      for (auto& ep : next->events) {
        for (auto& consumer : ep->consumers) {
          if (consumer.first == fresh) consumer.first = adopted.get();
        }
      }
      if (!next->metrics[i].counting_events.empty()) {
        a.rebased.push_back({static_cast<CounterCollector*>(adopted.get()), i, j});
      }
      next->metrics[i].collector = std::move(adopted);
      break;
    }
  }
  return a;
}

// A counting-mode metric kept on other perf events (a probe's event on a replaced binary that no
// process maps any more is closed) goes on from their final counts, read once they are
// disabled, plus what its remaining and new events count.
void RebaseCountingMetrics(const Plan& running, const std::vector<EventPlan*>& kept,
                           const std::vector<Adoption::Rebase>& rebased, Plan* next) {
  for (const Adoption::Rebase& r : rebased) {
    uint64_t carried = running.metrics[r.running_index].counting_carried;
    for (EventPlan* oep : running.metrics[r.running_index].counting_events) {
      const bool moved = std::any_of(kept.begin(), kept.end(), [&](const EventPlan* k) { return k == oep; });
      if (!moved) carried += oep->ReadKernelCounts().count;
    }
    next->metrics[r.next_index].counting_carried = carried;
    std::vector<EventPlan*> eps = next->metrics[r.next_index].counting_events;
    r.counter->RebindKernelCount([eps, carried] { return KernelCount(eps, carried); });
  }
}

// Sampled events closed here whose samples an adopted metric still needs (an event of a replaced
// binary whose last process just exited may have samples in the rings): their ids keep
// dispatching to those metrics until the next reload (moved to next->draining).
void RetireClosedEvents(Plan* running, const std::vector<bool>& taken, const std::vector<Collector*>& adopted,
                        Plan* next) {
  for (size_t j = 0; j < running->events.size(); ++j) {
    if (taken[j] || !running->events[j]->sampled) continue;
    EventPlan* oep = running->events[j].get();
    std::vector<std::pair<Collector*, size_t>> consumers;
    for (const auto& c : oep->consumers) {
      if (std::find(adopted.begin(), adopted.end(), c.first) != adopted.end()) consumers.push_back(c);
    }
    if (consumers.empty()) continue;
    // Consumers that the next plan's BpfPartsMetric took over are bpf: no samples. A perf
    // collector adopted keeps its address.
    oep->retired = oep->ReadKernelCounts();
    oep->fds.clear();
    oep->task_fds.clear();
    oep->consumers = std::move(consumers);
    next->draining.push_back(std::move(running->events[j]));
  }
}
}  // namespace

Status Pipeline::Reload(std::unique_ptr<Plan> next) {
  const bool was_running = running_.load();
  StopThread();  // the reader is paused between rounds: nothing is dispatched during the swap
  std::unique_ptr<Plan> old;
  Status result = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<bool> taken;
    const std::vector<EventPlan*> kept = PairKeptEvents(*plan_, *next, &taken);
    result = OpenReloadEvents(&next, kept);
    std::vector<Collector*> detached;
    if (result.ok()) detached = DetachDroppedPrograms(*next);
    if (result.ok()) result = AttachNewPrograms(next.get());
    if (!result.ok()) UndoAttach(next.get(), detached);
    if (result.ok()) old = SwapPlans(std::move(next), kept, taken);
  }
  if (was_running) {
    Status st = StartThread();
    if (result.ok()) result = st;
  }
  // `old` (closing the perf events nothing uses any more) or, on error, `next` (closing the
  // new events that were opened) is destroyed here, outside the lock.
  return result;
}

Status Pipeline::OpenReloadEvents(std::unique_ptr<Plan>* next, const std::vector<EventPlan*>& kept) {
  // Rings for a plan that samples for the first time are opened here too (their owners count
  // nothing on their own). OpenEvent reads settings and config_path from plan_: the next plan is
  // plan_ meanwhile.
  std::swap(plan_, *next);
  std::vector<int> cpus;
  for (size_t c = 0; c < cpus_.size(); ++c) {
    if (cpus_[c].open) cpus.push_back(static_cast<int>(c));
  }
  Status result = Status::Ok();
  for (size_t i = 0; i < plan_->events.size() && result.ok(); ++i) {
    if (kept[i] != nullptr) continue;
    EventPlan* ep = plan_->events[i].get();
    if (ep->pid > 0 && !ep->sampled) {  // a perf event per thread, on every CPU
      result = OpenTaskEvents(ep, -1, /*must_exist=*/true);
      continue;
    }
    for (int cpu : cpus) {
      result = OpenEvent(ep, cpu);
      if (!result.ok()) break;
    }
  }
  std::swap(plan_, *next);
  return result;
}

std::vector<Collector*> Pipeline::DetachDroppedPrograms(const Plan& next) {
  std::vector<Collector*> detached;
  for (size_t j = 0; j < plan_->metrics.size(); ++j) {
    Collector* b = plan_->metrics[j].collector.get();
    if (b == nullptr || !b->attached()) continue;
    bool kept_metric = false;
    for (size_t i = 0; i < next.metrics.size(); ++i) kept_metric |= SameMetric(*plan_, j, next, i);
    if (kept_metric) continue;
    b->Detach();
    detached.push_back(b);
  }
  return detached;
}

Status Pipeline::AttachNewPrograms(Plan* next) {
  for (size_t i = 0; i < next->metrics.size(); ++i) {
    Collector* b = next->metrics[i].collector.get();
    if (b == nullptr) continue;
    const Collector* running = nullptr;
    for (size_t j = 0; j < plan_->metrics.size(); ++j) {
      if (SameMetric(*plan_, j, *next, i)) running = plan_->metrics[j].collector.get();
    }
    Status st = Status::Ok();
    if (running == nullptr) {
      st = b->Attach();  // on error `next` is destroyed: its programs detach
    } else if (auto* parts = dynamic_cast<BpfPartsMetric*>(b)) {
      if (auto* running_parts = dynamic_cast<const BpfPartsMetric*>(running)) st = parts->AttachNew(*running_parts);
    }
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

void Pipeline::UndoAttach(Plan* next, const std::vector<Collector*>& detached) {
  for (Collector* c : next->Collectors()) {  // free their tracepoints' program slots first
    if (c != nullptr) c->Detach();
  }
  for (Collector* b : detached) {
    if (Status st = b->Attach(); !st.ok()) {
      TPE_LOG_ERROR("{}: re-attaching after a failed reload failed, it no longer counts: {}", b->name(), st.ToString());
    }
  }
}

std::unique_ptr<Plan> Pipeline::SwapPlans(std::unique_ptr<Plan> next, const std::vector<EventPlan*>& kept,
                                          const std::vector<bool>& taken) {
  CarryEventCounts(*plan_, kept, next.get());
  const Adoption adoption = AdoptCollectors(plan_.get(), next.get(), MonotonicNs());
  // New events start counting; events no metric uses any more stop (closed with the old plan).
  for (size_t i = 0; i < next->events.size(); ++i) {
    if (kept[i] == nullptr) (void)EnableAll(next->events[i].get(), -1);
  }
  for (auto& oep : plan_->events) DisableAll(oep.get());
  RebaseCountingMetrics(*plan_, kept, adoption.rebased, next.get());
  RetireClosedEvents(plan_.get(), taken, adoption.collectors, next.get());
  std::unique_ptr<Plan> old = std::move(plan_);
  plan_ = std::move(next);
  reader_->SetPlan(plan_.get());
  return old;
}

}  // namespace tpe
