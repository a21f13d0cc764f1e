// A program built as distributions build theirs: -O2 -fomit-frame-pointer (and
// -fno-optimize-sibling-calls, so every call keeps its frame), with a known chain
//   main -> tpe_nfp_a -> tpe_nfp_b -> tpe_nfp_c -> tpe_nfp_leaf
// each frame holding live data on its stack, for the DWARF unwinding tests:
//   no_frame_pointers getppid N [comm [hold]]   N getppid() from the leaf, through libc
//   no_frame_pointers spin S [comm [hold]]      S seconds of CPU time in the leaf
//   no_frame_pointers sleep N [comm [hold]]     N nanosleep()s of 10 ms through libc's nanosleep
// hold: then print "done <slept ns>" and wait for stdin to close (see stack_paths.cc). An inline
// function, tpe_nfp_inlined, is always inlined into tpe_nfp_leaf (the inline-frame tests).
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

static long Ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

extern "C" {

static inline __attribute__((always_inline)) long tpe_nfp_inlined(int mode, long arg, long* acc) {
  if (mode == 0) return static_cast<long>(getppid());
  if (mode == 1) {
    volatile long sink = 0;
    for (long i = 0; i < (1 << 16); ++i) sink = sink + i;
    return sink & 1;
  }
  timespec ts{0, 10000000};
  nanosleep(&ts, nullptr);
  *acc += arg;
  return 1;
}

__attribute__((noinline)) long tpe_nfp_leaf(int mode, long arg) {
  volatile long live[4] = {arg, arg + 1, arg + 2, arg + 3};
  long acc = 0;
  const long r = tpe_nfp_inlined(mode, arg, &acc);
  return r + live[0] + live[3] - arg - (arg + 3) + (acc != 0 ? 0 : 0);
}

__attribute__((noinline)) long tpe_nfp_c(int mode, long n) {
  volatile long live[8] = {n};
  long sum = 0;
  for (long i = 0; i < n; ++i) sum += tpe_nfp_leaf(mode, i);
  return sum + live[0] - n;
}

__attribute__((noinline)) long tpe_nfp_b(int mode, long n) {
  volatile long live[6] = {n, 2};
  const long r = tpe_nfp_c(mode, n);
  return r + live[1] - 2;
}

__attribute__((noinline)) long tpe_nfp_a(int mode, long n) {
  volatile long live[2] = {n};
  const long r = tpe_nfp_b(mode, n);
  return r + live[0] - n;
}

}  // extern "C"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s getppid|spin|sleep N [comm [hold]]\n", argv[0]);
    return 2;
  }
  prctl(PR_SET_NAME, argc > 3 ? argv[3] : "tpe_nfp");
  const std::string_view mode(argv[1]);
  const long start = Ns(CLOCK_MONOTONIC);
  long r = 0;
  if (mode == "getppid") {
    r = tpe_nfp_a(0, std::atol(argv[2]));
  } else if (mode == "spin") {
    const double seconds = std::atof(argv[2]);
    while (static_cast<double>(Ns(CLOCK_PROCESS_CPUTIME_ID)) * 1e-9 < seconds)
      r += tpe_nfp_a(1, 512);  // ~30 ms a clock read
  } else if (mode == "sleep") {
    r = tpe_nfp_a(2, std::atol(argv[2]));
  } else {
    return 2;
  }
  const long took = Ns(CLOCK_MONOTONIC) - start;
  if (argc > 4 && std::string_view(argv[argc - 1]) == "hold") {
    std::printf("done %ld\n", mode == "sleep" ? took : 0L);
    std::fflush(stdout);
    while (std::getchar() != EOF) {
    }
  }
  return r >= 0 ? 0 : 1;
}
