// Benchmark workload W1/W3/W4: calls getppid() in a loop and reports exactly how many calls it
// made — the ground truth every tracer's count is checked against.
//   syscall_loop SECONDS THREADS [RATE]
// THREADS threads, thread i pinned to CPU i (mod online CPUs). RATE > 0 paces the total rate
// (calls/s, spread over the threads); 0 = as fast as possible. Prints one JSON line:
//   {"calls": N, "seconds": T, "rate": N/T}
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SECONDS THREADS [RATE]\n", argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  const int threads = std::atoi(argv[2]);
  const double rate = argc > 3 ? std::atof(argv[3]) : 0;
  prctl(PR_SET_NAME, "tpe_bench_loop");
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  std::atomic<uint64_t> total{0};
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(t % ncpu, &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      const double per_thread = rate / threads;
      uint64_t n = 0;
      for (;;) {
        for (int i = 0; i < 64; ++i) syscall(SYS_getppid);
        n += 64;
        const auto now = std::chrono::steady_clock::now();
        if (now >= end) break;
        if (per_thread > 0) {
          // Paced: stay at or below n calls by (n / per_thread) seconds.
          const auto due = start + std::chrono::duration<double>(static_cast<double>(n) / per_thread);
          if (due > now) std::this_thread::sleep_until(due);
        }
      }
      total += n;
    });
  }
  for (auto& t : ts) t.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"calls\": %llu, \"seconds\": %.6f, \"rate\": %.1f}\n", static_cast<unsigned long long>(total.load()),
              took, static_cast<double>(total.load()) / took);
  return 0;
}
