// Helpers shared by the test tiers.
#pragma once

#include <string>

namespace tpe::testing {

// The checked-in test data root (tests/data).
std::string DataDir();

// The path of the first file this process maps whose path contains `needle` (e.g.
// "/libc.so.6"), from /proc/self/maps; "" when none does.
std::string MappedPath(const std::string& needle);

// For kernel-tier tests: true when this process may open tracepoint perf events and read
// tracefs. When it may not, prints why; under TPE_REQUIRE_KERNEL=1 (CI) the caller must fail
// instead of skipping (use TPE_REQUIRE_KERNEL_OR_SKIP).
bool KernelAvailable(std::string* why);
bool KernelRequired();
// Whether the tests run in a kernel-matrix guest (tests/vm/guest.sh sets TPE_IN_VM_GUEST=1).
bool InGuest();
// In a kernel-matrix guest (tests/vm/guest.sh sets TPE_IN_VM_GUEST=1), qemu
// TCG runs about 20 times slower than this machine, so tests that need volume rather than a
// particular count (random filter rounds, fork churn, bursts) scale it down by this much.
// Returns `n` on a host and n / 4 (at least 1) in a guest.
int ScaledForGuest(int n);
// A wait (ms) that must hold some work done at the guest's pace (a ring read, a scrape window
// with samples in it): `ms` on a host, 4 x ms in a guest.
int StretchedForGuest(int ms);

}  // namespace tpe::testing

// Skips the test with the reason — or fails it when TPE_REQUIRE_KERNEL=1.
#define TPE_REQUIRE_KERNEL_OR_SKIP()                                                        \
  do {                                                                                      \
    std::string tpe_why_;                                                                   \
    if (!::tpe::testing::KernelAvailable(&tpe_why_)) {                                      \
      if (::tpe::testing::KernelRequired()) FAIL() << "TPE_REQUIRE_KERNEL=1: " << tpe_why_; \
      GTEST_SKIP() << tpe_why_;                                                             \
    }                                                                                       \
  } while (0)
