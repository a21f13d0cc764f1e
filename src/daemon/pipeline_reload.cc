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
}  // namespace

Status Pipeline::Reload(std::unique_ptr<Plan> next) {
  const bool was_running = running_.load();
  StopThread();  // the reader is paused between rounds: nothing is dispatched during the swap
  std::unique_ptr<Plan> old;
  Status result = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    // 1. Pair each new event with the old one that has the same perf events.
    std::vector<EventPlan*> kept(next->events.size(), nullptr);
    std::vector<bool> taken(plan_->events.size(), false);
    for (size_t i = 0; i < next->events.size(); ++i) {
      for (size_t j = 0; j < plan_->events.size(); ++j) {
        if (!taken[j] && plan_->events[j]->SamePerfEvents(*next->events[i])) {
          kept[i] = plan_->events[j].get();
          taken[j] = true;
          break;
        }
      }
    }
    // 2. Open (disabled) every new event on every traced CPU. Rings for a plan that samples for
    //    the first time are opened here too (their owners count nothing on their own).
    std::swap(plan_, next);  // OpenEvent reads settings/config_path from plan_
    std::vector<int> cpus;
    for (size_t c = 0; c < cpus_.size(); ++c) {
      if (cpus_[c].open) cpus.push_back(static_cast<int>(c));
    }
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
    std::swap(plan_, next);
    // 2a. Detach the programs of running bpf metrics that the next plan drops or replaces, so
    //     that old and new programs are never attached at once: the kernel caps the programs of
    //     one tracepoint (BPF_TRACE_MAX_PROGS, 64; E2BIG), and a reload renaming 40 metrics
    //     would need 80. Their counts freeze here (they leave the page at the swap); re-attached
    //     if the reload fails.
    std::vector<Collector*> detached;
    if (result.ok()) {
      for (size_t j = 0; j < plan_->metrics.size(); ++j) {
        Collector* b = plan_->metrics[j].collector.get();
        if (b == nullptr || !b->attached()) continue;
        bool kept_metric = false;
        for (size_t i = 0; i < next->metrics.size(); ++i) kept_metric |= SameMetric(*plan_, j, *next, i);
        if (kept_metric) continue;
        b->Detach();
        detached.push_back(b);
      }
    }
    // 2b. Attach the programs of new bpf metrics (kept ones stay attached, with their maps). A
    //     kept metric on probe events gets programs on the events it did not have (a binary
    //     replaced since), beside its running ones.
    for (size_t i = 0; i < next->metrics.size() && result.ok(); ++i) {
      Collector* b = next->metrics[i].collector.get();
      if (b == nullptr) continue;
      const Collector* running = nullptr;
      for (size_t j = 0; j < plan_->metrics.size(); ++j) {
        if (SameMetric(*plan_, j, *next, i)) running = plan_->metrics[j].collector.get();
      }
      if (running == nullptr) {
        result = b->Attach();  // on error `next` is destroyed: its programs detach
      } else if (auto* parts = dynamic_cast<BpfPartsMetric*>(b)) {
        if (auto* running_parts = dynamic_cast<const BpfPartsMetric*>(running))
          result = parts->AttachNew(*running_parts);
      }
    }
    if (!result.ok()) {
      for (Collector* c : next->Collectors()) {  // free their tracepoints' program slots first
        if (c != nullptr) c->Detach();
      }
      for (Collector* b : detached) {
        if (Status st = b->Attach(); !st.ok()) {
          TPE_LOG_ERROR("{}: re-attaching after a failed reload failed, it no longer counts: {}", b->name(),
                        st.ToString());
        }
      }
    }
    if (result.ok()) {
      // 3. The swap: kept events move with their fds; kept metrics with their collectors.
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
        // A new perf event for an (event, filter) that existed in the other mode: its
        // self-metrics continue from the old one's.
        for (auto& oep : plan_->events) {
          if (oep->event == ne->event && oep->filter == ne->filter && oep->pid == ne->pid && oep->OpenFdCount() > 0) {
            ne->base = oep->ReadCounts();
            ne->samples.Add(oep->samples.Get());
            break;
          }
        }
      }
      // Events the previous reload closed: their samples were dispatched long ago; their final
      // counts go on in the self-metrics of the event that has their name now.
      for (auto& d : plan_->draining) FoldIntoGroup(*d, next.get());
      // Metrics this reload adds count from now on, even on kept perf events with samples of
      // the past still in their rings.
      const uint64_t swap_ns = MonotonicNs();
      struct Rebase {
        CounterCollector* counter;
        size_t next_index, running_index;
      };
      std::vector<Rebase> rebased;
      std::vector<Collector*> adopted_collectors;
      for (Collector* c : next->Collectors()) c->set_active_since_ns(swap_ns);
      for (size_t i = 0; i < next->metrics.size(); ++i) {
        for (size_t j = 0; j < plan_->metrics.size(); ++j) {
          if (!SameMetric(*plan_, j, *next, i)) continue;
          Collector* fresh = next->metrics[i].collector.get();
          std::unique_ptr<Collector> adopted = std::move(plan_->metrics[j].collector);
          adopted_collectors.push_back(adopted.get());
          if (auto* parts = dynamic_cast<BpfPartsMetric*>(fresh); parts != nullptr && adopted != nullptr) {
            // The running programs and maps go on in the next plan's metric, with the programs
            // AttachNew added; those on events it no longer has are detached (counts kept).
            if (auto* running_parts = dynamic_cast<BpfPartsMetric*>(adopted.get())) {
              adopted.release();
              parts->TakeOver(std::unique_ptr<BpfPartsMetric>(running_parts));
              adopted_collectors.back() = fresh;
              break;
            }
          }
          for (auto& ep : next->events) {
            for (auto& consumer : ep->consumers) {
              if (consumer.first == fresh) consumer.first = adopted.get();
            }
          }
          if (!next->metrics[i].counting_events.empty()) {
            rebased.push_back({static_cast<CounterCollector*>(adopted.get()), i, j});
          }
          next->metrics[i].collector = std::move(adopted);
          break;
        }
      }
      // New events start counting; events no metric uses any more stop (closed with `old`).
      for (size_t i = 0; i < next->events.size(); ++i) {
        if (kept[i] == nullptr) (void)EnableAll(next->events[i].get(), -1);
      }
      for (auto& oep : plan_->events) DisableAll(oep.get());
      // A counting-mode metric kept on other perf events (a probe's event on a replaced binary
      // that no process maps any more is closed): it goes on from their final counts, read now
      // that they are disabled, plus what its remaining and new events count.
      for (const Rebase& r : rebased) {
        uint64_t carried = plan_->metrics[r.running_index].counting_carried;
        for (EventPlan* oep : plan_->metrics[r.running_index].counting_events) {
          const bool moved = std::any_of(kept.begin(), kept.end(), [&](const EventPlan* k) { return k == oep; });
          if (!moved) carried += oep->ReadKernelCounts().count;
        }
        next->metrics[r.next_index].counting_carried = carried;
        std::vector<EventPlan*> eps = next->metrics[r.next_index].counting_events;
        r.counter->RebindKernelCount([eps, carried] { return KernelCount(eps, carried); });
      }
      // Sampled events closed here whose samples a kept metric still needs (an event of a
      // replaced binary whose last process just exited may have samples in the rings): their ids
      // keep dispatching to those metrics until the next reload.
      for (size_t j = 0; j < plan_->events.size(); ++j) {
        if (taken[j] || !plan_->events[j]->sampled) continue;
        EventPlan* oep = plan_->events[j].get();
        std::vector<std::pair<Collector*, size_t>> consumers;
        for (const auto& c : oep->consumers) {
          if (std::find(adopted_collectors.begin(), adopted_collectors.end(), c.first) != adopted_collectors.end()) {
            consumers.push_back(c);
          }
        }
        if (consumers.empty()) continue;
        // Consumers that the next plan's BpfPartsMetric took over are bpf: no samples. A perf
        // collector adopted keeps its address.
        oep->retired = oep->ReadKernelCounts();
        oep->fds.clear();
        oep->task_fds.clear();
        oep->consumers = std::move(consumers);
        next->draining.push_back(std::move(plan_->events[j]));
      }
      old = std::move(plan_);
      plan_ = std::move(next);
      reader_->SetPlan(plan_.get());
    }
  }
  if (was_running) {
    Status st = StartThread();
    if (result.ok()) result = st;
  }
  // `old` (closing the perf events nothing uses any more) or, on error, `next` (closing the
  // new events that were opened) is destroyed here, outside the lock.
  return result;
}

}  // namespace tpe
