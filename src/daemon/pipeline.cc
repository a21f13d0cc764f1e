#include "daemon/pipeline.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <thread>

#include "bpf/program_cost.h"
#include "collectors/counter.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/utf8.h"
#include "perf/perf_event.h"

namespace tpe {
namespace {

constexpr uint64_t kCpuCheckIntervalNs = 1'000'000'000;
// How long CheckCpus waits before re-reading a probe whose time_enabled did not advance.
constexpr int kFrozenRecheckMs = 50;

bool AnySampled(const Plan& plan) {
  return std::any_of(plan.events.begin(), plan.events.end(), [](const auto& e) { return e->sampled; });
}

// The sweeper's cost windows from the plan's settings (0 = off).
CostWindows CostWindowsOf(const Plan& plan) {
  CostWindows c;
  c.period_ns = static_cast<uint64_t>(plan.settings.bpf_cost_period_seconds * 1e9);
  c.window_ns = static_cast<uint64_t>(plan.settings.bpf_cost_window_seconds * 1e9);
  c.enable_stats = bpf::EnableRunTimeStats;
  return c;
}

}  // namespace

Pipeline::Pipeline(const Tracefs* tracefs) : tracefs_(tracefs) {}

Pipeline::~Pipeline() { Stop(); }

Pipeline::CpuState& Pipeline::Cpu(int cpu) {
  while (cpus_.size() <= static_cast<size_t>(cpu)) cpus_.emplace_back();
  return cpus_[static_cast<size_t>(cpu)];
}

size_t Pipeline::ring_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rings_.size();
}

CpuRing* Pipeline::FindRing(int cpu) {
  for (auto& r : rings_) {
    if (r.cpu == cpu) return &r;
  }
  return nullptr;
}

Status Pipeline::OpenEvent(EventPlan* ep, int cpu) {
  TracepointEventOptions o;
  o.tracepoint_id = ep->tracepoint_id;
  o.sampled = ep->sampled;
  o.cgroup = ep->cgroup;
  o.format_lost = plan_->features.perf.format_lost;  // the plan's choice (Linux >= 6.0)
  // Watermark wakeups, as the ring's owner: without it a sampled event asks for a wakeup per
  // sample (wakeup_events = 1), and every sample costs the traced task an irq_work and the
  // reader a wakeup (measured: 46,000 instead of ~1,000,000 getppid() calls/s).
  o.wakeup_watermark_bytes =
      static_cast<uint32_t>(static_cast<uint64_t>(plan_->settings.ring_buffer_pages) * ::sysconf(_SC_PAGESIZE) / 4);
  TPE_ASSIGN_OR_RETURN(ScopedFd fd, OpenPerfEvent(MakeTracepointAttr(o), cpu, ep->pid > 0 ? ep->pid : -1));
  if (!ep->filter.empty()) {
    Status st = SetFilter(fd.get(), ep->filter);
    if (!st.ok()) {
      Status why = tracefs_ ? tracefs_->CheckFilter(ep->event, ep->filter) : st;
      return InvalidArgument(plan_->config_path + ": filter \"" + Abbreviate(ep->filter) + "\" on " + ep->display +
                             ": " + (why.ok() ? st.message() : why.message()));
    }
  }
  if (ep->sampled) {
    TPE_ASSIGN_OR_RETURN(CpuRing * ring, EnsureRing(cpu));
    TPE_RETURN_IF_ERROR(SetOutput(fd.get(), ring->owner.get()));
  }
  TPE_ASSIGN_OR_RETURN(uint64_t id, ReadEventId(fd.get()));
  const size_t slot = static_cast<size_t>(cpu);
  if (ep->fds.size() <= slot) {
    ep->fds.resize(slot + 1);
    ep->ids.resize(slot + 1, 0);
  }
  ep->ids[slot] = id;
  ep->fds[slot] = std::move(fd);
  return Status::Ok();
}

