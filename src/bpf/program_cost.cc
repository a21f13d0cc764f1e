#include "bpf/program_cost.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tpe::bpf {

void ProgramCost::BeginWindow(uint64_t run_time_ns, uint64_t run_cnt, bool sysctl_on) {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = true;
  open_sysctl_ = sysctl_on;
  begin_ns_ = run_time_ns;
  begin_cnt_ = run_cnt;
}

void ProgramCost::EndWindow(uint64_t run_time_ns, uint64_t run_cnt, bool sysctl_on) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return;
  open_ = false;
  if (run_time_ns < begin_ns_ || run_cnt < begin_cnt_) return;  // a program reloaded meanwhile
  const uint64_t ns = run_time_ns - begin_ns_, runs = run_cnt - begin_cnt_;
  // Timed only because of the window unless the sysctl timed it too, from start to end.
  if (!(open_sysctl_ && sysctl_on)) own_ns_ += ns;
  if (runs == 0) return;  // nothing measured
  timed_ns_ = timed_ns_ * kDecay + static_cast<double>(ns);
  timed_runs_ = timed_runs_ * kDecay + static_cast<double>(runs);
  ns_per_run_ = timed_ns_ / timed_runs_;
}

std::optional<double> ProgramCost::ns_per_run() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ns_per_run_;
}

std::optional<double> ProgramCost::Seconds(uint64_t runs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ns_per_run_) return std::nullopt;
  if (runs > priced_runs_) {
    seconds_ += static_cast<double>(runs - priced_runs_) * *ns_per_run_ * 1e-9;
    priced_runs_ = runs;
  }
  return seconds_;
}

uint64_t ProgramCost::RunTimeNs(uint64_t kernel_run_time_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t now = open_ ? begin_ns_ : kernel_run_time_ns;
  now = now > own_ns_ ? now - own_ns_ : 0;
  exported_ns_ = std::max(exported_ns_, now);
  return exported_ns_;
}

bool RunTimeStatsSysctlOn() {
  FILE* f = std::fopen("/proc/sys/kernel/bpf_stats_enabled", "re");
  if (f == nullptr) return false;
  int v = 0;
  const bool on = std::fscanf(f, "%d", &v) == 1 && v != 0;
  std::fclose(f);
  return on;
}

StatusOr<ScopedFd> EnableRunTimeStats() {
  const int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (fd >= 0) return ScopedFd(fd);
  const int err = errno;
  if (err == EINVAL) {
    return Unimplemented("BPF_ENABLE_STATS: " + std::string(std::strerror(err)) +
                         " (the kernel's BPF run-time stats by fd need Linux 5.8)");
  }
  if (err == EPERM || err == EACCES) {
    return PermissionDenied("BPF_ENABLE_STATS: " + std::string(std::strerror(err)) +
                            " (the kernel asks for CAP_SYS_ADMIN to turn BPF run-time stats on)");
  }
  return ErrnoStatus(err, "BPF_ENABLE_STATS");
}

}  // namespace tpe::bpf
