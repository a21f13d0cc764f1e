// The kernel CPU time of a BPF program, estimated without leaving the kernel's run-time stats on.
//
// The kernel times every run of every BPF program only while run-time stats are enabled (the
// sysctl kernel.bpf_stats_enabled, or an fd from BPF_ENABLE_STATS, Linux 5.8: stats stay on
// while any such fd is open); timing costs each run of every program on the host two clock
// reads. So the stats are turned on for a short window at a duty cycle (Sweeper), each
// program's ns per run is measured over the window from bpf_prog_info run_time_ns / run_cnt,
// and the runs the program counts itself (its stats map) are priced at the latest ns per run.
//
// Thread-safety: every method may be called from any thread (a mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "common/scoped_fd.h"
#include "common/status.h"

namespace tpe::bpf {

class ProgramCost {
 public:
  // The program's bpf_prog_info run_time_ns and run_cnt (ReadProgramStats) when a window opens
  // and when it closes. A window with no run leaves the last ns per run in place.
  void BeginWindow(uint64_t run_time_ns, uint64_t run_cnt);
  void EndWindow(uint64_t run_time_ns, uint64_t run_cnt);
  // ns per run measured by the latest window that saw runs; nullopt before one has.
  std::optional<double> ns_per_run() const;
  // The estimate in seconds after `runs` runs in all (the program's own count, which never
  // decreases): each run since the previous call is priced at the latest ns per run, so the
  // total never decreases either. nullopt until a window has measured the ns per run (the runs
  // until then are priced at the first measurement).
  std::optional<double> Seconds(uint64_t runs);

 private:
  mutable std::mutex mu_;
  bool open_ = false;
  uint64_t begin_ns_ = 0, begin_cnt_ = 0;
  std::optional<double> ns_per_run_;
  uint64_t priced_runs_ = 0;
  double seconds_ = 0;
};

// Turns the kernel's BPF run-time stats on until the returned fd is closed (BPF_ENABLE_STATS
// with BPF_STATS_RUN_TIME; bpf(2)). Errors: Unimplemented before Linux 5.8 (EINVAL),
// PermissionDenied without CAP_SYS_ADMIN (the kernel asks for it), each naming the command.
StatusOr<ScopedFd> EnableRunTimeStats();

}  // namespace tpe::bpf
