// --list-events over a binary's probe points (list_events.h), on the ELF test binaries that
// src/elf/testdata builds (a PIE with USDT probes of known argument types).
#include "daemon/list_events.h"

#include <gtest/gtest.h>

#include <sstream>

namespace tpe {
namespace {

const Tracefs kNoTracefs("/nonexistent");  // probe listings never read tracefs

TEST(ListProbesTest, UsdtProbesWithTheirArgumentSpecs) {
  const std::string bin = TPE_ELF_TARGET_PIE;
  std::ostringstream out;
  Status st = ListEvents(kNoTracefs, "usdt:" + bin + ":tpe_elf_test:*", out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::string s = out.str();
  EXPECT_NE(s.find("usdt:" + bin + ":tpe_elf_test:three_args  offset=0x"), std::string::npos) << s;
  // STAP_PROBE3(tpe_elf_test, three_args, int, long, const char*): s32, s64, u64 (a pointer).
  EXPECT_NE(s.find("    arg0  -4@"), std::string::npos) << s;
  EXPECT_NE(s.find("  s32\n    arg1  -8@"), std::string::npos) << s;
  EXPECT_NE(s.find("  s64\n    arg2  8@"), std::string::npos) << s;
  // The name alone matches too.
  std::ostringstream by_name;
  ASSERT_TRUE(ListEvents(kNoTracefs, "usdt:" + bin + ":sizes", by_name).ok());
  EXPECT_NE(by_name.str().find(":tpe_elf_test:sizes"), std::string::npos) << by_name.str();
}

TEST(ListProbesTest, FunctionsAndErrors) {
  const std::string bin = TPE_ELF_TARGET_PIE;
  std::ostringstream out;
  ASSERT_TRUE(ListEvents(kNoTracefs, "uprobe:" + bin + ":tpe_elf_*_function", out).ok());
  EXPECT_NE(out.str().find("uprobe:" + bin + ":tpe_elf_target_function  offset=0x"), std::string::npos) << out.str();
  std::ostringstream none;
  Status st = ListEvents(kNoTracefs, "uprobe:" + bin + ":zzz*", none);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("nothing in " + bin + " matches \"zzz*\""), std::string::npos) << st.ToString();
  EXPECT_EQ(ListEvents(kNoTracefs, "usdt:/nonexistent/x:*", none).code(), StatusCode::kNotFound);
  EXPECT_EQ(ListEvents(kNoTracefs, "uprobe:relative:*", none).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ListEvents(kNoTracefs, "kprobe:do_*", none).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpe
