// A function whose string argument lies in a page this process has never touched: for the probe
// tests of strings in non-resident pages (bpf read them as ""). Writes "tpe_cold_string" at offset
// 0 of a fresh file, then N times: maps the file (MAP_PRIVATE, PROT_READ; the page is in the page
// cache but not in this process's page tables), calls tpe_cold(p, i) — whose entry is probed before
// anything reads *p — and unmaps it.
//   cold_string FILE N
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" __attribute__((noinline)) int tpe_cold(const char* s, int i) {
  asm volatile("" : : "r"(s), "r"(i) : "memory");  // never reads *s
  return i;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FILE N\n", argv[0]);
    return 2;
  }
  const int n = std::atoi(argv[2]);
  const int fd = ::open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const char text[] = "tpe_cold_string";
  if (fd < 0 || ::write(fd, text, sizeof(text)) != static_cast<ssize_t>(sizeof(text))) return 1;
  for (int i = 0; i < n; ++i) {
    void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return 1;
    tpe_cold(static_cast<const char*>(p), i);
    ::munmap(p, 4096);
  }
  ::close(fd);
  ::unlink(argv[1]);
  return 0;
}