Status Pipeline::MapRing(CpuRing* r) {
  const uint32_t pages = plan_->settings.ring_buffer_pages;
  const uint64_t ring_bytes = static_cast<uint64_t>(pages) * ::sysconf(_SC_PAGESIZE);
  // Task records always: comm labels and series lifetime need them, and they cost one record
  // per fork/exec/exit.
  TPE_ASSIGN_OR_RETURN(r->owner,
                       OpenPerfEvent(MakeRingOwnerAttr(/*track_tasks=*/true, static_cast<uint32_t>(ring_bytes / 4),
                                                       plan_->features.perf.format_lost),
                                     r->cpu));
  TPE_ASSIGN_OR_RETURN(RingBuffer ring, RingBuffer::Map(r->owner.get(), pages));
  r->ring = std::make_unique<RingBuffer>(std::move(ring));
  if (epoll_fd_.valid()) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = r->ring->fd();
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, r->ring->fd(), &ev) != 0)
      return ErrnoStatus(errno, "epoll_ctl ring");
  }
  return Status::Ok();
}

StatusOr<CpuRing*> Pipeline::EnsureRing(int cpu) {
  if (CpuRing* r = FindRing(cpu)) return r;
  CpuRing& r = rings_.emplace_back();  // CpuRing holds atomics: built in place
  r.cpu = cpu;
  Status st = MapRing(&r);
  if (!st.ok()) {
    rings_.pop_back();
    return st;
  }
  return &r;
}

int Pipeline::ProbeFd(int cpu) const {
  for (const auto& r : rings_) {
    if (r.cpu == cpu) return r.owner.get();
  }
  for (const auto& ep : plan_->events) {
    if (static_cast<size_t>(cpu) < ep->fds.size() && ep->fds[cpu].valid()) return ep->fds[cpu].get();
  }
  return -1;
}

Status Pipeline::OpenCpu(int cpu) {
  if (AnySampled(*plan_)) TPE_RETURN_IF_ERROR(EnsureRing(cpu).status());
  for (auto& ep : plan_->events) TPE_RETURN_IF_ERROR(OpenEvent(ep.get(), cpu));
  for (auto& ep : plan_->events) TPE_RETURN_IF_ERROR(EnableEvent(ep->fds[cpu].get()));
  CpuState& st = Cpu(cpu);
  st.open = true;
  st.logged_offline = false;
  const int probe = ProbeFd(cpu);
  auto t = probe >= 0 ? ReadEnabledTime(probe) : StatusOr<uint64_t>(0);
  st.enabled_ns = t.ok() ? *t : 0;
  return Status::Ok();
}

Status Pipeline::Open(std::unique_ptr<Plan> plan) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = std::move(plan);
  reader_ = std::make_unique<Reader>(plan_.get(), &rings_);
  TPE_ASSIGN_OR_RETURN(std::vector<int> cpus, OnlineCpus());
  // Every CPU that can ever come online gets its state now (cpus_ never grows later, so
  // scrapes can walk it while the reader thread reopens CPUs).
  auto possible = PossibleCpus();
  for (int cpu : possible.ok() ? *possible : cpus) (void)Cpu(cpu);
  for (int cpu : cpus) TPE_RETURN_IF_ERROR(OpenCpu(cpu));
  for (auto& c : plan_->collectors) {
    if (c) TPE_RETURN_IF_ERROR(c->Attach());  // the bpf engine's programs; nothing for perf
  }
  reader_->SetPlan(plan_.get());
  size_t nfds = 0;
  for (auto& ep : plan_->events) {
    for (auto& fd : ep->fds) nfds += fd.valid();
  }
  TPE_LOG_INFO("opened {} perf events ({} tracepoints x {} CPUs), {} rings of {} pages", nfds, plan_->events.size(),
               cpus.size(), rings_.size(), plan_->settings.ring_buffer_pages);
  return Status::Ok();
}

Status Pipeline::StartThread() {
  running_ = true;
  thread_ = std::thread([this] { Run(); });
  const double idle_s = plan_->settings.series_idle_timeout_seconds;
  sweeper_.Start(&plan_->collectors, idle_s > 0 ? static_cast<uint64_t>(idle_s * 1e9) : 0, CostWindowsOf(*plan_));
  return Status::Ok();
}

