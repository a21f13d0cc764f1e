// The perf feature probes and the fault seam: each old kernel's perf_event_open answer is
// injected (no kernel before 6.0 boots here), and the probe and OpenPerfEvent's message are
// checked. The injected calls never reach the kernel, so this needs no privilege.
#include "perf/perf_event.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace tpe {
namespace {

// Fails every perf_event_open whose attr has `read_format_bits` or `sample_type_bits` (or, with
// `no_inherit_thread`, attr.inherit_thread: before Linux 5.13 a reserved bit) with EINVAL, as
// perf_copy_attr() does for bits the kernel does not know; EACCES for the rest (the answer of a
// kernel with perf_event_paranoid 3), so that no call reaches this kernel.
class InjectedKernel {
 public:
  InjectedKernel(uint64_t read_format_bits, uint64_t sample_type_bits, bool no_inherit_thread = true) {
    SetPerfOpenFaultForTesting([=, this](const perf_event_attr& attr, int, int) {
      ++calls_;
      if ((attr.read_format & read_format_bits) || (attr.sample_type & sample_type_bits)) return EINVAL;
      if (no_inherit_thread && attr.inherit_thread) return EINVAL;
      return EACCES;
    });
  }
  ~InjectedKernel() { SetPerfOpenFaultForTesting(nullptr); }
  int calls() const { return calls_; }

 private:
  int calls_ = 0;
};

TEST(PerfFeaturesTest, Linux5_4HasNeitherFormatLostNorSampleCgroup) {  // 4.18 and 5.4 answer alike
  InjectedKernel k(PERF_FORMAT_LOST, PERF_SAMPLE_CGROUP);
  PerfFeatures f = DetectPerfFeatures();
  EXPECT_FALSE(f.format_lost);
  EXPECT_FALSE(f.sample_cgroup);
  EXPECT_FALSE(f.inherit_thread);
  EXPECT_EQ(k.calls(), 3);
}

TEST(PerfFeaturesTest, Linux5_10HasSampleCgroupButNotFormatLost) {  // 5.7 .. 5.19
  InjectedKernel k(PERF_FORMAT_LOST, 0);
  PerfFeatures f = DetectPerfFeatures();
  EXPECT_FALSE(f.format_lost);
  EXPECT_TRUE(f.sample_cgroup);  // EACCES: undecided, assumed present, and said so
  EXPECT_NE(f.probe_error.find("PERF_SAMPLE_CGROUP probe: Permission denied"), std::string::npos) << f.probe_error;
  EXPECT_FALSE(f.inherit_thread);
}

TEST(PerfFeaturesTest, Linux5_13HasInheritThread) {
  InjectedKernel k(PERF_FORMAT_LOST, 0, /*no_inherit_thread=*/false);
  EXPECT_TRUE(DetectPerfFeatures().inherit_thread);  // EACCES: assumed present
}

TEST(PerfFeaturesTest, InheritAttrs) {
  TracepointEventOptions o;
  o.tracepoint_id = 7;
  EXPECT_EQ(MakeTracepointAttr(o).inherit, 0u);
  o.inherit_thread = true;  // only with inherit
  EXPECT_EQ(MakeTracepointAttr(o).inherit_thread, 0u);
  o.inherit = true;
  EXPECT_EQ(MakeTracepointAttr(o).inherit, 1u);
  EXPECT_EQ(MakeTracepointAttr(o).inherit_thread, 1u);
}

TEST(PerfFeaturesTest, CallchainAttrs) {
  TracepointEventOptions o;
  o.tracepoint_id = 7;
  o.sampled = true;
  EXPECT_EQ(MakeTracepointAttr(o).sample_type & PERF_SAMPLE_CALLCHAIN, 0u);
  o.callchain_user = true;
  o.max_stack = 64;
  perf_event_attr a = MakeTracepointAttr(o);
  EXPECT_EQ(a.sample_type, kSampleType | PERF_SAMPLE_CALLCHAIN);
  EXPECT_EQ(a.exclude_callchain_kernel, 1u);
  EXPECT_EQ(a.exclude_callchain_user, 0u);
  EXPECT_EQ(a.sample_max_stack, 64u);
  o.callchain_kernel = true;
  o.cgroup = true;
  a = MakeTracepointAttr(o);
  EXPECT_EQ(a.sample_type, kSampleTypeCgroup | PERF_SAMPLE_CALLCHAIN);
  EXPECT_EQ(a.exclude_callchain_kernel, 0u);
  o.sampled = false;  // counting mode has no samples, so no stacks
  EXPECT_EQ(MakeTracepointAttr(o).sample_type, 0u);
}

// kernel.perf_event_max_stack as the sysctl file gives it; -1 when it cannot be read as a number.
TEST(PerfFeaturesTest, ReadsPerfEventMaxStack) {
  char path[] = "/tmp/tpe_max_stack_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::pair<const char*, int> cases[] = {{"127\n", 127}, {"16\n", 16},  {"0\n", 0},    {"4096", 4096},
                                               {"-1\n", -1},   {"abc\n", -1}, {"12x\n", -1}, {"", -1}};
  for (const auto& [text, want] : cases) {
    std::ofstream(path, std::ios::trunc) << text;
    EXPECT_EQ(ReadPerfEventMaxStack(path), want) << "\"" << text << "\"";
  }
  unlink(path);
  EXPECT_EQ(ReadPerfEventMaxStack(path), -1);
}

TEST(PerfFeaturesTest, WithoutFormatLostTheAttrsDropTheBit) {
  TracepointEventOptions o;
  o.tracepoint_id = 7;
  o.sampled = true;
  o.format_lost = false;
  EXPECT_EQ(MakeTracepointAttr(o).read_format, static_cast<uint64_t>(PERF_FORMAT_TOTAL_TIME_ENABLED));
  EXPECT_EQ(MakeRingOwnerAttr(true, 0, false).read_format, static_cast<uint64_t>(PERF_FORMAT_TOTAL_TIME_ENABLED));
  o.format_lost = true;
  EXPECT_EQ(MakeTracepointAttr(o).read_format,
            static_cast<uint64_t>(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_LOST));
}

TEST(PerfFeaturesTest, OpenPerfEventSaysWhichBitTheKernelRefused) {
  InjectedKernel k(PERF_FORMAT_LOST, PERF_SAMPLE_CGROUP);
  TracepointEventOptions o;
  o.tracepoint_id = 7;
  auto st = OpenPerfEvent(MakeTracepointAttr(o), 0);  // before: only "Invalid argument"
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("PERF_FORMAT_LOST, which needs Linux 6.0"), std::string::npos)
      << st.status().message();
  o.format_lost = false;
  o.sampled = true;
  o.cgroup = true;
  st = OpenPerfEvent(MakeTracepointAttr(o), 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("PERF_SAMPLE_CGROUP, which needs Linux 5.7"), std::string::npos)
      << st.status().message();
}

}  // namespace
}  // namespace tpe
