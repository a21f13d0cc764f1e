#include "daemon/pipeline.h"

#include <dirent.h>
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

StatusOr<ScopedFd> Pipeline::OpenFd(EventPlan* ep, int cpu, int tid, uint64_t* id) {
  TracepointEventOptions o;
  o.tracepoint_id = ep->tracepoint_id;
  o.sampled = ep->sampled;
  o.cgroup = ep->cgroup;
  o.format_lost = plan_->features.perf.format_lost;  // the plan's choice (Linux >= 6.0)
  // A thread's event: copied into the threads it creates later (and, before Linux 5.13, into
  // the child processes it forks).
  o.inherit = tid > 0;
  o.inherit_thread = plan_->features.perf.inherit_thread;
  // Watermark wakeups, as the ring's owner: without it a sampled event asks for a wakeup per
  // sample (wakeup_events = 1), and every sample costs the traced task an irq_work and the
  // reader a wakeup (measured: 46,000 instead of ~1,000,000 getppid() calls/s).
  o.wakeup_watermark_bytes =
      static_cast<uint32_t>(static_cast<uint64_t>(plan_->settings.ring_buffer_pages) * ::sysconf(_SC_PAGESIZE) / 4);
  TPE_ASSIGN_OR_RETURN(ScopedFd fd, OpenPerfEvent(MakeTracepointAttr(o), cpu, tid > 0 ? tid : -1));
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
  TPE_ASSIGN_OR_RETURN(*id, ReadEventId(fd.get()));
  return fd;
}

Status Pipeline::OpenEvent(EventPlan* ep, int cpu) {
  if (ep->pid > 0) return ep->sampled ? OpenTaskEvents(ep, cpu, /*must_exist=*/true) : Status::Ok();
  uint64_t id = 0;
  TPE_ASSIGN_OR_RETURN(ScopedFd fd, OpenFd(ep, cpu, -1, &id));
  const size_t slot = static_cast<size_t>(cpu);
  if (ep->fds.size() <= slot) ep->fds.resize(slot + 1);
  ep->fds[slot] = std::move(fd);
  ep->CollectIds();
  ep->ids[slot] = id;
  return Status::Ok();
}

namespace {

// The thread ids of process `pid` (/proc/PID/task, proc(5)), sorted. NotFound when there is no
// such process (any more).
StatusOr<std::vector<int>> ProcessThreads(int pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, dir);
  std::vector<int> tids;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') tids.push_back(std::atoi(e->d_name));
  }
  ::closedir(d);
  std::sort(tids.begin(), tids.end());
  return tids;
}

// How many times OpenTaskEvents lists a process's threads and opens their events before it gives
// up on a process that keeps creating threads meanwhile.
constexpr int kTaskSettleAttempts = 20;

}  // namespace

Status Pipeline::VanishedProcess(const EventPlan& ep) const {
  return NotFound(plan_->config_path + ": " + ep.pid_json_path + ".pid: process " + std::to_string(ep.pid) +
                  " does not exist (it exited?), so " + ep.display +
                  " cannot be traced in it; set \"pid\" to a running process (or remove it to trace every process) "
                  "and reload");
}

// A perf event with a pid follows one thread: the threads of the process are listed and each
// gets an event with attr.inherit, which the kernel copies into the threads it creates from then
// on. A thread created while the events are being opened may or may not have inherited one
// (depending on whether its creator's event was open yet), and cannot be told apart: so the
// threads are listed again after opening, and when a new one appeared every event just opened
// is closed (their copies go with them) and the whole is done again. A thread that is listed
// existed before any event was opened, so it inherited none, and a thread created after the
// second listing inherits from its creator, which was listed: every thread counts exactly once.
// A thread that exits meanwhile (ESRCH) is skipped.
Status Pipeline::OpenTaskEvents(EventPlan* ep, int cpu, bool must_exist) {
  const size_t slot = cpu < 0 ? 0 : static_cast<size_t>(cpu);
  if (ep->task_fds.size() <= slot) ep->task_fds.resize(slot + 1);
  ep->task_fds[slot].clear();
  size_t cpus = 1;
  if (ep->sampled) {
    auto online = OnlineCpus();
    cpus = online.ok() ? online->size() : 1;
  }
  for (int attempt = 0; attempt < kTaskSettleAttempts; ++attempt) {
    auto tids = ProcessThreads(ep->pid);
    if (!tids.ok() || tids->empty()) {
      if (!must_exist) return Status::Ok();  // gone: nothing to count in it any more
      return VanishedProcess(*ep);
    }
    // The limit counts every CPU's events: the other CPUs hold about as many as this one.
    if (tids->size() * cpus > plan_->settings.max_pid_perf_events) {
      return Unavailable(
          plan_->config_path + ": " + ep->pid_json_path + ".pid: process " + std::to_string(ep->pid) + " has " +
          std::to_string(tids->size()) + " threads: " + ep->display + " needs a perf event per " +
          (ep->sampled ? "thread and CPU (" + std::to_string(tids->size()) + " x " + std::to_string(cpus) + " = " +
                             std::to_string(tids->size() * cpus) + ")"
                       : "thread (" + std::to_string(tids->size()) + ")") +
          ", more than settings.max_pid_perf_events (" + std::to_string(plan_->settings.max_pid_perf_events) +
          "); raise it (each is a file descriptor: LimitNOFILE), or leave out \"pid\" (every process, "
          "a perf event per CPU)" +
          (ep->sampled ? ", or make the metric a label-less counter (one perf event per thread)" : ""));
    }
    std::vector<EventPlan::TaskFd> opened;
    for (int tid : *tids) {
      EventPlan::TaskFd t;
      t.tid = tid;
      auto fd = OpenFd(ep, cpu, tid, &t.id);
      if (!fd.ok()) {
        if (fd.status().code() == StatusCode::kNotFound) continue;  // the thread exited
        return fd.status().WithContext(plan_->config_path + ": " + ep->pid_json_path + ".pid " +
                                       std::to_string(ep->pid));
      }
      t.fd = std::move(*fd);
      opened.push_back(std::move(t));
    }
    auto again = ProcessThreads(ep->pid);
    const bool settled = !again.ok() || std::includes(tids->begin(), tids->end(), again->begin(), again->end());
    if (!settled) continue;  // `opened` closes: the copies new threads may have inherited go too
    if (opened.empty() && must_exist) return VanishedProcess(*ep);
    ep->task_fds[slot] = std::move(opened);
    ep->CollectIds();
    return Status::Ok();
  }
  return Unavailable(plan_->config_path + ": " + ep->pid_json_path + ".pid: process " + std::to_string(ep->pid) +
                     " created threads while its perf events were being opened, " +
                     std::to_string(kTaskSettleAttempts) +
                     " times in a row (a thread created meanwhile cannot be told to have inherited an event or not); "
                     "reload again when it creates threads less often");
}