Status Pipeline::Start() {
  epoll_fd_ = ScopedFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) return ErrnoStatus(errno, "epoll_create1");
  stop_fd_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_.valid()) return ErrnoStatus(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = stop_fd_.get();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, stop_fd_.get(), &ev) != 0) return ErrnoStatus(errno, "epoll_ctl");
  auto monitor = CpuHotplugMonitor::Open();
  if (monitor.ok()) {
    hotplug_ = std::move(*monitor);
    ev.data.fd = hotplug_->fd();
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, hotplug_->fd(), &ev) != 0) hotplug_.reset();
  } else {
    TPE_LOG_DEBUG("no CPU hotplug uevents ({}); checking CPUs every second", monitor.status().message());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : rings_) {
      ev.data.fd = r.ring->fd();
      if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, r.ring->fd(), &ev) != 0) {
        return ErrnoStatus(errno, "epoll_ctl ring");
      }
    }
  }
  last_cpu_check_ns_ = MonotonicNs();
  return StartThread();
}

void Pipeline::Run() {
  epoll_event events[64];
  while (running_.load(std::memory_order_relaxed)) {
    // Wake on a ring's watermark, or every 100 ms so that low-rate events are not held back.
    int n = ::epoll_wait(epoll_fd_.get(), events, 64, 100);
    if (n < 0 && errno != EINTR) {
      TPE_LOG_ERROR("epoll_wait: {}", std::strerror(errno));
      break;
    }
    bool check = false;
    for (int i = 0; i < n; ++i) {
      if (hotplug_ && events[i].data.fd == hotplug_->fd()) check |= hotplug_->DrainCpuEvents();
    }
    wakeups_.Add(1);
    reader_->Round(/*flush_all=*/false);
    const uint64_t now = MonotonicNs();
    // Every second; every round (100 ms) while a CPU is away, so that its return is caught
    // within a round even when no uevent arrives.
    if (check || any_cpu_down_ || now - last_cpu_check_ns_ >= kCpuCheckIntervalNs) {
      last_cpu_check_ns_ = now;
      CheckCpus();
    }
  }
}

void Pipeline::CheckCpusNow() {
  if (running_) return;  // the reader thread owns the rings
  if (reader_) reader_->Round(/*flush_all=*/false);
  CheckCpus();
}

void Pipeline::CheckCpus() {
  auto online = OnlineCpus();
  if (!online.ok()) return;
  const uint64_t now = MonotonicNs();
  std::vector<bool> is_online;
  for (int c : *online) {
    if (is_online.size() <= static_cast<size_t>(c)) is_online.resize(c + 1, false);
    is_online[c] = true;
  }
  bool down = false;
  for (size_t i = 0; i < cpus_.size(); ++i) {
    const int cpu = static_cast<int>(i);
    const bool up = i < is_online.size() && is_online[i];
    CpuState& st = Cpu(cpu);
    if (st.open) {
      const int probe = ProbeFd(cpu);
      if (probe < 0) continue;  // nothing opened on it (an empty plan)
      // A live event's time_enabled advances between two reads (each read brings it up to
      // date on its CPU); a dead one's is frozen since its CPU went offline — even if the CPU
      // is back already.
      auto t1 = ReadEnabledTime(probe);
      auto t2 = ReadEnabledTime(probe);
      // Two back-to-back reads of a live event can agree where the perf clock stands still until
      // the next tick (seen on Debian 6.1 under qemu TCG; perf_clock() is local_clock(), which
      // sched_clock_local() clamps below the tick's gtod + TICK_NSEC when sched_clock is
      // unstable). Declaring the CPU dead then closed and reopened its events and lost the hits
      // in between without counting them (issue 14). Look again after several ticks.
      if (up && t1.ok() && t2.ok() && *t2 == *t1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kFrozenRecheckMs));
        t2 = ReadEnabledTime(probe);
      }
      const bool alive = up && t1.ok() && t2.ok() && *t2 != *t1;
      if (alive) {
        st.enabled_ns = *t2;
        continue;
      }
      // Offline, or offline and back already: its perf events are dead either way.
      st.open = false;
      st.dead_since_ns = now;
    }
    if (!up) {
      down |= st.dead_since_ns != 0;
      if (!st.logged_offline && st.dead_since_ns != 0) {
        TPE_LOG_WARN("cpu {} went offline: its perf events stopped; they are reopened when it is back", cpu);
        st.logged_offline = true;
      }
      continue;
    }
    // Online but not (or no longer) traced: reopen. The self-metrics change with the reopen,
    // under the lock, so a scrape never sees the CPU online without its reopen counted.
    Status s;
    double gap = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s = ReopenCpu(cpu);
      reader_->SetPlan(plan_.get());
      if (s.ok()) {
        if (st.dead_since_ns != 0) {
          gap = static_cast<double>(MonotonicNs() - st.dead_since_ns) * 1e-9;
          st.untraced_seconds.store(st.untraced_seconds.load() + gap);
        }
        st.reopens.Add(1);
        st.dead_since_ns = 0;
      }
    }
    if (!s.ok()) {
      TPE_LOG_ERROR("cpu {} is online but its perf events cannot be reopened: {}", cpu, s.message());
    } else if (gap >= 0) {
      TPE_LOG_WARN("cpu {} is online again: reopened its ring and perf events ({:.3f} s after it was found offline)",
                   cpu, gap);
    } else {
      TPE_LOG_INFO("cpu {} came online: opened its ring and perf events", cpu);
    }
  }
  any_cpu_down_ = down;
}

