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

// A format file of event "synth" (ID 1) with the four common fields of every tracepoint (8 bytes)
// followed by `fields` (tracefs lines such as "\tfield:u32 x;\toffset:8;\tsize:4;\tsigned:0;\n")
// and an empty print fmt, parsed.
inline StatusOr<EventFormat> ParseSyntheticFormat(const std::string& fields) {
  return ParseFormat(
      "name: synth\nID: 1\nformat:\n"
      "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
      "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
      "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
      "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n" +
          fields + "\nprint fmt: \"\"\n",
      "synth");
}

}  // namespace tpe::testing
