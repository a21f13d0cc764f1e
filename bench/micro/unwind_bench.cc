// Unwinding one sample's user stack from its registers and stack copy (src/unwind), with warm
// caches (the files' tables read, the process's mappings learnt), as the reader does per sample
// of an "unwind": "dwarf" profile:
//  - BM_UnwindC: this process stopped in a chain built without frame pointers
//    (bench_unwind_a -> b -> c -> d -> tpe_capture_stack, 5 frames, then the benchmark's own);
//  - BM_UnwindPython: a real sample of Debian's python3.11 (-O2, no frame pointers) in a Python
//    recursion through C (map() at each level) spinning at its bottom, taken with
//    PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER (8 KiB) from a task-clock event on it.
//   sudo build/bench/micro/unwind_bench [--benchmark_repetitions=5]
// Counters: frames per unwind; the label says how the unwind ended (outermost: whole).
#include <benchmark/benchmark.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "process/process_images.h"
#include "testing/self_stack.h"
#include "unwind/cfi_cache.h"
#include "unwind/registers.h"
#include "unwind/unwinder.h"

using Captured = tpe::testing::CapturedStack;

extern "C" {
#define BENCH_FRAME(name, next)                                                            \
  __attribute__((noinline, optimize("omit-frame-pointer"))) int name(Captured* c, int x) { \
    volatile int live[6] = {x, x + 1};                                                     \
    const int r = next;                                                                    \
    asm volatile("" ::: "memory");                                                         \
    return r + live[0] + live[1];                                                          \
  }
BENCH_FRAME(bench_unwind_d, (tpe_capture_stack(c, 8192), x))
BENCH_FRAME(bench_unwind_c, bench_unwind_d(c, x + 1))
BENCH_FRAME(bench_unwind_b, bench_unwind_c(c, x + 1))
BENCH_FRAME(bench_unwind_a, bench_unwind_b(c, x + 1))
}

namespace tpe::unwind {
namespace {

void RunUnwinds(benchmark::State& state, uint32_t pid, const Registers& regs, std::span<const uint8_t> stack) {
  MappedFiles files;
  ProcessImages images(&files);
  CfiCache tables(&files);
  std::vector<UserFrame> frames;
  UnwindEnd end = UnwindEnd::kOutermost;
  {  // warm: the mappings learnt, the tables read
    ProcessCodeLookup lookup(&images, &tables, pid, MonotonicNs());
    end = Unwind(regs, stack, 127, &lookup, &frames);
  }
  const size_t depth = frames.size();
  for (auto _ : state) {
    frames.clear();
    ProcessCodeLookup lookup(&images, &tables, pid, MonotonicNs());
    end = Unwind(regs, stack, 127, &lookup, &frames);
    benchmark::DoNotOptimize(frames.data());
  }
  state.counters["frames"] = static_cast<double>(depth);
  state.SetLabel(std::string("end: ") + UnwindEndName(end));
  if (frames.size() != depth) state.SkipWithError("the unwinds differ");
}

void BM_UnwindC(benchmark::State& state) {
  Captured c;
  bench_unwind_a(&c, 1);
  RunUnwinds(state, static_cast<uint32_t>(getpid()), c.Registers(), c.stack);
}
BENCHMARK(BM_UnwindC);

// A python3.11 process recursing through map() and spinning at the bottom, and one sample of it.
struct PythonSample {
  pid_t pid = -1;
  std::vector<uint64_t> regs;
  std::vector<uint8_t> stack;
  std::string error;
  ~PythonSample() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

void TakePythonSample(PythonSample* s) {
  const char* code =
      "def f(n):\n"
      "    if n == 0:\n"
      "        while True: pass\n"
      "    return list(map(f, [n - 1]))\n"
      "f(6)\n";
  s->pid = fork();
  if (s->pid == 0) {
    execl("/usr/bin/python3.11", "python3.11", "-c", code, nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // started, recursed, spinning
  perf_event_attr a{};
  a.size = sizeof(a);
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = 1000000;  // 1 ms of its CPU time
  a.sample_type = PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
  a.sample_regs_user = kSampleRegsUser;
  a.sample_stack_user = 8192;
  a.exclude_kernel = 1;
  a.wakeup_events = 1;
  const int fd = static_cast<int>(syscall(SYS_perf_event_open, &a, s->pid, -1, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) {
    s->error = std::string("perf_event_open: ") + strerror(errno) + " (run as root)";
    return;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), pages = 8;
  void* m = mmap(nullptr, page * (pages + 1), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    s->error = "mmap of the ring failed";
    close(fd);
    return;
  }
  auto* meta = static_cast<perf_event_mmap_page*>(m);
  const auto* data = static_cast<const uint8_t*>(m) + page;
  for (int i = 0; i < 200 && s->regs.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = meta->data_tail;
    const size_t size = page * pages;
    while (tail < head && s->regs.empty()) {
      std::vector<uint8_t> rec(sizeof(perf_event_header));
      for (size_t k = 0; k < rec.size(); ++k) rec[k] = data[(tail + k) % size];
      perf_event_header h;
      std::memcpy(&h, rec.data(), sizeof(h));
      rec.resize(h.size);
      for (size_t k = 0; k < h.size; ++k) rec[k] = data[(tail + k) % size];
      tail += h.size;
      if (h.type != PERF_RECORD_SAMPLE) continue;
      // abi, regs[17], size, data[size], dyn_size (perf_event_open(2), PERF_SAMPLE_REGS_USER/STACK_USER).
      size_t off = sizeof(h) + 8;
      s->regs.resize(kSampleRegsCount);
      std::memcpy(s->regs.data(), rec.data() + off, 8 * kSampleRegsCount);
      off += 8 * kSampleRegsCount;
      uint64_t n = 0, dyn = 0;
      std::memcpy(&n, rec.data() + off, 8);
      off += 8;
      std::memcpy(&dyn, rec.data() + off + n, 8);
      s->stack.assign(rec.data() + off, rec.data() + off + std::min(n, dyn));
    }
    __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
  }
  munmap(m, page * (pages + 1));
  close(fd);
  if (s->regs.empty()) s->error = "no sample of python3.11";
}

void BM_UnwindPython(benchmark::State& state) {
  if (access("/usr/bin/python3.11", X_OK) != 0) {
    state.SkipWithError("/usr/bin/python3.11 is not installed");
    return;
  }
  PythonSample s;
  TakePythonSample(&s);
  if (!s.error.empty()) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  RunUnwinds(state, static_cast<uint32_t>(s.pid), FromSampleRegs(s.regs), s.stack);
}
BENCHMARK(BM_UnwindPython);

}  // namespace
}  // namespace tpe::unwind

BENCHMARK_MAIN();
