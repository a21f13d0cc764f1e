#include "profile/elf_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>
#include <vector>

namespace tpe {
namespace {

std::shared_ptr<const elf::ElfFile> Load(const std::string& path) {
  auto f = elf::ElfFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::make_shared<const elf::ElfFile>(std::move(f).value()) : nullptr;
}

// This test binary: thousands of functions (gtest's), so memory_bytes() is well above an empty file's.
std::shared_ptr<const elf::ElfFile> Self() {
  static const auto self = Load("/proc/self/exe");
  return self;
}

TEST(ElfFileCacheTest, LeastRecentlyUsedGoesPastTheFileCount) {
  ElfFileCache::Options o;
  o.max_files = 2;
  ElfFileCache cache(o);
  const auto f = Self();
  ASSERT_NE(f, nullptr);
  cache.Put("a", f);
  cache.Put("b", f);
  EXPECT_EQ(cache.Find("a"), f);  // "b" is now the least recently used
  cache.Put("c", f);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Find("b"), nullptr);
  EXPECT_EQ(cache.Find("a"), f);
  EXPECT_EQ(cache.Find("c"), f);
  const auto s = cache.stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(cache.bytes(), 2 * f->memory_bytes());
}

// Bounded in bytes: room for two copies of the file, not three, whatever the count allows.
TEST(ElfFileCacheTest, BoundedByMemoryBytes) {
  const auto f = Self();
  ASSERT_NE(f, nullptr);
  ElfFileCache::Options o;
  o.max_files = 100;
  o.max_bytes = 2 * f->memory_bytes() + f->memory_bytes() / 2;
  ElfFileCache cache(o);
  cache.Put("a", f);
  cache.Put("b", f);
  cache.Put("c", f);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * f->memory_bytes());
  EXPECT_LE(cache.bytes(), o.max_bytes);
  EXPECT_EQ(cache.Find("a"), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1u);
  // Replacing a key counts its bytes once.
  cache.Put("c", f);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * f->memory_bytes());
}

// A file larger than the whole budget is not kept (nor does it empty the cache).
TEST(ElfFileCacheTest, AFileLargerThanTheBudgetIsNotKept) {
  const auto f = Self();
  ASSERT_NE(f, nullptr);
  ElfFileCache::Options o;
  o.max_bytes = f->memory_bytes() - 1;
  ElfFileCache cache(o);
  cache.Put("big", f);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.stats().not_kept, 1u);
  EXPECT_EQ(cache.Find("big"), nullptr);
}

// memory_bytes() grows with what a file holds: this binary (gtest, protobuf, the project) holds
// more than a small library, and at least its symbols' objects.
TEST(ElfFileCacheTest, MemoryBytesReflectsTheSymbols) {
  const auto self = Self();
  const auto libm = Load("/lib/x86_64-linux-gnu/libm.so.6");
  ASSERT_NE(self, nullptr);
  ASSERT_NE(libm, nullptr);
  const size_t functions = self->Symbols().size();
  EXPECT_GT(functions, 1000u);
  EXPECT_GE(self->memory_bytes(), functions * sizeof(elf::Symbol));
  EXPECT_GT(self->memory_bytes(), libm->memory_bytes());
  EXPECT_EQ(self->truncated_symbols(), 0u);
}

TEST(ElfFileCacheTest, KeyOfChangesWithSizeAndMtime) {
  struct stat a {};
  a.st_dev = 0xfe01;
  a.st_ino = 42;
  a.st_size = 1000;
  a.st_mtim = {7, 8};
  struct stat b = a;
  b.st_size = 1001;
  struct stat c = a;
  c.st_mtim.tv_nsec = 9;
  EXPECT_EQ(ElfFileCache::KeyOf(a), "65025:42:1000:7.8");
  EXPECT_NE(ElfFileCache::KeyOf(a), ElfFileCache::KeyOf(b));
  EXPECT_NE(ElfFileCache::KeyOf(a), ElfFileCache::KeyOf(c));
}

// Renders on several threads share the cache: the bounds hold and nothing is lost.
TEST(ElfFileCacheTest, ThreadSafe) {
  const auto f = Self();
  ASSERT_NE(f, nullptr);
  ElfFileCache::Options o;
  o.max_files = 3;
  ElfFileCache cache(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string key = std::to_string((i + t) % 5);
        if (cache.Find(key) == nullptr) cache.Put(key, f);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(cache.size(), 3u);
  EXPECT_EQ(cache.bytes(), cache.size() * f->memory_bytes());
  const auto s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, 2000u);
}

}  // namespace
}  // namespace tpe
