// A point of this very process as a sample with PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER
// would carry it — the registers an unwinder starts from and a copy of the stack above rsp — for
// the unwinder's tests and benchmark (src/unwind/unwinder_unittest.cc, bench/micro/unwind_bench).
// Main thread only (the copy ends at the [stack] mapping of /proc/self/maps).
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "unwind/registers.h"

namespace tpe::testing {

struct CapturedStack {
  uint64_t rip = 0, rsp = 0, rbp = 0, rbx = 0, r12 = 0, r13 = 0, r14 = 0, r15 = 0;
  std::vector<uint8_t> stack;  // from rsp up, at most the bytes asked for

  // The registers by DWARF number (rip, rsp, rbp, rbx, r12-r15 known).
  unwind::Registers Registers() const {
    unwind::Registers r;
    r.Set(unwind::kDwarfRip, rip);
    r.Set(unwind::kDwarfRsp, rsp);
    r.Set(unwind::kDwarfRbp, rbp);
    r.Set(unwind::kDwarfRbx, rbx);
    r.Set(12, r12);
    r.Set(13, r13);
    r.Set(14, r14);
    r.Set(15, r15);
    return r;
  }
};

// Where the main thread's stack ends (0 if /proc/self/maps has no [stack]).
inline uint64_t MainStackTop() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("[stack]") != std::string::npos) return std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
  }
  return 0;
}

}  // namespace tpe::testing

// The registers and up to `max_bytes` of stack at a point inside this function (its own frame is
// the leaf a sample would show: tpe_capture_stack). A file including this is compiled with
// -fomit-frame-pointer (src/unwind/CMakeLists.txt), so the capture keeps no frame pointer either.
// The copy reads the stack above this frame as the kernel does, redzones and all: not
// instrumented by AddressSanitizer, and word by word through a volatile pointer (no memcpy).
extern "C" inline __attribute__((noinline, no_sanitize("address"))) void tpe_capture_stack(
    tpe::testing::CapturedStack* c, size_t max_bytes) {
  uint64_t regs[8];
  asm volatile(
      "lea 0(%%rip), %%rax\n\t"
      "mov %%rax, 0(%0)\n\t"
      "mov %%rsp, 8(%0)\n\t"
      "mov %%rbp, 16(%0)\n\t"
      "mov %%rbx, 24(%0)\n\t"
      "mov %%r12, 32(%0)\n\t"
      "mov %%r13, 40(%0)\n\t"
      "mov %%r14, 48(%0)\n\t"
      "mov %%r15, 56(%0)\n\t"
      :
      : "r"(regs)
      : "rax", "memory");
  c->rip = regs[0], c->rsp = regs[1], c->rbp = regs[2], c->rbx = regs[3];
  c->r12 = regs[4], c->r13 = regs[5], c->r14 = regs[6], c->r15 = regs[7];
  const uint64_t top = tpe::testing::MainStackTop();
  const size_t n = top > c->rsp ? std::min<uint64_t>(top - c->rsp, max_bytes) : 0;
  c->stack.resize(n / 8 * 8);
  const volatile uint64_t* from = reinterpret_cast<const volatile uint64_t*>(c->rsp);
  uint8_t* to = c->stack.data();
  for (size_t i = 0; i < n / 8; ++i) {
    const uint64_t word = from[i];
    for (int b = 0; b < 8; ++b) to[i * 8 + static_cast<size_t>(b)] = static_cast<uint8_t>(word >> (8 * b));
  }
}
