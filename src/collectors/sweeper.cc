#include "collectors/sweeper.h"

#include <chrono>

#include "common/clock.h"

namespace tpe {

void Sweeper::Start(const std::vector<std::unique_ptr<Collector>>* collectors, uint64_t idle_ns) {
  Stop();
  std::vector<Collector*> mine;
  for (const auto& c : *collectors) {
    if (c && c->SweepsOffReader()) mine.push_back(c.get());
  }
  if (mine.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this, mine, idle_ns] { Run(mine, idle_ns); });
}

void Sweeper::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t Sweeper::sweeps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sweeps_;
}

void Sweeper::Run(const std::vector<Collector*>& mine, uint64_t idle_ns) {
  const TaskExited none = [](uint32_t) { return false; };
  std::vector<uint64_t> last_ns(mine.size(), MonotonicNs()), dropped(mine.size(), 0);
  for (size_t i = 0; i < mine.size(); ++i) dropped[i] = mine[i]->series_dropped();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) return;
    }
    const uint64_t now = MonotonicNs();
    for (size_t i = 0; i < mine.size(); ++i) {
      const uint64_t d = mine[i]->series_dropped();
      if (now - last_ns[i] < 1'000'000'000ULL && d == dropped[i]) continue;
      mine[i]->Sweep(now, idle_ns, none);
      last_ns[i] = now;
      dropped[i] = d;
      std::lock_guard<std::mutex> lock(mu_);
      ++sweeps_;
    }
  }
}

}  // namespace tpe