Status Pipeline::ReopenCpu(int cpu) {
  const size_t slot = static_cast<size_t>(cpu);
  for (auto& ep : plan_->events) {
    if (slot >= ep->fds.size() || !ep->fds[slot].valid()) continue;
    auto c = ReadEventCount(ep->fds[slot].get());
    if (c.ok()) {
      ep->retired.count += c->count;
      ep->retired.lost += c->lost;
    }
    ep->fds[slot].Reset();
    ep->ids[slot] = 0;
  }
  for (auto it = rings_.begin(); it != rings_.end(); ++it) {
    if (it->cpu != cpu) continue;
    // The reader's last round copied every record it did not dispatch out of the ring; whatever
    // the CPU wrote after that, before it went offline, is read now.
    reader_->Round(/*flush_all=*/false);
    if (epoll_fd_.valid()) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, it->ring->fd(), nullptr);
    it->ring.reset();
    it->owner.Reset();
    break;
  }
  // Keep the CpuRing (its held records and counters); give it a new owner and mapping.
  for (auto& r : rings_) {
    if (r.cpu == cpu && !r.ring) TPE_RETURN_IF_ERROR(MapRing(&r));
  }
  return OpenCpu(cpu);
}

void Pipeline::StopThread() {
  sweeper_.Stop();
  if (running_.exchange(false)) {
    uint64_t one = 1;
    (void)!::write(stop_fd_.get(), &one, sizeof(one));
    thread_.join();
    uint64_t drain = 0;
    (void)!::read(stop_fd_.get(), &drain, sizeof(drain));
  }
}

