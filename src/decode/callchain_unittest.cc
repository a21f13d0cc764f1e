#include "decode/callchain.h"

#include <gtest/gtest.h>
#include <linux/perf_event.h>

namespace tpe {
namespace {

constexpr uint64_t M(int64_t v) { return static_cast<uint64_t>(v); }

TEST(CallchainTest, KernelThenUserFramesLeafFirst) {
  const std::vector<uint64_t> ips = {M(PERF_CONTEXT_KERNEL),
                                     0xffffffff81001000,
                                     0xffffffff81002000,
                                     M(PERF_CONTEXT_USER),
                                     0x401136,
                                     0x401180,
                                     0x4011c0};
  Callchain c;
  ASSERT_TRUE(SplitCallchain(ips, &c).ok());
  EXPECT_EQ(c.kernel, (std::vector<uint64_t>{0xffffffff81001000, 0xffffffff81002000}));
  EXPECT_EQ(c.user, (std::vector<uint64_t>{0x401136, 0x401180, 0x4011c0}));
  EXPECT_EQ(c.other, 0u);
}

TEST(CallchainTest, OnlyOnePartWhenTheOtherIsExcluded) {
  Callchain c;
  const std::vector<uint64_t> user_only = {M(PERF_CONTEXT_USER), 0x401136};
  ASSERT_TRUE(SplitCallchain(user_only, &c).ok());
  EXPECT_TRUE(c.kernel.empty());
  EXPECT_EQ(c.user.size(), 1u);
  const std::vector<uint64_t> empty;
  ASSERT_TRUE(SplitCallchain(empty, &c).ok());
  EXPECT_TRUE(c.user.empty());
}

TEST(CallchainTest, GuestAndHypervisorFramesAreCountedNotKept) {
  const std::vector<uint64_t> ips = {
      M(PERF_CONTEXT_HV), 0x1000, M(PERF_CONTEXT_GUEST_KERNEL), 0x2000, 0x3000, M(PERF_CONTEXT_KERNEL),
      0xffffffff81001000};
  Callchain c;
  ASSERT_TRUE(SplitCallchain(ips, &c).ok());
  EXPECT_EQ(c.other, 3u);
  EXPECT_EQ(c.kernel.size(), 1u);
}

TEST(CallchainTest, AFrameBeforeAnyMarkerIsRefused) {
  const std::vector<uint64_t> ips = {0x401136, M(PERF_CONTEXT_USER)};
  Callchain c;
  Status s = SplitCallchain(ips, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("entry 0"), std::string::npos) << s.message();
}

TEST(CallchainTest, AnUnknownMarkerIsRefusedByValue) {
  const std::vector<uint64_t> ips = {M(PERF_CONTEXT_KERNEL), M(-100)};
  Callchain c;
  Status s = SplitCallchain(ips, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-100"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tpe
