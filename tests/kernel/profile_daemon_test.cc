// Kernel tier, profiles through the daemon's pipeline (issue 23): a "profiles" entry of the config
// on raw_syscalls:sys_enter (id == getppid) filtered on tests/triggers/stack_paths' pid, served as
// /debug/pprof/<name> would serve it (RenderProfile): folded stacks with exactly N1 and N2 per
// path, named from main to tpe_leaf and into the kernel; pprof protobuf with the same counts and
// the comm label; the profile off /metrics, its self-metrics on it.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <zlib.h>

#include <map>
#include <string>

#include "daemon/profiles.h"
#include "kernel/kernel_util.h"
#include "kernel/stack_paths_trigger.h"
#include "pprof/profile.pb.h"

namespace tpe {
namespace {

using testing::kPathA;
using testing::kPathB;

std::string Gunzip(const std::string& gz) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return "";
  std::string out(8 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  out.resize(rc == Z_STREAM_END ? z.total_out : 0);
  inflateEnd(&z);
  return out;
}

TEST(ProfileDaemonTest, ExactStacksServedAsFoldedAndPprof) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  testing::Trigger t;
  ASSERT_GT(t.pid(), 0);
  const std::string config = R"({"profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter",
      "filter": "common_pid == )" +
                             std::to_string(t.pid()) + " && id == " + std::to_string(SYS_getppid) + R"(",
      "labels": [{"name": "comm", "source": "comm"}]}]})";
  std::string folded, pprof;
  std::vector<MetricSnapshot> page;
  auto snap = testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    t.Go();
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      return testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}) >=
             kPathA + kPathB;
    }));
    folded = RenderProfile(pipeline, "getppid_stacks", "folded").body;
    HttpAnswer a = RenderProfile(pipeline, "getppid_stacks", "");
    EXPECT_EQ(a.status, 200u);
    EXPECT_EQ(a.content_type, "application/octet-stream");
    pprof = a.body;
    EXPECT_EQ(RenderProfile(pipeline, "nope", "").status, 404u);
    page = pipeline.Snapshot();
    t.Release();
  });
  // Folded: the user part from main to tpe_leaf per path, exactly; kernel frames below tpe_leaf.
  std::map<std::string, int64_t> paths;
  for (size_t at = 0; at < folded.size();) {
    const size_t nl = folded.find('\n', at);
    const std::string line = folded.substr(at, nl - at);
    at = nl + 1;
    const size_t sp = line.rfind(' '), m = line.find("main;"), leaf = line.find(";tpe_leaf;");
    ASSERT_TRUE(m != std::string::npos && leaf != std::string::npos) << line;
    paths[line.substr(m, leaf + 9 - m)] += std::stoll(line.substr(sp + 1));
    EXPECT_NE(line.find("do_syscall_64", leaf), std::string::npos) << line;
  }
  EXPECT_EQ(paths, (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", kPathA},
                                                   {"main;tpe_path_b;tpe_leaf", kPathB}}))
      << folded;
  // pprof: a perftools.profiles.Profile, gzip-compressed; samples add up, labelled by comm.
  perftools::profiles::Profile p;
  ASSERT_TRUE(p.ParseFromString(Gunzip(pprof)));
  ASSERT_EQ(p.sample_type_size(), 1);
  EXPECT_EQ(p.string_table(p.sample_type(0).type()), "samples");
  int64_t total = 0;
  for (const auto& s : p.sample()) {
    total += s.value(0);
    bool comm = false;
    for (const auto& l : s.label())
      comm |= p.string_table(l.key()) == "comm" && p.string_table(l.str()) == "tpe_stacks";
    EXPECT_TRUE(comm);
  }
  EXPECT_EQ(total, kPathA + kPathB);
  // Off /metrics; its self-metrics on it.
  for (const auto& m : page) EXPECT_NE(m.name, "getppid_stacks");
  EXPECT_EQ(testing::Value(page, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}),
            kPathA + kPathB);
  EXPECT_EQ(testing::Value(page, "tracepoint_exporter_profile_stacks", {{"profile", "getppid_stacks"}}), 2);
}

}  // namespace
}  // namespace tpe
