// Captured tracefs format files (tests/data/linux-6.18) for unit tests: parsed, with a test
// failure (not a crash) when one is missing or does not parse.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/file_util.h"
#include "format/event_format.h"
#include "testing/test_util.h"

namespace tpe::testing {

// The format file at `path`, parsed; an empty EventFormat (and a test failure) on error.
inline EventFormat LoadFormat(const std::string& path) {
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << path;
  auto f = ParseFormat(text.ok() ? *text : "", path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? *f : EventFormat{};
}

// The captured format of system:event from a Linux 6.18 tracefs.
inline EventFormat CapturedFormat(const std::string& system, const std::string& event) {
  return LoadFormat(DataDir() + "/linux-6.18/events/" + system + "/" + event + "/format");
}

}  // namespace tpe::testing
