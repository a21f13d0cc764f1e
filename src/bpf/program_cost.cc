#include "bpf/program_cost.h"

#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>

namespace tpe::bpf {

void ProgramCost::BeginWindow(uint64_t run_time_ns, uint64_t run_cnt) {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = true;
  begin_ns_ = run_time_ns;
  begin_cnt_ = run_cnt;
}

void ProgramCost::EndWindow(uint64_t run_time_ns, uint64_t run_cnt) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return;
  open_ = false;
  if (run_cnt <= begin_cnt_ || run_time_ns < begin_ns_) return;  // no run timed in the window
  ns_per_run_ = static_cast<double>(run_time_ns - begin_ns_) / static_cast<double>(run_cnt - begin_cnt_);
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
