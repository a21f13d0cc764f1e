#include "collectors/profile.h"

#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "common/file_util.h"
#include "format/event_format.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

int NoProc(uint32_t, char*, size_t) { return -1; }

// Process images with no /proc behind them: what the records below say is all there is.
struct Images {
  MappedFiles files;
  ProcessImages images{&files, {.proc_root = "/nonexistent-proc"}};
  // `pid` exec'd `path` mapped at 0x400000 (1 MiB, file offset 0) at `time_ns`.
  void Exec(uint32_t pid, const std::string& path, uint64_t time_ns = 1) {
    images.OnExec(time_ns, pid);
    images.OnMmap(time_ns, pid, 0x400000, 0x100000, 0, 8, 1, 100 + path.size(), PROT_READ | PROT_EXEC, path);
  }
  std::string PathOf(const UserFrame& f) const {
    auto m = files.Get(f.file);
    return m ? m->path : "";
  }
};

// A sample's callchain as the kernel writes it: kernel frames after PERF_CONTEXT_KERNEL, user
// frames after PERF_CONTEXT_USER.
std::vector<uint8_t> Chain(const std::vector<uint64_t>& kernel, const std::vector<uint64_t>& user) {
  std::vector<uint64_t> ips;
  if (!kernel.empty()) ips.push_back(static_cast<uint64_t>(PERF_CONTEXT_KERNEL));
  ips.insert(ips.end(), kernel.begin(), kernel.end());
  if (!user.empty()) ips.push_back(static_cast<uint64_t>(PERF_CONTEXT_USER));
  ips.insert(ips.end(), user.begin(), user.end());
  std::vector<uint8_t> bytes(ips.size() * 8 + 1);  // +1: parsed from an odd address below
  if (!ips.empty()) std::memcpy(bytes.data() + 1, ips.data(), ips.size() * 8);
  return bytes;
}

void Feed(ProfileCollector* p, CommTable* comms, uint32_t pid, const std::vector<uint8_t>& chain, int times) {
  Sample s;
  s.pid = s.tid = pid;
  s.callchain = Bytes(chain.data() + 1, chain.size() - 1);  // not 8-byte aligned, as in a ring
  for (int i = 0; i < times; ++i) p->OnSample(0, s, comms);
}

TEST(ProfileCollectorTest, CountsEachStackExactlyPerProcess) {
  LabelSpec comm;
  comm.name = "comm";
  comm.source = LabelSource::kComm;
  std::vector<LabelSpec> specs;
  specs.push_back(std::move(comm));
  ProfileCollector p("getppid_stacks", "h", LabelSet(std::move(specs)), 100);
  Images im;
  im.Exec(10, "/usr/bin/app");
  im.Exec(11, "/usr/bin/app");
  p.set_user_stacks(&im.images, nullptr);
  CommTable comms(NoProc);
  comms.OnComm(10, "tpe_stacks");
  const auto a = Chain({0xffffffff810a1c4b}, {0x401136, 0x401180, 0x4011c0});
  const auto b = Chain({0xffffffff810a1c4b}, {0x401136, 0x4011a0, 0x4011d0});
  Feed(&p, &comms, 10, a, 3000);
  Feed(&p, &comms, 10, b, 1000);
  Feed(&p, &comms, 11, a, 5);                             // another process: its own series (its own mappings)
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> got;  // (pid, user[1] offset) -> count
  for (const StackCount& sc : p.Stacks()) {
    ASSERT_EQ(sc.kernel, (std::vector<uint64_t>{0xffffffff810a1c4b}));
    ASSERT_EQ(sc.user_frames.size(), 3u);
    EXPECT_TRUE(sc.user.empty()) << "normalized at sample time";
    EXPECT_EQ(sc.user_frames[0].offset, 0x1136u);
    EXPECT_EQ(im.PathOf(sc.user_frames[0]), "/usr/bin/app");
    if (sc.pid == 10) {
      ASSERT_EQ(sc.labels.size(), 1u);
      EXPECT_EQ(sc.labels[0].second, "tpe_stacks");
    }
    got[{sc.pid, sc.user_frames[1].offset}] = sc.value;
  }
  EXPECT_EQ(got, (std::map<std::pair<uint32_t, uint64_t>, uint64_t>{
                     {{10, 0x1180}, 3000}, {{10, 0x11a0}, 1000}, {{11, 0x1180}, 5}}));
  EXPECT_EQ(p.EngineStats()[0].value, 4005);
}