Status Pipeline::EnableAll(EventPlan* ep, int cpu) {
  auto enable = [](const ScopedFd& fd) { return fd.valid() ? EnableEvent(fd.get()) : Status::Ok(); };
  if (cpu < 0) {
    for (const auto& fd : ep->fds) TPE_RETURN_IF_ERROR(enable(fd));
    for (const auto& slot : ep->task_fds) {
      for (const auto& t : slot) TPE_RETURN_IF_ERROR(enable(t.fd));
    }
    return Status::Ok();
  }
  const size_t c = static_cast<size_t>(cpu);
  if (c < ep->fds.size()) TPE_RETURN_IF_ERROR(enable(ep->fds[c]));
  if (ep->pid > 0 && ep->sampled && c < ep->task_fds.size()) {
    for (const auto& t : ep->task_fds[c]) TPE_RETURN_IF_ERROR(enable(t.fd));
  }
  return Status::Ok();
}

void Pipeline::DisableAll(EventPlan* ep) {
  for (auto& fd : ep->fds) {
    if (fd.valid()) (void)DisableEvent(fd.get());
  }
  for (auto& slot : ep->task_fds) {
    for (auto& t : slot) {
      if (t.fd.valid()) (void)DisableEvent(t.fd.get());
    }
  }
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
  reader_ = std::make_unique<Reader>(plan_.get(), &rings_);
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
  for (auto& c : plan_->collectors) {
    if (c) TPE_RETURN_IF_ERROR(c->Attach());  // the bpf engine's programs; nothing for perf
  }
  reader_->SetPlan(plan_.get());
  size_t nfds = 0, task_fds = 0;
  for (auto& ep : plan_->events) {
    nfds += ep->OpenFdCount();
    if (ep->pid > 0) task_fds += ep->OpenFdCount();
  }
  TPE_LOG_INFO("opened {} perf events ({} tracepoints x {} CPUs{}), {} rings of {} pages", nfds, plan_->events.size(),
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
    (void)!::write(stop_fd_.get(), &one, sizeof(one));
    thread_.join();
    uint64_t drain = 0;
    (void)!::read(stop_fd_.get(), &drain, sizeof(drain));
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
    // 2b. Attach the programs of new bpf metrics (kept ones stay attached, with their maps). A
    //     kept metric on probe events gets programs on the events it did not have (a binary
    //     replaced since), beside its running ones.
    for (size_t i = 0; i < next->collectors.size() && result.ok(); ++i) {
      Collector* b = next->collectors[i].get();
      if (b == nullptr) continue;
      const Collector* running = nullptr;
      for (size_t j = 0; j < plan_->collectors.size(); ++j) {
        if (SameMetric(*plan_, j, *next, i)) running = plan_->collectors[j].get();
      }
      if (running == nullptr) {
        result = b->Attach();  // on error `next` is destroyed: its programs detach
      } else if (auto* parts = dynamic_cast<BpfPartsMetric*>(b)) {
        if (auto* running_parts = dynamic_cast<const BpfPartsMetric*>(running))
          result = parts->AttachNew(*running_parts);
      }
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
      for (auto& c : next->collectors) c->set_active_since_ns(swap_ns);
      for (size_t i = 0; i < next->collectors.size(); ++i) {
        for (size_t j = 0; j < plan_->collectors.size(); ++j) {
          if (!SameMetric(*plan_, j, *next, i)) continue;
          Collector* fresh = next->collectors[i].get();
          std::unique_ptr<Collector> adopted = std::move(plan_->collectors[j]);
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
          if (!next->counting_events[i].empty()) {
            rebased.push_back({static_cast<CounterCollector*>(adopted.get()), i, j});
          }
          next->collectors[i] = std::move(adopted);
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
        uint64_t carried = plan_->counting_carried[r.running_index];
        for (EventPlan* oep : plan_->counting_events[r.running_index]) {
          const bool moved = std::any_of(kept.begin(), kept.end(), [&](const EventPlan* k) { return k == oep; });
          if (!moved) carried += oep->ReadKernelCounts().count;
        }
        next->counting_carried[r.next_index] = carried;
        std::vector<EventPlan*> eps = next->counting_events[r.next_index];
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

void Pipeline::Stop() {
  // Once only: the destructor calls Stop too.
  if (stopped_ || !plan_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : plan_->collectors) {
      if (c) c->Detach();  // bpf: counts freeze; maps stay readable
    }
    for (auto& ep : plan_->events) DisableAll(ep.get());
  }
  StopThread();
  if (reader_) {
    reader_->Round(/*flush_all=*/true);
    reader_->Round(/*flush_all=*/true);
  }
}

}  // namespace tpe
