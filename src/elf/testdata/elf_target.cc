// An executable for elf_unittest, built PIE and non-PIE. Run, it prints where its own functions and
// semaphore are: `KEY FILE_OFFSET_HEX [BYTES_HEX]` lines computed from /proc/self/maps (the kernel's
// view of which file offset backs each address), never from the ELF headers, so the test checks
// ElfFile's arithmetic against an independent source.
#include <sys/sdt.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

extern "C" volatile unsigned short tpe_elf_test_guarded_semaphore;  // elf_target_guarded.cc
extern "C" long tpe_elf_guarded_function(long x);

extern "C" __attribute__((noinline)) long tpe_elf_target_function(int i, long l, const char* s) {
  STAP_PROBE3(tpe_elf_test, three_args, i, l, s);
  unsigned char small = static_cast<unsigned char>(l);
  short half = static_cast<short>(i);
  STAP_PROBE3(tpe_elf_test, sizes, small, half, 42);
  return tpe_elf_guarded_function(l + i) + static_cast<long>(std::strlen(s)) + small + half;
}

#ifdef TPE_ELF_TARGET_WITH_LIB
extern "C" long tpe_elf_lib_function(long x);
#endif

namespace {

// Prints `key`'s file offset (address - mapping start + mapping offset) and, when `bytes` > 0,
// that many bytes at the address. Returns false when no file-backed mapping holds `addr`.
bool PrintOffset(const char* key, const void* addr, int bytes) {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return false;
  char line[4096];
  bool found = false;
  auto a = reinterpret_cast<uintptr_t>(addr);
  while (!found && std::fgets(line, sizeof(line), maps) != nullptr) {
    uintptr_t start = 0, end = 0;
    unsigned long long offset = 0;
    char path[4096] = "";
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %llx %*s %*s %4095s", &start, &end, &offset, path) < 3)
      continue;
    if (a < start || a >= end || path[0] != '/') continue;
    std::printf("%s 0x%llx ", key, static_cast<unsigned long long>(a - start + offset));
    for (int i = 0; i < bytes; ++i) std::printf("%02x", static_cast<const unsigned char*>(addr)[i]);
    std::printf(" %s\n", path);
    found = true;
  }
  std::fclose(maps);
  return found;
}

}  // namespace

int main(int argc, char**) {
  if (argc > 1) return static_cast<int>(tpe_elf_target_function(argc, 2, "x"));  // keeps the probes live
  bool ok = PrintOffset("function", reinterpret_cast<const void*>(&tpe_elf_target_function), 16) &&
            PrintOffset("semaphore", const_cast<const unsigned short*>(&tpe_elf_test_guarded_semaphore), 0);
#ifdef TPE_ELF_TARGET_WITH_LIB
  // Under -fPIE, &function of another object loads the real address from the GOT.
  ok = ok && PrintOffset("lib_function", reinterpret_cast<const void*>(&tpe_elf_lib_function), 16);
#endif
  return ok ? 0 : 1;
}
