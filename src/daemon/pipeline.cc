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
#include "perf/perf_event.h"

namespace tpe {
namespace {

constexpr uint64_t kCpuCheckIntervalNs = 1'000'000'000;
constexpr uint64_t kCpuDownRoundNs = 100'000'000;
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

int Pipeline::ProbeFd(int cpu) const {
  for (const auto& r : rings_) {
    if (r.cpu == cpu) return r.owner.get();
  }
  for (const auto& ep : plan_->events) {
    if (static_cast<size_t>(cpu) < ep->fds.size() && ep->fds[cpu].valid()) return ep->fds[cpu].get();
  }
  return -1;
}

Status Pipeline::OpenCpu(int cpu, bool reopen) {
  if (AnySampled(*plan_)) TPE_RETURN_IF_ERROR(EnsureRing(cpu).status());
  for (auto& ep : plan_->events) {
    // A process that exited since its events were first opened has nothing left to trace.
    if (reopen && ep->pid > 0) {
      if (ep->sampled) TPE_RETURN_IF_ERROR(OpenTaskEvents(ep.get(), cpu, /*must_exist=*/false));
      continue;
    }
    TPE_RETURN_IF_ERROR(OpenEvent(ep.get(), cpu));
  }
  for (auto& ep : plan_->events) TPE_RETURN_IF_ERROR(EnableAll(ep.get(), cpu));
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
  reader_ = std::make_unique<Reader>(plan_.get(), &rings_, &process_images_, &cfi_tables_);
  TPE_ASSIGN_OR_RETURN(std::vector<int> cpus, OnlineCpus());
  // Every CPU that can ever come online gets its state now (cpus_ never grows later, so
  // scrapes can walk it while the reader thread reopens CPUs).
  auto possible = PossibleCpus();
  for (int cpu : possible.ok() ? *possible : cpus) (void)Cpu(cpu);
  for (int cpu : cpus) TPE_RETURN_IF_ERROR(OpenCpu(cpu, /*reopen=*/false));
  // "pid" label-less counters: a perf event per thread, on every CPU.
  for (auto& ep : plan_->events) {
    if (ep->pid <= 0 || ep->sampled) continue;
    TPE_RETURN_IF_ERROR(OpenTaskEvents(ep.get(), -1, /*must_exist=*/true));
    TPE_RETURN_IF_ERROR(EnableAll(ep.get(), -1));
  }
  for (Collector* c : plan_->Collectors()) {
    if (c) TPE_RETURN_IF_ERROR(c->Attach());  // the bpf engine's programs; nothing for perf
  }
  reader_->SetPlan(plan_.get());
  size_t nfds = 0, task_fds = 0;
  for (auto& ep : plan_->events) {
    nfds += ep->OpenFdCount();
    if (ep->pid > 0) task_fds += ep->OpenFdCount();
  }
  const size_t tracepoints = static_cast<size_t>(
      std::count_if(plan_->events.begin(), plan_->events.end(), [](const auto& ep) { return !ep->mmap_tracker; }));
  TPE_LOG_INFO("opened {} perf events ({} tracepoints x {} CPUs{}), {} rings of {} pages", nfds, tracepoints,
               cpus.size(),
               task_fds > 0 ? ", " + std::to_string(task_fds) + " of them per thread of \"pid\" processes" : "",
               rings_.size(), plan_->settings.ring_buffer_pages);
  LogPidEvents();
  return Status::Ok();
}

Status Pipeline::StartThread() {
  running_ = true;
  thread_ = std::thread([this] { Run(); });
  const double idle_s = plan_->settings.series_idle_timeout_seconds;
  sweeper_.Start(plan_->Collectors(), idle_s > 0 ? static_cast<uint64_t>(idle_s * 1e9) : 0, CostWindowsOf(*plan_));
  return Status::Ok();
}

Status Pipeline::Start() {
  epoll_fd_ = ScopedFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) return ErrnoStatus(errno, "epoll_create1");
  wake_fd_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return ErrnoStatus(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_.get();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) return ErrnoStatus(errno, "epoll_ctl");
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

// A round's timeout: the reader's idle time (100 ms while a metric counts ring samples, else
// 1 s), 100 ms while a CPU is away (its return is caught within a round even without a uevent),
// and no later than the first pending mark can run (a quiet slack after its time; at least 1 ms).
int Pipeline::RoundTimeoutMs(uint64_t now_ns) const {
  uint64_t wait_ns = reader_->idle_ns();
  if (any_cpu_down_) wait_ns = std::min<uint64_t>(wait_ns, kCpuDownRoundNs);
  if (const uint64_t mark = reader_->next_mark_ns(); mark != ~0ull) {
    const uint64_t ready = mark + kQuietSlackNs;
    wait_ns = std::min(wait_ns, std::max<uint64_t>(ready > now_ns ? ready - now_ns : 0, 1'000'000));
  }
  return static_cast<int>((wait_ns + 999'999) / 1'000'000);
}

void Pipeline::Run() {
  epoll_event events[64];
  while (running_.load(std::memory_order_relaxed)) {
    // Wake on a ring's watermark, a mark, or the timeout (RoundTimeoutMs) so that low-rate
    // events are not held back.
    int n = ::epoll_wait(epoll_fd_.get(), events, 64, RoundTimeoutMs(MonotonicNs()));
    if (n < 0 && errno != EINTR) {
      TPE_LOG_ERROR("epoll_wait: {}", std::strerror(errno));
      break;
    }
    bool check = false;
    for (int i = 0; i < n; ++i) {
      if (hotplug_ && events[i].data.fd == hotplug_->fd()) check |= hotplug_->DrainCpuEvents();
      if (events[i].data.fd == wake_fd_.get()) {
        uint64_t drain = 0;
        (void)!::read(wake_fd_.get(), &drain, sizeof(drain));
      }
    }
    wakeups_.Add(1);
    reader_->Round(/*flush_all=*/false);
    const uint64_t now = MonotonicNs();
    // Every second; every round while a CPU is away.
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
      // in between without counting them. Look again after several ticks.
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
  auto retire = [](EventPlan* ep, ScopedFd* fd) {
    auto c = ReadEventCount(fd->get());
    if (c.ok()) {
      ep->retired.count += c->count;
      ep->retired.lost += c->lost;
    }
    fd->Reset();
  };
  for (auto& ep : plan_->events) {
    if (ep->pid > 0 && ep->sampled && slot < ep->task_fds.size()) {
      // Per-thread events on this CPU write into its ring, which is replaced: reopened with it.
      for (auto& t : ep->task_fds[slot]) retire(ep.get(), &t.fd);
      ep->task_fds[slot].clear();
      ep->CollectIds();
    }
    if (slot >= ep->fds.size() || !ep->fds[slot].valid()) continue;
    retire(ep.get(), &ep->fds[slot]);
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
  return OpenCpu(cpu, /*reopen=*/true);
}

void Pipeline::StopThread() {
  sweeper_.Stop();
  if (running_.exchange(false)) {
    uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof(one));
    thread_.join();
    uint64_t drain = 0;
    (void)!::read(wake_fd_.get(), &drain, sizeof(drain));
  }
}

void Pipeline::LogPidEvents() const {
  for (const auto& ep : plan_->events) {
    if (ep->pid <= 0) continue;
    size_t threads = 0;
    for (const auto& slot : ep->task_fds) threads = std::max(threads, slot.size());
    TPE_LOG_INFO("{}: {} threads, {} perf events ({}; threads created later inherit them)", ep->display, threads,
                 ep->OpenFdCount(), ep->sampled ? "one per thread and CPU" : "one per thread");
  }
}

void Pipeline::Stop() {
  // Once only: the destructor calls Stop too.
  if (stopped_ || !plan_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Collector* c : plan_->Collectors()) {
      if (c) c->Detach();  // bpf: counts freeze; maps stay readable
    }
    for (auto& ep : plan_->events) DisableAll(ep.get());
  }
  StopThread();
  {
    // From here AddMark runs its callable at once: no round would run it. Under mu_, so that a
    // mark queued before is run by the rounds below.
    std::lock_guard<std::mutex> lock(mu_);
    flushed_ = true;
  }
  if (reader_) {
    reader_->Round(/*flush_all=*/true);
    reader_->Round(/*flush_all=*/true);
  }
}

}  // namespace tpe
