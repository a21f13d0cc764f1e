// The sweep thread of collectors whose Sweep does syscalls (the bpf engine reads its maps:
// one per series on kernels without BPF_MAP_LOOKUP_BATCH), so that it never delays the perf
// reader thread while the rings fill (Collector::SweepsOffReader).
//
// Every second it calls Sweep on each such collector; every 100 ms it also sweeps at once a
// collector whose series_dropped() rose since its last sweep (its map is full: removing exited
// tasks' series makes room for new ones, as SeriesTable's eviction does on the perf engine).
// Exited tasks are those /proc no longer lists (the collector checks; `exited` says none).
//
// Thread-safety: Start/Stop from the owning thread; the collectors must outlive Stop() and must
// not change between Start and Stop (a reload stops the sweeper around its swap).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectors/collector.h"

namespace tpe {

class Sweeper {
 public:
  Sweeper() = default;
  Sweeper(const Sweeper&) = delete;
  Sweeper& operator=(const Sweeper&) = delete;
  ~Sweeper() { Stop(); }

  // Starts the thread if some collector SweepsOffReader(). `idle_ns`: 0 = never idle.
  void Start(const std::vector<std::unique_ptr<Collector>>* collectors, uint64_t idle_ns);
  // Joins the thread (an in-progress sweep finishes first). Idempotent.
  void Stop();
  // Sweeps done so far (for tests).
  uint64_t sweeps() const;

 private:
  void Run(const std::vector<Collector*>& mine, uint64_t idle_ns);
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t sweeps_ = 0;
};

}  // namespace tpe
