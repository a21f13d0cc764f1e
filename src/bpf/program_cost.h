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

// The estimate weighs each window by its runs (decayed sums, so that the latest windows dominate):
// a window that timed one cold run (a cache-cold first run: 40 us) cannot set the price of
// millions. And the kernel's own run_time_ns, which the exporter's windows also make grow
// (BPF_ENABLE_STATS turns on the same switch as the sysctl), is exported without the time timed in
// those windows (RunTimeNs) — unless the sysctl was on through the window, when the time would have
// been timed anyway.
class ProgramCost {
 public:
  // The program's bpf_prog_info run_time_ns and run_cnt (ReadProgramStats) when a window opens
  // and when it closes, and whether the sysctl kernel.bpf_stats_enabled was 1 then
  // (RunTimeStatsSysctlOn). A window with no run leaves the estimate as it was.
  void BeginWindow(uint64_t run_time_ns, uint64_t run_cnt, bool sysctl_on = false);
  void EndWindow(uint64_t run_time_ns, uint64_t run_cnt, bool sysctl_on = false);
  // ns per run: the windows' timed ns over their runs, each window's share halving with every
  // later window; nullopt before a window has timed a run.
  std::optional<double> ns_per_run() const;
  // The estimate in seconds after `runs` runs in all (the program's own count, which never
  // decreases): each run since the previous call is priced at the current ns per run, so the
  // total never decreases either. nullopt until a window has measured the ns per run (the runs
  // until then are priced at the first measurement).
  std::optional<double> Seconds(uint64_t runs);
  // The kernel's run_time_ns (read now) less the ns the exporter's own windows timed: what the
  // sysctl alone has timed. While a window is open, the value at its start (the window's time is
  // not known to be ours or the sysctl's until it closes). Never decreases.
  uint64_t RunTimeNs(uint64_t kernel_run_time_ns);

 private:
  static constexpr double kDecay = 0.5;  // a window's weight, relative to the next one's
  mutable std::mutex mu_;
  bool open_ = false, open_sysctl_ = false;
  uint64_t begin_ns_ = 0, begin_cnt_ = 0;
  double timed_ns_ = 0, timed_runs_ = 0;  // decayed sums over the windows
  std::optional<double> ns_per_run_;
  uint64_t priced_runs_ = 0;
  double seconds_ = 0;
  uint64_t own_ns_ = 0;       // run time timed only because of our windows
  uint64_t exported_ns_ = 0;  // RunTimeNs's last answer (it never decreases)
};

// Whether the sysctl kernel.bpf_stats_enabled is 1 (/proc/sys/kernel/bpf_stats_enabled, Linux
// 5.1; it reads the sysctl's own setting, not whether a BPF_ENABLE_STATS fd is open). False when
// unreadable.
bool RunTimeStatsSysctlOn();

// Turns the kernel's BPF run-time stats on until the returned fd is closed (BPF_ENABLE_STATS
// with BPF_STATS_RUN_TIME; bpf(2)). Errors: Unimplemented before Linux 5.8 (EINVAL),
// PermissionDenied without CAP_SYS_ADMIN (the kernel asks for it), each naming the command.
StatusOr<ScopedFd> EnableRunTimeStats();

}  // namespace tpe::bpf
