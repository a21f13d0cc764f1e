// The files probes depend on (plan/probes.h): /proc/PID/maps identities (which processes still
// run a replaced binary), <tracefs>/kprobe_profile (kretprobe misses), FileIdentity. Pure, no root.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "plan/probes.h"

namespace tpe {
namespace {

TEST(ProbeFilesTest, MapsIdentitiesAreMajorMinorInodeOfFileMappings) {
  // Captured from /proc/self/maps (6.18): a file mapping on 253:1, one on an overlay's upper
  // (0:37), the heap and the vdso (inode 0: skipped).
  const char* maps =
      "55d0c6a00000-55d0c6a02000 r--p 00000000 fd:01 1835106                    /usr/bin/cat\n"
      "55d0c6a02000-55d0c6a07000 r-xp 00002000 fd:01 1835106                    /usr/bin/cat\n"
      "55d0c7c1e000-55d0c7c3f000 rw-p 00000000 00:00 0                          [heap]\n"
      "7f1e2a400000-7f1e2a428000 r--p 00000000 00:25 131                        /lib/x86_64-linux-gnu/libc.so.6\n"
      "7ffd5e1f4000-7ffd5e1f6000 r-xp 00000000 00:00 0                          [vdso]\n"
      "garbage\n";
  EXPECT_EQ(ParseMapsIdentities(maps), (std::vector<std::string>{"253:1:1835106", "253:1:1835106", "0:37:131"}));
  EXPECT_TRUE(ParseMapsIdentities("").empty());
}

TEST(ProbeFilesTest, MappedIdentityIsWhatProcessMapsShowAndMappedFilesHaveIt) {
  const std::string path = ::testing::TempDir() + "/tpe_mapped_identity";
  std::ofstream(path) << std::string(8192, 'x');
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const std::string id = MappedIdentity(path);
  // On a plain file system the mapping shows the stat(2) device and inode.
  EXPECT_EQ(
      id, std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) + ":" + std::to_string(st.st_ino));
  EXPECT_EQ(FileIdentity(path), std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino));
  // Unmapped again: no process maps it (this one did only while it looked).
  EXPECT_EQ(MappedFilesNow().count(id), 0u);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void* addr = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(addr, MAP_FAILED);
  EXPECT_EQ(MappedFilesNow().count(id), 1u);
  ::munmap(addr, 4096);
  ::close(fd);
  EXPECT_EQ(MappedIdentity("/nonexistent/tpe"), "");
  EXPECT_EQ(FileIdentity("/nonexistent/tpe"), "");
  ::unlink(path.c_str());
}

TEST(ProbeFilesTest, KprobeProfileRows) {
  // "  %-44s %15lu %15lu" (kernel/trace/trace_kprobe.c probes_profile_seq_show), 5.10.
  const char* text =
      "  kr___x64_sys_nanosleep_0f3a2b1c                            2               6\n"
      "  k_do_nanosleep_12345678                                   20               0\n"
      "  truncated\n";
  auto rows = ParseKprobeProfile(text);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].event, "kr___x64_sys_nanosleep_0f3a2b1c");
  EXPECT_EQ(rows[0].hits, 2u);
  EXPECT_EQ(rows[0].misses, 6u);
  EXPECT_EQ(rows[1].event, "k_do_nanosleep_12345678");
  EXPECT_EQ(rows[1].hits, 20u);
  EXPECT_EQ(rows[1].misses, 0u);
}

TEST(ProbeFilesTest, EventNamesDifferByMaxactiveAndFile) {
  const ProbeRef ref = *ParseProbeRef("kretprobe:do_nanosleep");
  ProbeEventSpec spec;
  spec.kind = ProbeKind::kKretprobe;
  spec.symbol = "do_nanosleep";
  const std::string a = ProbeEventName(ref, spec);
  spec.maxactive = 2;
  EXPECT_NE(ProbeEventName(ref, spec), a);
  EXPECT_EQ(ProbeEventName(ref, spec).rfind("kr_do_nanosleep_", 0), 0u);
  EXPECT_NE(ProbeEventName(ref, spec, "8:1:12"), ProbeEventName(ref, spec, "8:1:13"));
}

}  // namespace
}  // namespace tpe
