// Rendering a profile: 10,000 distinct stacks, symbolized and
// written as gzip pprof and as folded stacks, as GET /debug/pprof/<name> does per request (the
// kernel's symbols read once before, as the daemon keeps them).
//   build/bench/micro/profile_bench [--benchmark_repetitions=5]
// Stacks: 10 kernel frames from the host's real /proc/kallsyms (its first text symbols) and 12
// user frames in this process's own code (its own mappings and ELF symbols, through /proc), the
// leaf varied so that every stack is distinct. Counters: stacks, pprof bytes, and the peak RSS
// growth (KiB) over the process before the first render.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "profile/renderer.h"

namespace tpe {
namespace {

extern "C" __attribute__((noinline)) int tpe_bench_function(int x) {
  asm volatile("" ::: "memory");
  return x * 7 + 3;
}

long MaxRssKiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// The files frames lie in, shared by the stacks and the renders (the pipeline's).
MappedFiles& Files() {
  static auto* files = new MappedFiles();
  return *files;
}

// User frames are normalized when samples are read; the stacks arrive at a render as frames.
std::vector<StackCount> Stacks(size_t n) {
  static auto* images = new ProcessImages(&Files());
  std::vector<uint64_t> kernel_ips;  // 10 text symbols of the kernel image, 4 bytes in
  auto text = ReadFileToString("/proc/kallsyms");
  std::istringstream in(text.ok() ? *text : std::string());
  uint64_t address = 0;
  std::string type, name;
  while (kernel_ips.size() < 10 && in >> std::hex >> address >> type >> name) {
    if (address != 0 && (type == "T" || type == "t") && kernel_ips.size() < 10) kernel_ips.push_back(address + 4);
    in.ignore(4096, '\n');
  }
  const uint64_t f = reinterpret_cast<uint64_t>(&tpe_bench_function);
  std::vector<StackCount> out(n);
  for (size_t i = 0; i < n; ++i) {
    StackCount& sc = out[i];
    sc.labels = {{"comm", "bench" + std::to_string(i % 16)}};
    sc.pid = static_cast<uint32_t>(getpid());
    sc.kernel = kernel_ips;
    std::vector<uint64_t> user;
    for (int d = 0; d < 12; ++d) user.push_back(f + 1 + static_cast<uint64_t>((i * 12 + d) % 24));
    user[0] = f + 1 + (i % 24) + 24 * (i / 24 % 400);  // distinct per stack (maybe past the function)
    images->Normalize(sc.pid, user, 1, &sc.user_frames);
    sc.value = i + 1;
  }
  return out;
}

// One render of `stacks` as GET /debug/pprof/<name> does it; returns the body's size in bytes.
// The kernel's symbols are read once, as the daemon's KallsymsCache keeps them between renders
// (re-read every 10 minutes).
const std::shared_ptr<const Kallsyms>& SharedKallsyms() {
  static const auto* ks = [] {
    auto read = Kallsyms::Read();
    return new std::shared_ptr<const Kallsyms>(
        std::make_shared<const Kallsyms>(read.ok() ? std::move(read).value() : Kallsyms()));
  }();
  return *ks;
}

size_t Render(const std::vector<StackCount>& stacks, bool folded) {
  Symbolizer sym(&Files(), SharedKallsyms());
  PprofBuilder b("samples", "count");
  AddStacks(stacks, &sym, &b);
  if (folded) return FoldedStacks(b.profile()).size();
  auto gz = b.Gzipped();
  return gz.ok() ? gz->size() : 0;
}

void BM_Render10kStacksPprof(benchmark::State& state) {
  const std::vector<StackCount> stacks = Stacks(10000);
  const long rss_before = MaxRssKiB();
  size_t bytes = 0;
  for (auto _ : state) benchmark::DoNotOptimize(bytes = Render(stacks, false));
  state.counters["stacks"] = 10000;
  state.counters["pprof_bytes"] = static_cast<double>(bytes);
  state.counters["rss_growth_KiB"] = static_cast<double>(MaxRssKiB() - rss_before);
}
BENCHMARK(BM_Render10kStacksPprof)->Unit(benchmark::kMillisecond);

void BM_Render10kStacksFolded(benchmark::State& state) {
  const std::vector<StackCount> stacks = Stacks(10000);
  size_t bytes = 0;
  for (auto _ : state) benchmark::DoNotOptimize(bytes = Render(stacks, true));
  state.counters["folded_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Render10kStacksFolded)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tpe

BENCHMARK_MAIN();
