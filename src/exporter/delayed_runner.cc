#include "exporter/delayed_runner.h"

#include <utility>
#include <vector>

namespace tpe {

DelayedRunner::DelayedRunner(size_t capacity) : capacity_(capacity) {
  thread_ = std::thread([this] { Loop(); });
}

DelayedRunner::~DelayedRunner() { Stop(); }

bool DelayedRunner::Submit(Clock::time_point when, std::function<void()> run, std::function<void()> cancel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || jobs_.size() >= capacity_) return false;
    jobs_.emplace(when, Job{std::move(run), std::move(cancel)});  // after equal keys: FIFO
  }
  cv_.notify_one();
  return true;
}

void DelayedRunner::Stop() {
  std::vector<Job> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& [when, job] : jobs_) rest.push_back(std::move(job));
    jobs_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Job& job : rest) {
    if (job.cancel) job.cancel();
  }
}

size_t DelayedRunner::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void DelayedRunner::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (jobs_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto due = jobs_.begin()->first;
    if (Clock::now() < due) {
      cv_.wait_until(lock, due);  // woken early by a sooner job or Stop
      continue;
    }
    Job job = std::move(jobs_.begin()->second);
    jobs_.erase(jobs_.begin());
    lock.unlock();
    if (job.run) job.run();
    lock.lock();
  }
}

}  // namespace tpe
