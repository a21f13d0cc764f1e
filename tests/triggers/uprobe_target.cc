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
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--offsets") == 0) {
    std::printf("tpe_target 0x%" PRIx64 "\n", FileOffset(reinterpret_cast<const void*>(&tpe_target)));
    std::printf("tpe_target_str 0x%" PRIx64 "\n", FileOffset(reinterpret_cast<const void*>(&tpe_target_str)));
    std::printf("tpe_semaphore 0x%" PRIx64 "\n", FileOffset(const_cast<unsigned short*>(&tpe_semaphore)));
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s --offsets | N\n", argv[0]);
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
