#include "profile/kallsyms.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace tpe {
namespace {

// Lines as /proc/kallsyms prints them (a 6.x kernel: data symbols, a module's tab-separated
// name), out of order on purpose.
constexpr char kListing[] =
    "ffffffff81000000 T _stext\n"
    "ffffffff810a1c40 T __x64_sys_getppid\n"
    "ffffffff810a1c80 t do_getppid_helper\n"
    "ffffffff82a00000 D some_data\n"
    "ffffffffc0a01000 t xfs_file_read_iter\t[xfs]\n"
    "ffffffff810a1cc0 W weak_fn\n"
    "ffffffffc0a02000 t xfs_end\t[xfs]\n";

TEST(KallsymsTest, NamesTheSymbolHoldingAnAddress) {
  auto t = Kallsyms::Parse(kListing);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->hidden());
  EXPECT_EQ(t->size(), 6u);  // the data symbol is not a frame
  auto hit = t->Lookup(0xffffffff810a1c4b);
  ASSERT_NE(hit.symbol, nullptr);
  EXPECT_EQ(hit.symbol->name, "__x64_sys_getppid");
  EXPECT_EQ(hit.offset, 0xbu);
  EXPECT_EQ(hit.symbol->module, "");
  hit = t->Lookup(0xffffffffc0a01010);
  ASSERT_NE(hit.symbol, nullptr);
  EXPECT_EQ(hit.symbol->name, "xfs_file_read_iter");
  EXPECT_EQ(hit.symbol->module, "xfs");
}

TEST(KallsymsTest, OutsideTheTableIsUnnamed) {
  auto t = Kallsyms::Parse(kListing);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Lookup(0x1000).symbol, nullptr);              // below the first symbol
  EXPECT_EQ(t->Lookup(0xffffffffc0a02010).symbol, nullptr);  // past the last start: no end known
  EXPECT_EQ(t->Lookup(0).symbol, nullptr);
}

TEST(KallsymsTest, AllZeroAddressesMeanHidden) {
  auto t = Kallsyms::Parse("0000000000000000 T _stext\n0000000000000000 t foo\t[xfs]\n");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->hidden());
  EXPECT_EQ(t->Lookup(0xffffffff81000010).symbol, nullptr);
}

TEST(KallsymsTest, AMalformedLineIsNamed) {
  auto t = Kallsyms::Parse("ffffffff81000000 T _stext\nnot a kallsyms line\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace tpe

namespace tpe {
namespace {

// The cache reads the file once, again when the table is older than max_age, and after a miss
// of a new address once it is older than min_age; a miss it already knew asks for nothing.
TEST(KallsymsCacheTest, ReadsOnceAndAgainWhenStaleOrMissing) {
  char path[] = "/tmp/tpe_kallsyms_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "ffffffff81000000 T _stext\nffffffff81001000 T do_one\nffffffff81002000 T end\n";
  KallsymsCache cache(path, /*max_age_ns=*/1000, /*min_age_ns=*/100, /*modules_path=*/std::string(path) + ".modules");
  auto t = cache.Get(1);
  EXPECT_EQ(t->size(), 3u);
  EXPECT_EQ(cache.Get(50).get(), t.get());
  EXPECT_EQ(cache.reads(), 1u);
  cache.MarkMissed({0xffffffffa0000000});  // a module loaded since
  EXPECT_EQ(cache.Get(60).get(), t.get()) << "younger than min_age";
  std::ofstream(path) << "ffffffff81000000 T _stext\nffffffffa0000000 t mod_fn\t[mod]\nffffffffa0001000 t x\t[mod]\n";
  auto t2 = cache.Get(200);
  EXPECT_EQ(cache.reads(), 2u);
  EXPECT_EQ(t2->Lookup(0xffffffffa0000010).symbol->module, "mod");
  cache.MarkMissed({0xffffffffb0000000});
  EXPECT_EQ(cache.Get(400).get(), cache.Get(400).get());
  EXPECT_EQ(cache.reads(), 3u);
  cache.MarkMissed({0xffffffffb0000000});  // still no symbol holds it: no more re-reads for it
  cache.Get(600);
  EXPECT_EQ(cache.reads(), 3u);
  cache.Get(1500);
  EXPECT_EQ(cache.reads(), 4u) << "older than max_age";
  cache.MarkMissed({0xffffffffb0000000});  // forgotten at the refresh for age: news again
  cache.Get(1700);
  EXPECT_EQ(cache.reads(), 5u);
  // A module loaded: read again at once.
  std::ofstream(std::string(path) + ".modules") << "xfs 1 0 - Live 0xffffffffc0a00000\n";
  cache.Get(1701);
  EXPECT_EQ(cache.reads(), 6u);
  cache.Get(1702);
  EXPECT_EQ(cache.reads(), 6u);
  unlink((std::string(path) + ".modules").c_str());
  unlink(path);
}

}  // namespace
}  // namespace tpe

namespace tpe {
namespace {

// A temporary file with `text`, removed at the end of the test.
class TempText {
 public:
  explicit TempText(const std::string& text) {
    char path[] = "/tmp/tpe_kallsyms_hidden_XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = path;
    std::ofstream(path_) << text;
  }
  ~TempText() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What a process without CAP_SYSLOG reads at kernel.kptr_restrict=1 (or 0 with
// perf_event_paranoid >= 2): every address 0. Older kernels list the per-CPU data symbols (type
// A, at 0 whatever the privilege) first; the first text symbol decides.
TEST(KallsymsHiddenTest, ZeroAddressesAreHidden) {
  TempText hidden(
      "0000000000000000 A fixed_percpu_data\n0000000000000000 A __per_cpu_start\n"
      "0000000000000000 T _stext\n0000000000000000 t xfs_end\t[xfs]\n");
  auto h = KallsymsHidden(hidden.path());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(*h);
  TempText shown(
      "0000000000000000 A fixed_percpu_data\n0000000000001000 A cpu_debug_store\n"
      "ffffffff81000000 T _stext\n");
  h = KallsymsHidden(shown.path());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_FALSE(*h);
  TempText no_text("0000000000000000 A fixed_percpu_data\n");
  h = KallsymsHidden(no_text.path());
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_NE(h.status().message().find("lists no kernel text symbol"), std::string::npos) << h.status().message();
  EXPECT_EQ(KallsymsHidden("/nonexistent/kallsyms").status().code(), StatusCode::kNotFound);
}

// The first text symbol past the first read (64 KiB), its line split between two reads.
TEST(KallsymsHiddenTest, FirstTextSymbolPastTheFirstRead) {
  std::string text;
  for (int i = 0; text.size() < 65536 - 10; ++i) text += "0000000000000000 A percpu_" + std::to_string(i) + "\n";
  text.resize(65536 - 10);  // cut a data line short...
  text += "\n";             // ...and end it: the text symbol's line straddles the 64 KiB mark
  TempText hidden(text + "0000000000000000 T _stext\n");
  auto h = KallsymsHidden(hidden.path());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(*h);
  TempText shown(text + "ffffffff81000000 T _stext\n");
  h = KallsymsHidden(shown.path());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_FALSE(*h);
}

// Once held, the file opened then is the one read, from its start, every time (the kernel
// decided at that open what the reader may see): a file put in its place later is not read.
TEST(KallsymsHiddenTest, HeldFileIsReadFromItsStartEachTime) {
  TempText held("ffffffff81000000 T _stext\nffffffff81001000 T do_one\nffffffff81002000 T end\n");
  ASSERT_TRUE(HoldKallsymsOpen(held.path()).ok());
  ASSERT_TRUE(HoldKallsymsOpen(held.path()).ok());  // once per path
  TempText zeroed("0000000000000000 T _stext\n");
  ASSERT_EQ(rename(zeroed.path().c_str(), held.path().c_str()), 0);  // replaces it under its path
  for (int i = 0; i < 2; ++i) {
    auto h = KallsymsHidden(held.path());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_FALSE(*h) << "read " << i;
    auto t = Kallsyms::Read(held.path());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->size(), 3u) << "read " << i;
    EXPECT_FALSE(t->hidden());
  }
  // Another path to it is not held: the file now there is read.
  const std::string other = "/tmp/./" + held.path().substr(held.path().rfind('/') + 1);
  auto h = KallsymsHidden(other);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(*h);
  EXPECT_EQ(HoldKallsymsOpen("/nonexistent/kallsyms").code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tpe
