// Kernel tier, profiles below the daemon: real callchains of a known program through
// the perf layer, the collector and the symbolizer. tests/triggers/stack_paths calls getppid()
// from main -> tpe_path_a -> tpe_leaf N1 times and main -> tpe_path_b -> tpe_leaf N2 times;
// sys_enter_getppid sampled with PERF_SAMPLE_CALLCHAIN and a filter on the trigger's pid must
// give exactly two user stacks with exactly N1 and N2, named leaf to main. A syscalls:* event
// carries the task's user registers (kernel/trace/trace_syscalls.c perf_syscall_enter), so the
// kernel unwinds no kernel frames for it; raw_syscalls:sys_enter (a TRACE_EVENT: the caller's
// kernel registers, perf_fetch_caller_regs) filtered on id == SYS_getppid has them, named
// through kallsyms, below tpe_leaf.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "collectors/profile.h"
#include "kernel/stack_paths_trigger.h"
#include "perf/perf_event.h"
#include "perf/ring_buffer.h"
#include "profile/renderer.h"
#include "testing/test_util.h"
#include "tracefs/tracefs.h"

namespace tpe {
namespace {

using testing::kPathA;
using testing::kPathB;
using testing::Trigger;

int NoProc(uint32_t, char*, size_t) { return -1; }

// Opens sys_enter_getppid on every CPU with callchains, filtered to `pid`, runs the trigger, and
// feeds every sample to `profile`.
void Sample(bool kernel_stacks, Trigger* t, ProfileCollector* profile) {
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok()) << tracefs.status().ToString();
  auto id = kernel_stacks ? tracefs->ReadId({"raw_syscalls", "sys_enter"})
                          : tracefs->ReadId({"syscalls", "sys_enter_getppid"});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  TracepointEventOptions o;
  o.tracepoint_id = *id;
  o.sampled = true;
  o.callchain_user = true;
  o.callchain_kernel = kernel_stacks;
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<ScopedFd> fds;
  std::vector<RingBuffer> rings;
  for (int cpu = 0; cpu < cpus; ++cpu) {
    auto fd = OpenPerfEvent(MakeTracepointAttr(o), cpu);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    std::string filter = "common_pid == " + std::to_string(t->pid());
    if (kernel_stacks) filter += " && id == " + std::to_string(SYS_getppid);
    ASSERT_TRUE(SetFilter(fd->get(), filter).ok()) << filter;
    auto ring = RingBuffer::Map(fd->get(), 256);  // 1 MiB per CPU: the whole run fits
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    ASSERT_TRUE(EnableEvent(fd->get()).ok());
    fds.push_back(std::move(fd).value());
    rings.push_back(std::move(ring).value());
  }
  t->Go();
  CommTable comms(NoProc);
  std::vector<uint8_t> scratch(kMaxRecordBytes);
  uint64_t lost = 0;
  for (RingBuffer& r : rings) {
    RingCursor cur = r.Cursor(r.LoadHead());
    RawRecord rec;
    while (cur.Next(&rec) == RingCursor::Result::kRecord) {
      if (rec.type == PERF_RECORD_LOST) ++lost;
      if (rec.type != PERF_RECORD_SAMPLE) continue;
      tpe::Sample s;
      ASSERT_TRUE(ParseSample(rec.bytes, &s, SampleLayout{.callchain = true}));
      profile->OnSample(0, s, &comms);
    }
    r.StoreTail(cur.position());
  }
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(profile->decode_errors(), 0u);
}

class ProfileStacksTest : public ::testing::TestWithParam<bool> {};

TEST_P(ProfileStacksTest, TwoPathsExactlyNamedLeafToMain) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const bool kernel_stacks = GetParam();
  Trigger t;
  ASSERT_GT(t.pid(), 0);
  ProfileCollector profile("getppid_stacks", "h", LabelSet(), 1000);
  // The trigger's mappings read from /proc at its first sample (the daemon learns them from
  // PERF_RECORD_MMAP2 as well).
  MappedFiles files;
  ProcessImages images(&files);
  profile.set_user_stacks(&images, nullptr);
  Sample(kernel_stacks, &t, &profile);
  auto kallsyms = Kallsyms::Read();
  ASSERT_TRUE(kallsyms.ok()) << kallsyms.status().ToString();
  Symbolizer sym(&files, std::make_shared<const Kallsyms>(std::move(kallsyms).value()));
  PprofBuilder b("samples", "count");
  AddStacks(profile.Stacks(), &sym, &b);
  t.Release();

  // Folded stacks: the user part, root first, must be exactly main;tpe_path_X;tpe_leaf.
  std::map<std::string, int64_t> user_paths;
  std::string folded = FoldedStacks(b.profile());
  size_t kernel_frames_below_leaf = 0;
  for (size_t at = 0; at < folded.size();) {
    const size_t nl = folded.find('\n', at);
    const std::string line = folded.substr(at, nl - at);
    at = nl + 1;
    const size_t sp = line.rfind(' ');
    const std::string stack = line.substr(0, sp);
    const int64_t n = std::stoll(line.substr(sp + 1));
    const size_t m = stack.find("main;");
    ASSERT_NE(m, std::string::npos) << line;
    const size_t leaf = stack.find("tpe_leaf");
    ASSERT_NE(leaf, std::string::npos) << line;
    user_paths[stack.substr(m, leaf + 8 - m)] += n;
    if (leaf + 8 < stack.size()) ++kernel_frames_below_leaf;
  }
  if (std::getenv("TPE_PRINT_FOLDED") != nullptr) std::printf("%s", folded.c_str());
  EXPECT_EQ(user_paths, (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", kPathA},
                                                        {"main;tpe_path_b;tpe_leaf", kPathB}}))
      << folded;
  if (kernel_stacks) {
    EXPECT_GT(kernel_frames_below_leaf, 0u) << "no kernel frames below tpe_leaf:\n" << folded;
    // The kernel's part is named through kallsyms (root reads real addresses).
    EXPECT_NE(folded.find("do_syscall_64"), std::string::npos) << folded;
  } else {
    EXPECT_EQ(kernel_frames_below_leaf, 0u) << folded;
  }
  // The trigger's mapping carries its build id (pprof servers find debug info by it).
  bool build_id = false;
  for (const auto& m : b.profile().mapping()) {
    if (b.profile().string_table(m.filename()) == TPE_STACK_PATHS) build_id = m.build_id() != 0;
  }
  EXPECT_TRUE(build_id);
}

INSTANTIATE_TEST_SUITE_P(Stacks, ProfileStacksTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "UserAndKernel" : "UserOnly"; });

}  // namespace
}  // namespace tpe
