// DelayedRunner: runs jobs at a deadline on one thread of its own, at most `capacity` waiting.
//
// The HTTP server's answers that must wait (GET /debug/pprof/<name>?seconds=N answers with the
// samples of the next N seconds) are jobs here: the connection is suspended meanwhile, so a wait
// holds no event-loop thread, and the bound keeps thousands of such requests from holding
// memory (a refused Submit is answered at once).
//
// Thread-safety: every member may be called from any thread. `run` and `cancel` are called on
// the runner's thread (or, for `cancel`, on the thread calling Stop), never both for one job.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace tpe {

class DelayedRunner {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the thread. Throws std::system_error when no thread can be started (the caller, at
  // server start, turns that into a Status).
  explicit DelayedRunner(size_t capacity);
  // Stop().
  ~DelayedRunner();
  DelayedRunner(const DelayedRunner&) = delete;
  DelayedRunner& operator=(const DelayedRunner&) = delete;

  // Queues `run` for `when` (jobs due at once run in submission order). Returns false, calling
  // neither callback, when `capacity` jobs are waiting or the runner has stopped.
  bool Submit(Clock::time_point when, std::function<void()> run, std::function<void()> cancel);
  // Calls `cancel` of every job still waiting (in deadline order), lets a running `run` finish
  // and joins the thread; later Submits return false. Idempotent.
  void Stop();
  // Jobs waiting now (not counting one that is running).
  size_t waiting() const;

 private:
  struct Job {
    std::function<void()> run, cancel;
  };
  void Loop();

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<Clock::time_point, Job> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tpe