namespace {
// Whether metric `j` of the running plan and metric `i` of the next one are the same metric, so
// that the next plan adopts the running collector (and its bpf programs or perf consumers): the
// same identity *and* the same engine. A metric that fell back to perf (e.g. its map creation
// failed with ENOMEM) and is planned on bpf at a reload (or the reverse) is a new collector that
// is attached or fed by the next plan's events; adopting the old one would leave it with neither
// a program nor a perf event (issue 17 item 1). Its series restart (a counter reset).
bool SameMetric(const Plan& running, size_t j, const Plan& next, size_t i) {
  return running.collectors[j] && running.identities[j] == next.identities[i] && running.engines[j] == next.engines[i];
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
      for (int cpu : cpus) {
        result = OpenEvent(plan_->events[i].get(), cpu);
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
      for (size_t j = 0; j < plan_->collectors.size(); ++j) {
        Collector* b = plan_->collectors[j].get();
        if (b == nullptr || !b->attached()) continue;
        bool kept_metric = false;
        for (size_t i = 0; i < next->collectors.size(); ++i) kept_metric |= SameMetric(*plan_, j, *next, i);
        if (kept_metric) continue;
        b->Detach();
        detached.push_back(b);
      }
    }
    // 2b. Attach the programs of new bpf metrics (kept ones stay attached, with their maps).
    for (size_t i = 0; i < next->collectors.size() && result.ok(); ++i) {
      Collector* b = next->collectors[i].get();
      if (b == nullptr) continue;
      bool kept_metric = false;
      for (size_t j = 0; j < plan_->collectors.size(); ++j) kept_metric |= SameMetric(*plan_, j, *next, i);
      if (!kept_metric) result = b->Attach();  // on error `next` is destroyed: its programs detach
    }
    if (!result.ok()) {
      for (auto& c : next->collectors) {  // free their tracepoints' program slots first
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
          if (oep->event == ne->event && oep->filter == ne->filter && oep->pid == ne->pid && !oep->fds.empty()) {
            ne->base = oep->ReadCounts();
            ne->samples.Add(oep->samples.Get());
            break;
          }
        }
      }
      // Metrics this reload adds count from now on, even on kept perf events with samples of
      // the past still in their rings.
      const uint64_t swap_ns = MonotonicNs();
      std::vector<std::pair<CounterCollector*, EventPlan*>> rebased;
      for (auto& c : next->collectors) c->set_active_since_ns(swap_ns);
      for (size_t i = 0; i < next->collectors.size(); ++i) {
        for (size_t j = 0; j < plan_->collectors.size(); ++j) {
          if (!SameMetric(*plan_, j, *next, i)) continue;
          Collector* fresh = next->collectors[i].get();
          std::unique_ptr<Collector> adopted = std::move(plan_->collectors[j]);
          for (auto& ep : next->events) {
            for (auto& consumer : ep->consumers) {
              if (consumer.first == fresh) consumer.first = adopted.get();
            }
          }
          if (EventPlan* ep = next->counting_events[i]) {
            auto* counter = static_cast<CounterCollector*>(adopted.get());
            const bool same_events = std::any_of(next->events.begin(), next->events.end(), [&](const auto& e) {
              return e.get() == ep && kept[static_cast<size_t>(&e - next->events.data())] != nullptr;
            });
            if (same_events) {
              counter->RebindKernelCount([ep] { return ep->ReadKernelCounts().count; });
            } else {
              // The same metric on other perf events (a probe event redefined because its binary
              // was replaced): it goes on from the old events' final count, read once they are
              // disabled below.
              rebased.push_back({counter, ep});
            }
          }
          next->collectors[i] = std::move(adopted);
          break;
        }
      }
      // New events start counting; events no metric uses any more stop (closed with `old`).
      for (size_t i = 0; i < next->events.size(); ++i) {
        if (kept[i] != nullptr) continue;
        for (auto& fd : next->events[i]->fds) {
          if (fd.valid()) (void)EnableEvent(fd.get());
        }
      }
      for (auto& oep : plan_->events) {
        for (auto& fd : oep->fds) {
          if (fd.valid()) (void)DisableEvent(fd.get());
        }
      }
      for (const auto& rebase : rebased) {
        EventPlan* ep = rebase.second;  // a plain variable: clang 14 cannot capture a structured binding
        const uint64_t carried = rebase.first->KernelCount();  // the old events', now final
        rebase.first->RebindKernelCount([ep, carried] { return carried + ep->ReadKernelCounts().count; });
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

void Pipeline::Stop() {
  // Once only: the destructor calls Stop too.
  if (stopped_ || !plan_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : plan_->collectors) {
      if (c) c->Detach();  // bpf: counts freeze; maps stay readable
    }
    for (auto& ep : plan_->events) {
      for (auto& fd : ep->fds) {
        if (fd.valid()) (void)DisableEvent(fd.get());
      }
    }
  }
  StopThread();
  if (reader_) {
    reader_->Round(/*flush_all=*/true);
    reader_->Round(/*flush_all=*/true);
  }
}

}  // namespace tpe
