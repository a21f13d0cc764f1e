// The running pipeline: opens the plan's perf events on every online CPU, maps one ring per CPU
// (every sampled event of that CPU writes into it via PERF_EVENT_IOC_SET_OUTPUT), runs the
// reader thread (epoll over the ring fds with watermark wakeups), and snapshots every metric
// plus the self-metrics at scrape time.
//
// Thread-safety: Start/Stop from the owning (main) thread; Snapshot from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "collectors/snapshot.h"
#include "common/scoped_fd.h"
#include "daemon/plan.h"
#include "daemon/reader.h"
#include "tracefs/tracefs.h"

namespace tpe {

class Pipeline {
 public:
  // Takes ownership of `plan`; `tracefs` is used to explain rejected filters.
  Pipeline(std::unique_ptr<Plan> plan, const Tracefs* tracefs);
  ~Pipeline();

  // Opens and enables every perf event (counting and sampled), maps the rings.
  // Errors: PermissionDenied (with what is missing), InvalidArgument for a rejected filter
  // (with the kernel's reason, naming the config file and JSON path), Unavailable for mlock.
  Status Open();
  // Starts the reader thread (no-op when nothing is sampled).
  Status Start();
  // Disables the events, stops the reader and dispatches everything still in the rings.
  // Idempotent: later calls do nothing.
  void Stop();

  // For a reload: carries state from `old` (stopped) into this pipeline (opened, not started).
  // Every metric whose definition is unchanged continues with old's collector — its series,
  // in-flight latency starts, and (counting mode) its count so far; events with the same
  // (event, filter) keep their self-metric counts; the comm table is kept. Metrics only in
  // `old` are dropped with it. Call under the scrape lock (no concurrent Snapshot).
  void AdoptFrom(Pipeline& old);

  // User metrics (config order) then self-metrics.
  std::vector<MetricSnapshot> Snapshot() const;

  const Plan& plan() const { return *plan_; }
  size_t ring_count() const { return rings_.size(); }

 private:
  void Run();
  Status OpenEventOnCpu(EventPlan* ep, int cpu, int ring_owner_fd, bool track_tasks);

  std::unique_ptr<Plan> plan_;
  const Tracefs* tracefs_;  // not owned; outlives the pipeline
  std::deque<CpuRing> rings_;
  std::unique_ptr<Reader> reader_;
  ScopedFd epoll_fd_;
  ScopedFd stop_fd_;  // eventfd that wakes the reader to stop
  std::thread thread_;
  std::atomic<bool> running_{false};
  bool stopped_ = false;
  RelaxedCounter wakeups_;
};

}  // namespace tpe
