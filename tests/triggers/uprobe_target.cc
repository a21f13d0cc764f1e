// Trigger for the uprobe tests: functions at known file offsets, called a known number of times.
//
// Usage:
//   uprobe_target --offsets   prints "tpe_target 0x<off>", "tpe_target_str 0x<off>" and
//                             "tpe_semaphore 0x<off>": file offsets in this executable, computed
//                             from /proc/self/maps (address - mapping start + mapping file offset),
//                             so no ELF reader is needed
//   uprobe_target N           calls tpe_target(i) and tpe_target_str("tpe_hello") N times each,
//                             then prints "semaphore <value>": the USDT-style semaphore the kernel
//                             increments while a uprobe with that ref_ctr offset is enabled
//   uprobe_target --threads EARLY LATE N
//                             starts EARLY threads, prints "ready", and waits for a line on stdin;
//                             then starts LATE more threads; every thread calls tpe_target(i) N
//                             times (the main thread never does); prints "done" when all are joined
//   uprobe_target --serve     for each line "N" on stdin calls tpe_target(i) N times and prints
//                             "done"; exits at end of input (a process that runs a binary across
//                             its replacement)
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

// A USDT semaphore lives in .probes (sys/sdt.h), a file-backed writable section.
extern "C" {
__attribute__((section(".probes"), used)) volatile unsigned short tpe_semaphore = 0;

__attribute__((noinline, used)) long tpe_target(long x) {
  asm volatile("" ::: "memory");
  return 2 * x + 1;
}

__attribute__((noinline, used)) long tpe_target_str(const char* s) {
  asm volatile("" ::: "memory");
  return static_cast<long>(std::strlen(s));
}
}

namespace {

// The file offset of `addr` in the mapping of this executable that holds it; 0 if none.
uint64_t FileOffset(const void* addr) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return 0;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  char line[4096];
  uint64_t result = 0;
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    uintptr_t start = 0, end = 0;
    unsigned long long off = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %llx", &start, &end, &off) != 3) continue;
    if (a >= start && a < end) {
      result = a - start + off;
      break;
    }
  }
  std::fclose(maps);
  return result;
}

long CallTarget(long n) {
  // Called through a volatile pointer: the compiler can neither inline nor clone it.
  long (*volatile target)(long) = tpe_target;
  long sum = 0;
  for (long i = 0; i < n; ++i) sum += target(i);
  return sum;
}

int Threads(long early, long late, long n) {
  std::atomic<bool> go{false};
  std::atomic<long> sum{0};
  auto body = [&] {
    while (!go.load()) std::this_thread::yield();
    sum += CallTarget(n);
  };
  std::vector<std::thread> threads;
  for (long i = 0; i < early; ++i) threads.emplace_back(body);
  std::printf("ready\n");
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 2;
  go = true;
  for (long i = 0; i < late; ++i) threads.emplace_back(body);
  for (auto& t : threads) t.join();
  std::printf("done\n");
  std::fflush(stdout);
  return sum.load() == 0 && n > 0 ? 1 : 0;
}

int Serve() {
  char line[64];
  long sum = 0;
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    sum += CallTarget(std::strtol(line, nullptr, 10));
    std::printf("done\n");
    std::fflush(stdout);
  }
  return sum < 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--threads") == 0) {
    return Threads(std::strtol(argv[2], nullptr, 10), std::strtol(argv[3], nullptr, 10),
                   std::strtol(argv[4], nullptr, 10));
  }
  if (argc == 2 && std::strcmp(argv[1], "--serve") == 0) return Serve();
  if (argc == 2 && std::strcmp(argv[1], "--offsets") == 0) {
    std::printf("tpe_target 0x%" PRIx64 "\n", FileOffset(reinterpret_cast<const void*>(&tpe_target)));
    std::printf("tpe_target_str 0x%" PRIx64 "\n", FileOffset(reinterpret_cast<const void*>(&tpe_target_str)));
    std::printf("tpe_semaphore 0x%" PRIx64 "\n", FileOffset(const_cast<unsigned short*>(&tpe_semaphore)));
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s --offsets | N | --threads EARLY LATE N | --serve\n", argv[0]);
    return 2;
  }
  const long n = std::strtol(argv[1], nullptr, 10);
  // Called through volatile pointers: the compiler can neither inline nor clone them.
  long (*volatile target)(long) = tpe_target;
  long (*volatile target_str)(const char*) = tpe_target_str;
  long sum = 0;
  for (long i = 0; i < n; ++i) {
    sum += target(i);
    sum += target_str("tpe_hello");
  }
  std::printf("semaphore %u\n", static_cast<unsigned>(tpe_semaphore));
  return sum == 0 && n > 0 ? 1 : 0;
}