TEST(ProfileCollectorTest, StacksSinceIsWhatEachSeriesGained) {
  ProfileCollector p("s", "h", LabelSet(), 100);
  ProfileCollector other("s", "h", LabelSet(), 100);
  EXPECT_NE(p.instance(), other.instance());
  Images im;
  im.Exec(10, "/usr/bin/app");
  im.Exec(11, "/usr/bin/app");
  p.set_user_stacks(&im.images, nullptr);
  CommTable comms(NoProc);
  const auto a = Chain({0xffffffff810a1c4b}, {0x401136, 0x401180});
  const auto b = Chain({0xffffffff810a1c4b}, {0x401136, 0x4011a0});
  const auto k = Chain({0xffffffff810a1c4b}, {});  // kernel only: user frames empty
  Feed(&p, &comms, 10, a, 3000);
  Feed(&p, &comms, 10, b, 7);
  Feed(&p, &comms, 10, k, 2);
  const std::vector<StackCount> before = p.Stacks();
  const auto baseline = p.Baseline();                   // the collector's: values by series key
  const auto generic = p.StackProfile::Baseline();      // StackProfile's default: the stacks
  Feed(&p, &comms, 10, a, 300);                         // grows
  Feed(&p, &comms, 11, a, 4);                           // same frames, another process: new
  Feed(&p, &comms, 10, k, 1);                           // grows
  std::map<std::pair<uint32_t, size_t>, uint64_t> got;  // (pid, user frames) -> gained
  uint64_t b_seen = 0;
  for (const StackCount& sc : StacksSince(before, p.Stacks())) {
    if (!sc.user_frames.empty() && sc.user_frames[1].offset == 0x11a0) b_seen += sc.value;
    got[{sc.pid, sc.user_frames.size()}] += sc.value;
  }
  EXPECT_EQ(b_seen, 0u) << "a series that did not grow is left out";
  EXPECT_EQ(got, (std::map<std::pair<uint32_t, size_t>, uint64_t>{{{10, 2}, 300}, {{11, 2}, 4}, {{10, 0}, 1}}));
  EXPECT_TRUE(StacksSince(p.Stacks(), p.Stacks()).empty());
  EXPECT_EQ(StacksSince({}, p.Stacks()).size(), 4u);
  // A window from a baseline (only the series that grew decoded) is the same, series for series,
  // through the collector's baseline and through StackProfile's default.
  auto flat = [](const std::vector<StackCount>& stacks) {
    std::vector<std::tuple<uint32_t, std::vector<uint64_t>, std::vector<uint64_t>, uint64_t>> out;
    for (const StackCount& sc : stacks) {
      std::vector<uint64_t> user;
      for (const UserFrame& f : sc.user_frames) user.push_back(f.offset);
      out.emplace_back(sc.pid, sc.kernel, user, sc.value);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto expected = flat(StacksSince(before, p.Stacks()));
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(flat(p.StacksSince(*baseline)), expected);
  EXPECT_EQ(flat(p.StackProfile::StacksSince(*generic)), expected);
  EXPECT_TRUE(p.StacksSince(*p.Baseline()).empty());
  // A baseline of no series (taken before any sample): every series gained all it holds.
  EXPECT_EQ(p.StacksSince(*other.Baseline()).size(), 4u);
}

TEST(ProfileCollectorTest, FullTableDropsAndCountsBadChainsAreDecodeErrors) {
  ProfileCollector p("s", "h", LabelSet(), 2);
  Images im;
  im.Exec(1, "/usr/bin/app");
  p.set_user_stacks(&im.images, nullptr);
  CommTable comms(NoProc);
  for (uint64_t i = 0; i < 5; ++i) Feed(&p, &comms, 1, Chain({}, {0x401000 + i}), 2);
  EXPECT_EQ(p.Stacks().size(), 2u);
  EXPECT_EQ(p.series_dropped(), 6u);
  std::vector<uint8_t> bad(9);  // one frame before any context marker
  const uint64_t ip = 0x401136;
  std::memcpy(bad.data() + 1, &ip, 8);
  Feed(&p, &comms, 1, bad, 1);
  EXPECT_EQ(p.decode_errors(), 1u);
}

TEST(ProfileCollectorTest, KernelOnlyAndEmptyChainsAreStacksToo) {
  ProfileCollector p("s", "h", LabelSet(), 10);
  CommTable comms(NoProc);
  Feed(&p, &comms, 1, Chain({0xffffffff81000010, 0xffffffff81000020}, {}), 4);
  Feed(&p, &comms, 1, Chain({}, {}), 2);
  auto stacks = p.Stacks();
  ASSERT_EQ(stacks.size(), 2u);
  uint64_t total = 0;
  for (const auto& sc : stacks) {
    EXPECT_TRUE(sc.user_frames.empty());
    total += sc.value;
  }
  EXPECT_EQ(total, 6u);
}

// A stack belongs to its time: the same addresses before and after an exec are two programs'
// code, and an exited process or a pid reused later do not rename the frames taken before.
TEST(ProfileCollectorTest, FramesAreNamedWithTheMappingsOfTheirTime) {
  ProfileCollector p("s", "h", LabelSet(), 10);
  Images im;
  p.set_user_stacks(&im.images, nullptr);
  CommTable comms(NoProc);
  const auto chain = Chain({}, {0x401136, 0x401180});
  im.Exec(10, "/usr/bin/before", 1);
  Feed(&p, &comms, 10, chain, 3000);
  im.Exec(10, "/usr/bin/after", 2);
  Feed(&p, &comms, 10, chain, 7);
  im.images.OnExit(3, 10, 10);
  im.Exec(10, "/usr/bin/reused", 4);  // the pid, reused
  std::map<std::string, uint64_t> got;
  for (const StackCount& sc : p.Stacks()) {
    ASSERT_EQ(sc.user_frames.size(), 2u);
    EXPECT_EQ(sc.user_frames[0].offset, 0x1136u);
    got[im.PathOf(sc.user_frames[0])] += sc.value;
  }
  EXPECT_EQ(got, (std::map<std::string, uint64_t>{{"/usr/bin/before", 3000}, {"/usr/bin/after", 7}}));
}

// The kernel reports pid 0 for every task outside the daemon's pid namespace (and leaves the idle
// task out itself, attr.exclude_idle): a CPU profile keeps those samples, their user frames in no
// known mapping.
TEST(ProfileCollectorTest, ClockSamplesOfTasksOutsideOurPidNamespaceAreKept) {
  ProfileCollector p("cpu", "h", LabelSet(), 10, std::nullopt, 1, ClockWeight{});
  Images im;
  p.set_user_stacks(&im.images, nullptr);
  CommTable comms(NoProc);
  Sample s;
  s.pid = s.tid = 0;
  s.period = 10'000'000;
  const auto chain = Chain({0xffffffff81000010}, {0x401136});
  s.callchain = Bytes(chain.data() + 1, chain.size() - 1);
  for (int i = 0; i < 5; ++i) p.OnSample(0, s, &comms);
  auto stacks = p.Stacks();
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].value, 5u * 10'000'000);
  ASSERT_EQ(stacks[0].user_frames.size(), 1u);
  EXPECT_EQ(stacks[0].user_frames[0].file, kNoFile);
}

