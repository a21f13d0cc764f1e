// The sweep thread of collectors whose Sweep does syscalls (the bpf engine reads its maps:
// one per series on kernels without BPF_MAP_LOOKUP_BATCH), so that it never delays the perf
// reader thread while the rings fill (Collector::SweepsOffReader).
//
// Every second it calls Sweep on each such collector; every 100 ms it also sweeps at once a
// collector whose series_dropped() rose since its last sweep (its map is full: removing exited
// tasks' series makes room for new ones, as SeriesTable's eviction does on the perf engine).
// Exited tasks are those /proc no longer lists (the collector checks; `exited` says none).
//
// Cost windows (CostWindows): every `period_ns` it turns the kernel's BPF run-time stats on for
// `window_ns` (the handle `enable_stats` returns keeps them on) and calls OnCostWindow(true),
// then OnCostWindow(false) and lets them go. The first window opens at the first Start, and the
// schedule carries over a Stop/Start (a reload), so reloads do not raise the duty cycle. If
// `enable_stats` fails, one warning names why and no window opens again.
//
// Thread-safety: Start/Stop from the owning thread; the collectors must outlive Stop() and must
// not change between Start and Stop (a reload stops the sweeper around its swap).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectors/collector.h"
#include "common/scoped_fd.h"
#include "common/status.h"

namespace tpe {

struct CostWindows {
  uint64_t period_ns = 0;  // 0 = never
  uint64_t window_ns = 0;
  std::function<StatusOr<ScopedFd>()> enable_stats;  // bpf::EnableRunTimeStats
};

class Sweeper {
 public:
  Sweeper() = default;
  Sweeper(const Sweeper&) = delete;
  Sweeper& operator=(const Sweeper&) = delete;
  ~Sweeper() { Stop(); }

  // Starts the thread if some collector SweepsOffReader(). `idle_ns`: 0 = never idle.
  // `collectors`: null entries are skipped.
  void Start(const std::vector<Collector*>& collectors, uint64_t idle_ns, CostWindows cost = CostWindows{});
  // Joins the thread (an in-progress sweep finishes first). Idempotent.
  void Stop();
  // Sweeps done so far (for tests).
  uint64_t sweeps() const;

 private:
  void Run(const std::vector<Collector*>& mine, uint64_t idle_ns, const CostWindows& cost);
  // Opens or closes the cost window when due (sweeper thread).
  void CostTick(const std::vector<Collector*>& mine, const CostWindows& cost, uint64_t now);
  std::thread thread_;
  // Cost-window state, kept across Stop/Start (sweeper thread, or the owner while stopped).
  uint64_t next_window_ns_ = 0;  // 0: at the first tick
  bool cost_off_ = false;        // enable_stats failed once
  ScopedFd stats_;               // held while a window is open
  uint64_t window_close_ns_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t sweeps_ = 0;
};

}  // namespace tpe
