// Calls getppid() through two known call paths, for the profile tests' exact stacks:
//   main -> tpe_path_a -> tpe_leaf   N1 times
//   main -> tpe_path_b -> tpe_leaf   N2 times
//   main -> tpe_spin             for S seconds of its CPU time, in user mode (the CPU profile tests)
//   main -> tpe_sleep            N nanosleep()s of 10 ms (the off-CPU profile tests)
//   exec N1 N2: N1 calls through tpe_path_a, then an exec of itself that makes N2 through
//                tpe_path_b (a stack belongs to the image of its time)
//   forks K N: waits for a byte on stdin, then forks K children one after another (no exec),
//                each making N calls through tpe_path_a and exiting (a pre-forking server that
//                predates the profile)
// Usage: stack_paths N1 N2 [comm [hold]]      (comm: the thread's name while it calls, default
//        stack_paths spin S [comm [hold]]      tpe_stacks; hold: then print "done" and wait for
//        stack_paths sleep N [comm [hold]]
//        stack_paths exec N1 N2 [comm [hold]]
//        stack_paths forks K N [comm [hold]]
// stdin to close before exiting, so a test can read the process's mappings and /proc/PID/stat).
// After "done" comes a number: for sleep, the wall-clock ns the N sleeps took in all
// (CLOCK_MONOTONIC around the loop: a bound on the off-CPU time, as a sleep of 10 ms can last
// longer, e.g. 11 ms on a PREEMPT_RT guest under TCG); 0 otherwise.
//
// Built with -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer (tests/triggers/CMakeLists.txt)
// so a frame-pointer unwind (the kernel's for PERF_SAMPLE_CALLCHAIN and bpf_get_stackid's
// BPF_F_USER_STACK) sees every frame: tpe_leaf issues the syscall instruction itself (libc's
// syscall() wrapper keeps no frame, so an unwind from inside it would skip its caller) and keeps
// its own frame although it calls nothing. The functions are noinline and have external linkage,
// so .symtab names them.
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

// `clock` now, in ns (clock_gettime(2)).
static long Ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

extern "C" {

__attribute__((noinline)) long tpe_leaf() {
  // GCC sets up no frame in a function that uses no stack, whatever the flags: one volatile
  // local on the stack keeps "push %rbp; mov %rsp,%rbp".
  volatile long frame_kept = 0;
  long ret;
  asm volatile("syscall" : "=a"(ret) : "0"(static_cast<long>(SYS_getppid)) : "rcx", "r11", "memory");
  return ret + frame_kept;
}

__attribute__((noinline)) long tpe_path_a(int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i) sum += tpe_leaf();
  asm volatile("" ::: "memory");  // no tail call: this frame stays below tpe_leaf's
  return sum;
}

__attribute__((noinline)) long tpe_path_b(int n) {
  long sum = 0;
  for (int i = 0; i < n; ++i) sum += tpe_leaf();
  asm volatile("" ::: "memory");
  return sum;
}

// Spins in user mode until the process has used `seconds` of CPU time: the clock (a syscall for
// a CPU-time clock) is read once per 2^20 iterations, so nearly every sample lands in this loop.
__attribute__((noinline)) long tpe_spin(double seconds) {
  volatile long sink = 0;
  for (;;) {
    for (long i = 0; i < (1 << 20); ++i) sink = sink + i;
    if (static_cast<double>(Ns(CLOCK_PROCESS_CPUTIME_ID)) * 1e-9 >= seconds) break;
  }
  asm volatile("" ::: "memory");
  return sink + 1;
}

// Sleeps `n` times 10 ms (nanosleep), off CPU under this function (the off-CPU profile tests).
// Adds the wall-clock ns the loop took to *slept_ns.
__attribute__((noinline)) long tpe_sleep(int n, long* slept_ns) {
  volatile long frame_kept = 0;
  const long start = Ns(CLOCK_MONOTONIC);
  for (int i = 0; i < n; ++i) {
    // The syscall instruction here, not in libc's wrapper (which keeps no frame: an unwind from it
    // would skip this function, as for tpe_leaf).
    timespec ts{0, 10000000};
    long ret;
    asm volatile("syscall"
                 : "=a"(ret)
                 : "0"(static_cast<long>(SYS_nanosleep)), "D"(&ts), "S"(nullptr)
                 : "rcx", "r11", "memory");
    frame_kept = frame_kept + ret;
  }
  *slept_ns += Ns(CLOCK_MONOTONIC) - start;
  asm volatile("" ::: "memory");
  return frame_kept + 1;
}

}  // extern "C"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N1 N2 [comm]\n", argv[0]);
    return 2;
  }
  // exec and forks take two numbers after the mode: their comm comes one later.
  const bool two_numbers = std::string_view(argv[1]) == "exec" || std::string_view(argv[1]) == "forks";
  const int comm_at = two_numbers ? 4 : 3;
  prctl(PR_SET_NAME, argc > comm_at ? argv[comm_at] : "tpe_stacks");
  if (std::string_view(argv[1]) == "exec" && argc > 3) {
    const long a = tpe_path_a(std::atoi(argv[2]));
    if (a <= 0) return 1;
    std::vector<char*> args = {argv[0], const_cast<char*>("0")};
    for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv("/proc/self/exe", args.data());
    return 4;
  }
  if (std::string_view(argv[1]) == "forks" && argc > 3) {
    if (std::getchar() == EOF) return 3;
    const int children = std::atoi(argv[2]), calls = std::atoi(argv[3]);
    for (int i = 0; i < children; ++i) {
      const pid_t child = fork();
      if (child == 0) _exit(tpe_path_a(calls) > 0 ? 0 : 1);
      int status = 0;
      if (child < 0 || waitpid(child, &status, 0) != child || status != 0) return 5;
    }
    if (argc > 5 && std::string_view(argv[5]) == "hold") {
      std::printf("done 0\n");
      std::fflush(stdout);
      while (std::getchar() != EOF) {
      }
    }
    return 0;
  }
  const bool spin = std::string_view(argv[1]) == "spin", sleep = std::string_view(argv[1]) == "sleep";
  long slept_ns = 0;
  const long a = spin    ? tpe_spin(std::atof(argv[2]))
                 : sleep ? tpe_sleep(std::atoi(argv[2]), &slept_ns)
                         : tpe_path_a(std::atoi(argv[1]));
  const long b = spin || sleep ? 1 : tpe_path_b(std::atoi(argv[2]));
  if (argc > 4 && std::string_view(argv[argc - 1]) == "hold") {
    std::printf("done %ld\n", slept_ns);
    std::fflush(stdout);
    while (std::getchar() != EOF) {
    }
  }
  return a + b > 0 ? 0 : 1;  // getppid() is positive: the result is used, the calls stay
}
