// Trigger for the e2e tier: renames itself with prctl(PR_SET_NAME, NAME), makes exactly N
// getppid() system calls, and exits. Usage: getppid_loop NAME N
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s NAME N\n", argv[0]);
    return 2;
  }
  prctl(PR_SET_NAME, argv[1]);
  const long n = std::strtol(argv[2], nullptr, 10);
  for (long i = 0; i < n; ++i) syscall(SYS_getppid);
  return 0;
}