// A value profile's sum of a field any user sets (write()'s count) saturates, never wraps: 1000
// then one write of 18446744073709551000 is 2^64 - 1, not 384.
TEST(ProfileCollectorTest, ValueSumsSaturateNeverWrap) {
  EventFormat f =
      *ParseFormat(*ReadFileToString(testing::DataDir() + "/linux-6.18/events/syscalls/sys_enter_write/format"), "x");
  ProfileCollector p("write_bytes", "h", LabelSet(), 10,
                     *FieldExtractor::Compile(*f.FindField("count"), LabelDecode::kAuto, nullptr), 1);
  CommTable comms(NoProc);
  std::vector<uint8_t> raw(40, 0);
  const auto chain = Chain({0xffffffff81000010}, {});
  Sample s;
  s.raw = Bytes(raw);
  s.callchain = Bytes(chain.data() + 1, chain.size() - 1);
  auto write = [&](uint64_t count) {
    std::memcpy(&raw[32], &count, 8);
    p.OnSample(0, s, &comms);
  };
  for (int i = 0; i < 1000; ++i) write(1);
  ASSERT_EQ(p.Stacks().size(), 1u);
  EXPECT_EQ(p.Stacks()[0].value, 1000u);
  write(18446744073709551000ULL);
  EXPECT_EQ(p.Stacks()[0].value, ~uint64_t{0});
}

}  // namespace
}  // namespace tpe
