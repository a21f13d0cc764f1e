// Helpers shared by the libFuzzer targets in this folder.
//
// Targets read the captured format files from the source tree (TPE_TEST_DATA, set by
// fuzz/CMakeLists.txt) once, in LLVMFuzzerInitialize or a function-local static, and check
// invariants with TPE_FUZZ_CHECK, which prints what broke and traps so libFuzzer saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "format/event_format.h"

// Stops the run with a message when `cond` is false: libFuzzer reports it as a crash.
#define TPE_FUZZ_CHECK(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
      __builtin_trap();                                                             \
    }                                                                               \
  } while (0)

namespace tpe::fuzz {

// The text of tests/data/<rel>; exits when it is missing (a broken checkout, not a finding).
inline std::string ReadTestData(const std::string& rel) {
  auto text = ReadFileToString(std::string(TPE_TEST_DATA) + "/" + rel);
  if (!text.ok()) {
    std::fprintf(stderr, "fuzz: cannot read test data: %s\n", text.status().ToString().c_str());
    std::exit(2);
  }
  return *text;
}

// A captured format file under tests/data, parsed; exits when it does not parse.
inline EventFormat LoadFormat(const std::string& rel) {
  auto f = ParseFormat(ReadTestData(rel), rel);
  if (!f.ok()) {
    std::fprintf(stderr, "fuzz: %s\n", f.status().ToString().c_str());
    std::exit(2);
  }
  return *f;
}

}  // namespace tpe::fuzz
