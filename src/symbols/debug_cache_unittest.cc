// DwarfInfo's bound on the DWARF libdw reads into memory, and DebugCache's bound in bytes: this
// test binary (built with -g) is the DWARF file.
#include "symbols/debug_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/scoped_fd.h"

namespace tpe::symbols {
namespace {

std::shared_ptr<const DwarfInfo> SelfDwarf() {
  ScopedFd fd(::open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  auto dwarf = DwarfInfo::Open(fd.get(), "self", uint64_t{1} << 40);
  EXPECT_TRUE(dwarf.ok()) << dwarf.status().ToString();
  return dwarf.ok() ? std::move(dwarf).value() : nullptr;
}

TEST(DwarfInfoTest, DwarfOverTheBoundIsRefusedBeforeItIsRead) {
  auto whole = SelfDwarf();
  ASSERT_NE(whole, nullptr);
  const uint64_t bytes = whole->memory_bytes();
  EXPECT_GT(bytes, uint64_t{64} << 10) << "this test binary is built with -g";
  ScopedFd fd(::open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
  auto refused = DwarfInfo::Open(fd.get(), "self", bytes / 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("self: its DWARF holds"), std::string::npos) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("over the bound"), std::string::npos);
  EXPECT_TRUE(DwarfInfo::Open(fd.get(), "self", bytes).ok());
}

TEST(DebugCacheTest, BoundInBytesLetsTheLeastRecentGo) {
  auto dwarf = SelfDwarf();
  ASSERT_NE(dwarf, nullptr);
  auto entry = std::make_shared<DebugEntry>();
  entry->dwarf = dwarf;
  const uint64_t each = DebugCache::BytesOf(*entry);
  DebugCache cache(256, each * 5 / 2);  // room for two
  cache.Put("a", entry);
  cache.Put("b", entry);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * each);
  ASSERT_NE(cache.Find("a"), nullptr);  // "b" is now the least recent
  cache.Put("c", entry);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Find("b"), nullptr);
  EXPECT_NE(cache.Find("a"), nullptr);
  EXPECT_NE(cache.Find("c"), nullptr);
  EXPECT_EQ(cache.bytes(), 2 * each);
  // An entry over the bound alone is not kept (and pushes nothing out).
  DebugCache small(256, each - 1);
  small.Put("a", entry);
  EXPECT_EQ(small.size(), 0u);
  EXPECT_EQ(small.bytes(), 0u);
  // Put again under the same key replaces it.
  cache.Put("c", entry);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * each);
}

}  // namespace
}  // namespace tpe::symbols
