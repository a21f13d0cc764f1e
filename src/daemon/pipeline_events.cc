// Pipeline (pipeline.h): opening the perf events of a plan — per CPU, per thread of a "pid"
// process — enabling and disabling them, and the CPU rings they write to.
#include <dirent.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "bpf/bpf_profile.h"
#include "common/log.h"
#include "common/utf8.h"
#include "daemon/pipeline.h"
#include "perf/perf_event.h"

namespace tpe {

StatusOr<ScopedFd> Pipeline::OpenFd(EventPlan* ep, int cpu, int tid, uint64_t* id) {
  TracepointEventOptions o;
  o.tracepoint_id = ep->tracepoint_id;
  o.sampled = ep->sampled;
  o.cgroup = ep->cgroup;
  o.callchain_kernel = (ep->callchain & EventPlan::kCallchainKernel) != 0;
  o.callchain_user = (ep->callchain & EventPlan::kCallchainUser) != 0;
  o.stack_user_bytes = ep->stack_user_bytes;
  // User frames are named through the process's mappings: learnt from PERF_RECORD_MMAP2 as they
  // are made, in time order with the samples (Reader → ProcessImages).
  o.track_mmap = ep->learns_mappings();
  o.dummy = ep->mmap_tracker;
  if (ep->max_stack != 0) o.max_stack = ep->max_stack;
  o.software_clock = ep->software_clock;
  o.frequency_hz = ep->frequency_hz;
  o.period_ns = ep->period_ns;
  o.exclude_idle = ep->clock() && !ep->include_idle;
  o.bpf_overflow = !ep->bpf_profile.empty();
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
  if (!ep->bpf_profile.empty()) {
    TPE_ASSIGN_OR_RETURN(int prog, BpfProgramOf(*ep));
    TPE_RETURN_IF_ERROR(AttachBpfProgram(fd.get(), prog).WithContext(ep->display + " on cpu " + std::to_string(cpu)));
  }
  if (ep->sampled) {
    TPE_ASSIGN_OR_RETURN(CpuRing * ring, EnsureRing(cpu));
    TPE_RETURN_IF_ERROR(SetOutput(fd.get(), ring->owner.get()));
  }
  TPE_ASSIGN_OR_RETURN(*id, ReadEventId(fd.get()));
  return fd;
}

StatusOr<int> Pipeline::BpfProgramOf(const EventPlan& ep) const {
  for (const MetricPlan& m : plan_->metrics) {
    if (m.identity != ep.bpf_profile) continue;
    const auto* profile = dynamic_cast<const bpf::BpfProfile*>(m.collector.get());
    const int fd = profile != nullptr ? profile->metric().end_program_fd() : -1;
    if (fd >= 0) return fd;
  }
  return Internal(ep.display + ": no loaded BPF program of its profile to attach");
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
    // The threads listed predate their events, so no task record names them: their comms are
    // read from /proc now, while they live. A thread that made its calls and exited before the
    // reader's first round would otherwise be looked up too late ("[unknown]": the ASan tier
    // once counted one of four threads so). The reader thread is not running here (Start,
    // a reload's swap) or is this thread (a CPU's reopen).
    if (ep->sampled && plan_->needs_comm && reader_) {
      for (const auto& t : opened) (void)reader_->comms().Lookup(static_cast<uint32_t>(t.tid));
    }
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

}  // namespace tpe
