#include "collectors/sweeper.h"

#include <chrono>

#include "common/clock.h"
#include "common/log.h"

namespace tpe {

void Sweeper::Start(const std::vector<Collector*>& collectors, uint64_t idle_ns, CostWindows cost) {
  Stop();
  std::vector<Collector*> mine;
  for (Collector* c : collectors) {
    if (c && c->SweepsOffReader()) mine.push_back(c);
  }
  if (mine.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this, mine, idle_ns, cost = std::move(cost)] { Run(mine, idle_ns, cost); });
}

void Sweeper::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  stats_ = ScopedFd();  // a window cut short measures nothing; the next Start's collectors begin anew
}

uint64_t Sweeper::sweeps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sweeps_;
}

void Sweeper::CostTick(const std::vector<Collector*>& mine, const CostWindows& cost, uint64_t now) {
  if (stats_.valid()) {  // a window is open
    if (now < window_close_ns_) return;
    // Closed before the programs' stats are read, and opened after they were: everything the
    // kernel timed because of this window lies between the two reads (ProgramCost::RunTimeNs).
    stats_ = ScopedFd();
    for (Collector* c : mine) c->OnCostWindow(false);
    return;
  }
  if (cost.period_ns == 0 || cost.window_ns == 0 || !cost.enable_stats || cost_off_) return;
  if (next_window_ns_ == 0) next_window_ns_ = now;
  if (now < next_window_ns_) return;
  for (Collector* c : mine) c->OnCostWindow(true);
  auto stats = cost.enable_stats();
  if (!stats.ok()) {
    for (Collector* c : mine) c->OnCostWindow(false);
    TPE_LOG_WARN("no estimate of BPF programs' CPU time (tracepoint_exporter_bpf_program_cpu_seconds_total): {}",
                 stats.status().message());
    cost_off_ = true;
    return;
  }
  stats_ = std::move(*stats);
  window_close_ns_ = now + cost.window_ns;
  next_window_ns_ += cost.period_ns;
  if (next_window_ns_ <= now) next_window_ns_ = now + cost.period_ns;  // stopped for a while
}

void Sweeper::Run(const std::vector<Collector*>& mine, uint64_t idle_ns, const CostWindows& cost) {
  const TaskExited none = [](uint32_t) { return false; };
  std::vector<uint64_t> last_ns(mine.size(), MonotonicNs()), dropped(mine.size(), 0);
  for (size_t i = 0; i < mine.size(); ++i) dropped[i] = mine[i]->series_dropped();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) return;
    }
    const uint64_t now = MonotonicNs();
    CostTick(mine, cost, now);
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
