#include "profile/pprof_builder.h"

#include <gtest/gtest.h>
#include <zlib.h>

namespace tpe {
namespace {

std::string Gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

// Two stacks through a shared leaf, as a profile of getppid() from path_a and path_b would be.
PprofBuilder TwoPaths() {
  PprofBuilder b("samples", "count");
  const uint64_t exe = b.AddMapping({0x400000, 0x402000, 0, "/usr/bin/trigger", "abcd01"});
  const uint64_t kernel = b.AddMapping({0, ~0ull, 0, "[kernel.kallsyms]", ""});
  EXPECT_EQ(b.AddMapping({0x400000, 0x402000, 0, "/usr/bin/trigger", "abcd01"}), exe);
  const ProfileFrame sys{0xffffffff810a1c4b, kernel, "__x64_sys_getppid"};
  const ProfileFrame leaf{0x401136, exe, "leaf"};
  const ProfileFrame a{0x401180, exe, "path_a"}, bb{0x4011a0, exe, "path_b"};
  const ProfileFrame main_a{0x4011c0, exe, "main"}, main_b{0x4011d0, exe, "main"};
  const ProfileFrame unknown{0x7f0000001234, 0, ""};
  const std::vector<std::pair<std::string, std::string>> labels = {{"comm", "trigger"}};
  const std::vector<ProfileFrame> s1 = {sys, leaf, a, main_a}, s2 = {sys, leaf, bb, main_b}, s3 = {leaf, unknown};
  b.AddSample(s1, labels, 3000);
  b.AddSample(s2, labels, 1000);
  b.AddSample(s3, {}, 7);
  return b;
}

TEST(PprofBuilderTest, SharesLocationsFunctionsAndStrings) {
  PprofBuilder b = TwoPaths();
  const auto& p = b.profile();
  ASSERT_EQ(p.sample_type_size(), 1);
  EXPECT_EQ(p.string_table(0), "");
  EXPECT_EQ(p.string_table(p.sample_type(0).type()), "samples");
  EXPECT_EQ(p.string_table(p.sample_type(0).unit()), "count");
  EXPECT_EQ(p.string_table(p.period_type().type()), "samples");
  EXPECT_EQ(p.string_table(p.period_type().unit()), "count");
  EXPECT_EQ(p.period(), 1);
  EXPECT_EQ(p.mapping_size(), 2);
  EXPECT_EQ(p.location_size(), 7);  // sys, leaf, path_a, main@a, path_b, main@b, the unknown one
  EXPECT_EQ(p.function_size(), 5);  // __x64_sys_getppid, leaf, path_a, path_b, main
  ASSERT_EQ(p.sample_size(), 3);
  EXPECT_EQ(p.sample(0).value(0), 3000);
  ASSERT_EQ(p.sample(0).label_size(), 1);
  EXPECT_EQ(p.string_table(p.sample(0).label(0).key()), "comm");
  EXPECT_EQ(p.string_table(p.sample(0).label(0).str()), "trigger");
  // The shared leaf is one Location in both samples.
  EXPECT_EQ(p.sample(0).location_id(1), p.sample(1).location_id(1));
  EXPECT_NE(p.sample(0).location_id(2), p.sample(1).location_id(2));
}

TEST(PprofBuilderTest, GzippedRoundTrips) {
  PprofBuilder b = TwoPaths();
  auto gz = b.Gzipped();
  ASSERT_TRUE(gz.ok()) << gz.status().ToString();
  ASSERT_GE(gz->size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>((*gz)[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>((*gz)[1]), 0x8b);
  perftools::profiles::Profile back;
  ASSERT_TRUE(back.ParseFromString(Gunzip(*gz)));
  EXPECT_EQ(back.SerializeAsString(), b.profile().SerializeAsString());
}

TEST(PprofBuilderTest, FoldedStacksRootFirstWithUnsymbolizedFramesByAddress) {
  PprofBuilder b = TwoPaths();
  EXPECT_EQ(FoldedStacks(b.profile()),
            "0x7f0000001234;leaf 7\n"
            "main;path_a;leaf;__x64_sys_getppid 3000\n"
            "main;path_b;leaf;__x64_sys_getppid 1000\n");
}

}  // namespace
}  // namespace tpe
