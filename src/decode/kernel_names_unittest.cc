#include "decode/kernel_names.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "testing/test_util.h"

namespace tpe {
namespace {

const std::string kDir = testing::DataDir() + "/kernel_names";

TEST(KernelSymbolsTest, ResolvesExactOffsetAndBelowTheFirstSymbol) {
  auto syms = KernelSymbols::Load(kDir + "/kallsyms");
  ASSERT_TRUE(syms.ok()) << syms.status().ToString();
  EXPECT_EQ((*syms)->size(), 6u);  // the absolute symbol is skipped
  EXPECT_EQ((*syms)->Resolve(0xffffffff815be070), "vmstat_update");
  EXPECT_EQ((*syms)->Resolve(0xffffffff815be0a4), "vmstat_update+0x34");
  EXPECT_EQ((*syms)->Resolve(0xffffffff815be200), "vmstat_shepherd");
  // Two names at one address: the first in file order.
  EXPECT_EQ((*syms)->Resolve(0xffffffff81000000), "_stext");
  EXPECT_EQ((*syms)->Resolve(0xffffffff81000010), "_stext+0x10");
  // Module symbols lose their "\t[module]" suffix.
  EXPECT_EQ((*syms)->Resolve(0xffffffffc0a01008), "loop_queue_rq+0x8");
  // Below the first symbol (user-space pointers, NULL): the address.
  EXPECT_EQ((*syms)->Resolve(0x7fff12345678), "0x7fff12345678");
  EXPECT_EQ((*syms)->Resolve(0), "0x0");
  // Loaded once per path: the same shared table.
  auto again = KernelSymbols::Load(kDir + "/kallsyms");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), syms->get());
}

TEST(KernelSymbolsTest, AddressesHiddenByKptrRestrictFailWithTheFix) {
  auto syms = KernelSymbols::Load(kDir + "/kallsyms_restricted");
  ASSERT_FALSE(syms.ok());
  EXPECT_EQ(syms.status().code(), StatusCode::kPermissionDenied);
  const std::string m = syms.status().message();
  EXPECT_EQ(m.rfind(kDir + "/kallsyms_restricted lists every kernel symbol address as 0: kernel.kptr_restrict", 0), 0u)
      << m;
  EXPECT_NE(m.find("sysctl kernel.kptr_restrict=1"), std::string::npos) << m;
  EXPECT_NE(m.find("CAP_SYSLOG"), std::string::npos) << m;
}

TEST(KernelSymbolsTest, MissingOrEmptyFile) {
  auto missing = KernelSymbols::Load(kDir + "/no_such_kallsyms");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto empty = KernelSymbols::Parse("", "empty");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "empty has no symbols (expected lines \"<hex address> <type> <name>\")");
}

uint64_t KernelDev(uint64_t major, uint64_t minor) { return major << 20 | minor; }

TEST(BlockDevNamesTest, NamesFromUeventAndMajorMinorFallback) {
  BlockDevNames names(kDir + "/sys/dev/block");
  EXPECT_EQ(names.Name(KernelDev(7, 0)), "loop0");
  EXPECT_EQ(names.Name(KernelDev(259, 1)), "nvme0n1p1");
  EXPECT_EQ(names.Name(KernelDev(8, 17)), "8:17");  // no such disk
  EXPECT_EQ(names.Name(KernelDev(7, 0)), "loop0");  // cached
}

TEST(BlockDevNamesTest, ADiskAddedLaterGetsItsNameAfterTheRetryInterval) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tpe_blkdev_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  BlockDevNames names(dir.string(), std::chrono::milliseconds(50));
  EXPECT_EQ(names.Name(KernelDev(7, 3)), "7:3");
  std::filesystem::create_directories(dir / "7:3");
  std::ofstream(dir / "7:3" / "uevent") << "MAJOR=7\nMINOR=3\nDEVNAME=loop3\n";
  EXPECT_EQ(names.Name(KernelDev(7, 3)), "7:3");  // a miss is not re-read at once
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(names.Name(KernelDev(7, 3)), "loop3");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpe
