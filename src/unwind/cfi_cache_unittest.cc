// CfiCache: one read per file, a file changed or gone since a sample first used it is not read
// (its frames fall back to the frame pointer), and such a miss is remembered for retry_ns.
#include "unwind/cfi_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace tpe::unwind {
namespace {

namespace fs = std::filesystem;

// A copy of this test binary (it has .eh_frame) in a fresh directory, interned as a sample's
// file would be: by path, with the stat of now.
class CfiCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cfi_cache_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  FileId Copy(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    fs::copy_file("/proc/self/exe", path);
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0);
    MappedFile f;
    f.path = path;
    f.dev_major = major(st.st_dev);
    f.dev_minor = minor(st.st_dev);
    f.inode = st.st_ino;
    f.stat_known = true;
    f.size = static_cast<uint64_t>(st.st_size);
    f.mtime_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    return files_.Intern(f);
  }

  std::string dir_;
  MappedFiles files_;
};

TEST_F(CfiCacheTest, ReadsAFileOnceAndNotOneChangedOrGoneSince) {
  CfiCache cache(&files_);
  const FileId same = Copy("same"), changed = Copy("changed"), gone = Copy("gone");
  auto t1 = cache.Get(same, 1);
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(cache.Get(same, 2), t1) << "read once, then cached";

  // Overwritten in place (same inode, another size): not the file the samples ran in.
  std::ofstream(dir_ + "/changed", std::ios::app) << "more bytes";
  EXPECT_EQ(cache.Get(changed, 3), nullptr);
  fs::remove(dir_ + "/gone");
  EXPECT_EQ(cache.Get(gone, 4), nullptr);
  CfiCache::Stats s = cache.stats();
  EXPECT_EQ(s.reads, 1u);
  EXPECT_EQ(s.unreadable, 2u);
  EXPECT_EQ(s.files, 3u);
  EXPECT_GT(s.bytes, 0u);

  // A miss is not retried before retry_ns (10 s), then is.
  EXPECT_EQ(cache.Get(gone, 5'000'000'000), nullptr);
  EXPECT_EQ(cache.stats().unreadable, 2u);
  EXPECT_EQ(cache.Get(gone, 20'000'000'000), nullptr);
  EXPECT_EQ(cache.stats().unreadable, 3u);
}

TEST_F(CfiCacheTest, BoundedInFilesLeastRecentFirst) {
  CfiCache::Options o;
  o.max_files = 2;
  CfiCache cache(&files_, o);
  const FileId a = Copy("a"), b = Copy("b"), c = Copy("c");
  auto ta = cache.Get(a, 1);
  ASSERT_NE(ta, nullptr);
  ASSERT_NE(cache.Get(b, 2), nullptr);
  EXPECT_EQ(cache.Get(a, 3), ta);  // a is the most recent now
  ASSERT_NE(cache.Get(c, 4), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().files, 2u);
  EXPECT_EQ(cache.Get(a, 5), ta) << "b went, not a";
  EXPECT_EQ(cache.stats().reads, 3u);
}

// A SpanMemo keeps a process's spans and tables from one walk to the next while the images
// learnt nothing (the table stays held though the cache let it go: no second read), and lets them
// go when the images change or the spans are older than max_age_ns.
TEST_F(CfiCacheTest, SpanMemoHoldsWhileTheImagesLearntNothing) {
  const std::string path = dir_ + "/program";
  fs::copy_file("/proc/self/exe", path);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ProcessImages::Options io;
  io.proc_root = dir_ + "/no-proc";  // nothing there: the file is found by its path
  ProcessImages images(&files_, io);
  constexpr uint32_t kPid = 4242;
  images.OnExec(1, kPid);
  images.OnMmap(2, kPid, 0x400000, 0x100000, 0, major(st.st_dev), minor(st.st_dev), st.st_ino, PROT_READ | PROT_EXEC,
                path);
  CfiCache::Options co;
  co.proc_root = io.proc_root;
  co.max_files = 1;
  CfiCache tables(&files_, co);
  const FileId other = Copy("other");
  SpanMemo memo(/*max_age_ns=*/1'000'000'000);
  auto walk = [&](uint64_t now_ns) {
    ProcessCodeLookup lookup(&images, &tables, kPid, now_ns, &memo);
    return lookup.At(0x400010);
  };
  const CodeAt first = walk(10);
  ASSERT_NE(first.file, kNoFile);
  ASSERT_NE(first.cfi, nullptr);
  EXPECT_EQ(first.offset, 0x10u);
  EXPECT_EQ(tables.stats().reads, 1u);
  walk(11);                                   // the first walk marked the image sampled (a change): filled again
  ASSERT_NE(tables.Get(other, 12), nullptr);  // the program's table leaves the cache (1 file)
  EXPECT_EQ(tables.stats().reads, 2u);

  const uint64_t generation = images.generation();
  const CodeAt held = walk(13);
  EXPECT_EQ(held.file, first.file);
  EXPECT_EQ(held.cfi, walk(14).cfi);
  EXPECT_EQ(images.generation(), generation) << "nothing asked of the images";
  EXPECT_EQ(tables.stats().reads, 2u) << "the table held by the memo, not read again";

  // A mapping learnt anywhere: asked again (the cache reads the table again).
  images.OnMmap(20, kPid + 1, 0x400000, 0x1000, 0, 0, 0, 1, PROT_EXEC, "/elsewhere");
  EXPECT_NE(images.generation(), generation);
  EXPECT_NE(walk(21).cfi, nullptr);
  EXPECT_EQ(tables.stats().reads, 3u);
  ASSERT_NE(tables.Get(other, 22), nullptr);
  EXPECT_EQ(tables.stats().reads, 4u);
  walk(23);
  EXPECT_EQ(tables.stats().reads, 4u) << "held again";
  // Older than max_age_ns: asked again.
  EXPECT_NE(walk(21 + 1'000'000'000).cfi, nullptr);
  EXPECT_EQ(tables.stats().reads, 5u);
}

}  // namespace
}  // namespace tpe::unwind
