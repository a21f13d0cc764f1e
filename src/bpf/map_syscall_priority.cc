#include "bpf/map_syscall_priority.h"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

namespace tpe::bpf {
namespace {

std::atomic<bool> g_enabled{false};
std::atomic<uint64_t> g_failures{0};
std::mutex g_seam_mu;
SchedFn g_seam;  // guarded by g_seam_mu; read under it (tests only set it while no map call runs)
std::atomic<bool> g_has_seam{false};

// sched_setscheduler(2) on the calling thread: 0 or an errno.
int SetScheduler(int policy, int priority) {
  if (g_has_seam.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_seam_mu);
    if (g_seam) return g_seam(policy, priority);
  }
  sched_param p{};
  p.sched_priority = priority;
  return ::sched_setscheduler(0, policy, &p) == 0 ? 0 : errno;
}

// The calling thread's policy (with SCHED_RESET_ON_FORK when set) and static priority.
void GetScheduler(int* policy, int* priority) {
  *policy = SCHED_OTHER;
  *priority = 0;
  if (g_has_seam.load(std::memory_order_acquire)) return;
  const int pol = ::sched_getscheduler(0);
  if (pol < 0) return;
  *policy = pol;
  // SCHED_OTHER, SCHED_BATCH and SCHED_IDLE have priority 0 (sched(7)); their nice value stays
  // across sched_setscheduler(2).
  const int base = pol & ~SCHED_RESET_ON_FORK;
  sched_param p{};
  if ((base == SCHED_FIFO || base == SCHED_RR) && ::sched_getparam(0, &p) == 0) *priority = p.sched_priority;
}

}  // namespace

Status EnableFifoMapSyscalls() {
  rlimit rl{};
  if (!g_has_seam.load(std::memory_order_acquire) && ::getrlimit(RLIMIT_RTPRIO, &rl) == 0 &&
      (rl.rlim_cur < static_cast<rlim_t>(kMapSyscallFifoPriority) ||
       rl.rlim_max < static_cast<rlim_t>(kMapSyscallFifoPriority))) {
    rlimit want = rl;
    if (want.rlim_max < static_cast<rlim_t>(kMapSyscallFifoPriority)) want.rlim_max = kMapSyscallFifoPriority;
    want.rlim_cur = kMapSyscallFifoPriority;
    (void)::setrlimit(RLIMIT_RTPRIO, &want);  // refused without CAP_SYS_RESOURCE: the raise below decides
  }
  int policy = 0, priority = 0;
  GetScheduler(&policy, &priority);
  if (const int err = SetScheduler(SCHED_FIFO, kMapSyscallFifoPriority); err != 0) {
    return PermissionDenied("cannot run map syscalls at SCHED_FIFO " + std::to_string(kMapSyscallFifoPriority) +
                            " (sched_setscheduler: " + std::strerror(err) +
                            "; it needs CAP_SYS_NICE or RLIMIT_RTPRIO >= " + std::to_string(kMapSyscallFifoPriority) +
                            ", and no seccomp filter refusing it such as systemd's RestrictRealtime=yes)");
  }
  (void)SetScheduler(policy, priority);
  g_enabled.store(true, std::memory_order_relaxed);
  return Status::Ok();
}

bool FifoMapSyscallsEnabled() { return g_enabled.load(std::memory_order_relaxed); }

FifoMapSyscall::FifoMapSyscall() {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  GetScheduler(&policy_, &priority_);
  if ((policy_ & ~SCHED_RESET_ON_FORK) == SCHED_FIFO && priority_ >= kMapSyscallFifoPriority) return;
  if (const int err = SetScheduler(SCHED_FIFO, kMapSyscallFifoPriority); err != 0) {
    if (g_failures.fetch_add(1, std::memory_order_relaxed) == 0) {
      spdlog::warn(
          "a map syscall cannot run at SCHED_FIFO {} any more (sched_setscheduler: {}; capabilities dropped with "
          "RLIMIT_RTPRIO below {}?): bpf programs may be skipped, uncounted, on its CPU while it is preempted",
          kMapSyscallFifoPriority, std::strerror(err), kMapSyscallFifoPriority);
    }
    return;
  }
  raised_ = true;
}

FifoMapSyscall::~FifoMapSyscall() {
  if (raised_) (void)SetScheduler(policy_, priority_);
}

uint64_t FifoRaiseFailures() { return g_failures.load(std::memory_order_relaxed); }

void SetSchedulerForTesting(SchedFn fn) {
  std::lock_guard<std::mutex> lock(g_seam_mu);
  g_has_seam.store(fn != nullptr, std::memory_order_release);
  g_seam = std::move(fn);
}

void EnableFifoMapSyscallsForTesting(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

}  // namespace tpe::bpf
