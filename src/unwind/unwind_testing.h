// Test-only helpers shared by the unwind table tests (unwind_table_unittest.cc,
// unwind_rows_unittest.cc) and the unwinder program tests (bpf/unwind_programs_unittest.cc):
// a file's CFI table read by path.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "unwind/cfi_table.h"

namespace tpe::testing {

// The CFI table of the file at `path`, or null (a failed expectation says why).
inline std::unique_ptr<unwind::CfiTable> ReadCfi(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return nullptr;
  auto t = unwind::CfiTable::Read(fd, path);
  ::close(fd);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

}  // namespace tpe::testing
