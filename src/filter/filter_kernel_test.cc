// Kernel tier: EvaluateFilter against the running kernel's own filter, event by event.
//
// For random string predicates on a __data_loc string (sched:sched_process_exec filename: this
// test execs /bin/true through symlinks with random names) and on a NUL-padded char[16]
// (task:task_newtask comm: a child names itself with prctl(PR_SET_NAME) and forks), the filter is
// written to a private tracefs instance, the events are triggered, and the set of events the
// kernel kept must be exactly the set EvaluateFilter keeps on the same field contents. Also
// checks that ParseFilter accepts what the kernel accepts for a list of sched_switch filters.
// Needs root (tracefs instances); skips without it unless TPE_REQUIRE_KERNEL=1.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "filter/filter.h"
#include "testing/test_util.h"
#include "tracefs/tracefs.h"

namespace tpe {
namespace {

// The running kernel's version is at least major.minor (uname -r).
bool KernelAtLeast(int major, int minor) {
  utsname u{};
  int ma = 0, mi = 0;
  if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return true;
  return ma > major || (ma == major && mi >= minor);
}

// Debian's 6.1 (the kernel matrix) matches a glob class "[!...]" against the end of the string
// ("xbb" ~ "xbb[!b]*"), where 6.12 and 6.18, and src/filter, do not. Globs run on the perf engine
// only (the kernel decides), so on such kernels patterns with "[!" are left out of the
// comparison.
bool KernelGlobsClassesAtTheEnd() { return !KernelAtLeast(6, 12); }

// A private tracefs instance with one event, removed at the end.
class Instance {
 public:
  Instance(const std::string& root, const std::string& event) : event_(event) {
    dir_ = root + "/instances/tpe_filter_test_" + std::to_string(::getpid());
    ok_ = ::mkdir(dir_.c_str(), 0700) == 0;
  }
  ~Instance() {
    if (!ok_) return;
    (void)WriteStringToFile(dir_ + "/events/" + event_ + "/enable", "0");
    (void)WriteStringToFile(dir_ + "/events/" + event_ + "/filter", "0");
    ::rmdir(dir_.c_str());
  }
  bool ok() const { return ok_; }
  bool SetFilter(const std::string& f) { return WriteStringToFile(dir_ + "/events/" + event_ + "/filter", f).ok(); }
  // Clears the buffer, runs `trigger` with the event enabled, returns the trace lines.
  template <typename F>
  std::vector<std::string> Record(F trigger) {
    EXPECT_TRUE(WriteStringToFile(dir_ + "/trace", "").ok());
    EXPECT_TRUE(WriteStringToFile(dir_ + "/events/" + event_ + "/enable", "1").ok());
    trigger();
    EXPECT_TRUE(WriteStringToFile(dir_ + "/events/" + event_ + "/enable", "0").ok());
    std::vector<std::string> lines;
    std::istringstream in(ReadFileToString(dir_ + "/trace").value());
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] != '#') lines.push_back(line);
    }
    return lines;
  }

 private:
  std::string event_;
  std::string dir_;
  bool ok_ = false;
};

class FilterKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPE_REQUIRE_KERNEL_OR_SKIP();
    auto t = Tracefs::Discover("auto");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    root_ = t->root();
    if (::geteuid() != 0) {
      if (testing::KernelRequired()) FAIL() << "TPE_REQUIRE_KERNEL=1: tracefs instances need root";
      GTEST_SKIP() << "tracefs instances need root";
    }
  }
  EventFormat Format(const std::string& event) {
    auto f = ParseFormat(ReadFileToString(root_ + "/events/" + event + "/format").value(), event);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? *f : EventFormat{};
  }
  std::string root_;
};

// Random text: mostly plain characters, with the ones that matter to the kernel's matchers
// (* ? [ ] ! \\) mixed in.
std::string RandomText(std::mt19937* rng, size_t min, size_t max) {
  static const std::string kPlain = "ab1-", kSpecial = "*?[]!\\";
  std::string s;
  size_t n = min + (*rng)() % (max - min + 1);
  for (size_t i = 0; i < n; ++i) {
    s += (*rng)() % 5 ? kPlain[(*rng)() % kPlain.size()] : kSpecial[(*rng)() % kSpecial.size()];
  }
  return s;
}

std::string Op(std::mt19937* rng) {
  static const char* kOps[] = {"==", "!=", "~", "~", "~"};
  return kOps[(*rng)() % 5];
}

// A pattern for `op` against `names`: often built from one of them (so it matches now and then),
// in every shape the kernel distinguishes: full, "x*", "*x", "*x*", globs, a leading '!'.
std::string Pattern(std::mt19937* rng, const std::string& op, const std::vector<std::string>& names,
                    const std::string& prefix) {
  const std::string& name = names[(*rng)() % names.size()];
  if (op != "~") return (*rng)() % 2 ? prefix + name : prefix + RandomText(rng, 1, 5);
  std::string p;
  size_t cut = (*rng)() % (name.size() + 1);
  switch ((*rng)() % 6) {
    case 0:
      p = prefix + name;
      break;
    case 1:
      p = prefix + name.substr(0, cut) + "*";
      break;
    case 2:
      p = "*" + name.substr(cut);
      break;
    case 3:
      p = "*" + name.substr(cut, 3) + "*";
      break;
    case 4:
      p = RandomText(rng, 0, 6);
      break;
    default:
      p = prefix + name.substr(0, cut) + ((*rng)() % 2 ? "[!" : "[") + RandomText(rng, 1, 3) + "]*";
      break;
  }
  if ((*rng)() % 5 == 0) p = "!" + p;
  return p;
}

TEST_F(FilterKernelTest, DataLocStringDecisionsMatchTheKernel) {
  const std::string event = "sched/sched_process_exec";
  EventFormat format = Format(event);
  const FieldFormat* filename = format.FindField("filename");
  ASSERT_NE(filename, nullptr);
  Instance inst(root_, event);
  ASSERT_TRUE(inst.ok());
  char tmpl[] = "/tmp/tpe_filter_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::mt19937 rng(20251);
  int kept_somewhere = 0;
  for (int round = 0; round < testing::ScaledForGuest(80); ++round) {
    std::vector<std::string> paths;
    for (int i = 0; i < 6; ++i) {
      std::string p = dir + "/x" + RandomText(&rng, 0, 6);
      ::unlink(p.c_str());
      ASSERT_EQ(::symlink("/bin/true", p.c_str()), 0) << p;
      paths.push_back(p);
    }
    std::vector<std::string> names;
    for (const auto& p : paths) names.push_back(p.substr(dir.size() + 1));
    const std::string op = Op(&rng);
    const std::string pattern = Pattern(&rng, op, names, dir + "/");
    if (KernelGlobsClassesAtTheEnd() && pattern.find("[!") != std::string::npos) continue;
    const std::string filter = "filename " + op + " \"" + pattern + "\"";
    SCOPED_TRACE(filter);
    auto e = ParseFilter(filter, format);
    ASSERT_EQ(e.ok(), inst.SetFilter(filter)) << (e.ok() ? "" : e.status().message());
    if (!e.ok()) continue;

    auto lines = inst.Record([&] {
      for (const auto& p : paths) {
        pid_t pid = ::fork();
        if (pid == 0) {
          ::execl(p.c_str(), p.c_str(), static_cast<char*>(nullptr));
          ::_exit(127);
        }
        ::waitpid(pid, nullptr, 0);
      }
    });
    std::multiset<std::string> kernel, ours;
    for (const auto& line : lines) {
      size_t a = line.find("filename=" + dir + "/");
      if (a == std::string::npos) continue;  // someone else's exec
      size_t b = line.find(" pid=", a);
      kernel.insert(line.substr(a + 9, b - a - 9));
    }
    for (const auto& p : paths) {
      // The record as the kernel lays it out: filename's text right after the fixed fields.
      std::vector<uint8_t> rec(64 + p.size() + 1, 0);
      uint32_t loc = static_cast<uint32_t>((p.size() + 1) << 16 | 64);
      std::memcpy(rec.data() + filename->offset, &loc, sizeof(loc));
      std::memcpy(rec.data() + 64, p.c_str(), p.size() + 1);
      if (EvaluateFilter(*e, Bytes(rec), {})) ours.insert(p);
    }
    EXPECT_EQ(kernel, ours);
    kept_somewhere += !kernel.empty();
  }
  EXPECT_GT(kept_somewhere, 5);  // the patterns matched something now and then
  std::string cmd = "rm -rf " + dir;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST_F(FilterKernelTest, CharArrayDecisionsMatchTheKernel) {
  const std::string event = "task/task_newtask";
  EventFormat format = Format(event);
  const FieldFormat* comm = format.FindField("comm");
  ASSERT_NE(comm, nullptr);
  Instance inst(root_, event);
  ASSERT_TRUE(inst.ok());
  std::mt19937 rng(1709);
  int kept_somewhere = 0;
  for (int round = 0; round < testing::ScaledForGuest(80); ++round) {
    std::vector<std::string> names;
    for (int i = 0; i < 6; ++i) names.push_back("q" + RandomText(&rng, 0, 14));  // up to 15 characters
    const std::string op = Op(&rng);
    const std::string pattern = Pattern(&rng, op, names, "");
    if (KernelGlobsClassesAtTheEnd() && pattern.find("[!") != std::string::npos) continue;
    const std::string filter = "comm " + op + " \"" + pattern + "\"";
    SCOPED_TRACE(filter);
    auto e = ParseFilter(filter, format);
    ASSERT_EQ(e.ok(), inst.SetFilter(filter)) << (e.ok() ? "" : e.status().message());
    if (!e.ok()) continue;

    auto lines = inst.Record([&] {
      for (const auto& n : names) {
        pid_t pid = ::fork();
        if (pid == 0) {
          ::prctl(PR_SET_NAME, n.c_str());
          pid_t child = ::fork();  // task_newtask: comm is the (renamed) parent's
          if (child == 0) ::_exit(0);
          ::waitpid(child, nullptr, 0);
          ::_exit(0);
        }
        ::waitpid(pid, nullptr, 0);
      }
    });
    std::multiset<std::string> kernel, ours;
    for (const auto& line : lines) {
      size_t a = line.find(" comm=q");
      if (a == std::string::npos) continue;
      size_t b = line.find(" clone_flags=", a);
      kernel.insert(line.substr(a + 6, b - a - 6));
    }
    for (const auto& n : names) {
      std::vector<uint8_t> rec(64, 0);  // the kernel copies the NUL-padded TASK_COMM_LEN array
      std::memcpy(rec.data() + comm->offset, n.data(), n.size());
      if (EvaluateFilter(*e, Bytes(rec), {})) ours.insert(n);
    }
    EXPECT_EQ(kernel, ours);
    kept_somewhere += !kernel.empty();
  }
  EXPECT_GT(kept_somewhere, 5);
}

TEST_F(FilterKernelTest, AcceptsWhatTheKernelAccepts) {
  const std::string event = "sched/sched_switch";
  EventFormat format = Format(event);
  Instance inst(root_, event);
  ASSERT_TRUE(inst.ok());
  const std::vector<std::string> filters = {"prev_pid == 1",
                                            "prev_pid == 0x10 && next_pid != 010",
                                            "prev_pid == -1",
                                            "prev_state & 3",
                                            "prev_comm ~ \"sw*\"",
                                            "prev_comm == 'x'",
                                            "COMM == \"bash\"",
                                            "CPU == 1",
                                            "common_pid >= 1",
                                            "!prev_pid == 1 || !(next_pid < 2) && prev_prio > 100",
                                            "prev_comm ~ \"[ab]?*\"",
                                            "CPU & CPUS{0}",
                                            "prev_pid == 1a",
                                            "prev_comm == x",
                                            "prev_pid ~ 1",
                                            "prev_comm < \"a\"",
                                            "nope == 1",
                                            "(prev_pid == 1",
                                            "prev_pid == 1)",
                                            "common_type == -1",
                                            "prev_pid == 08",
                                            "prev_comm == \"a",
                                            "prev_pid == 1 & next_pid == 2",
                                            "prev_pid === 1",
                                            "prev_pid == " + std::string(22, '0') + "1"};
  // CPUS{...} came with Linux 6.6: before it the kernel refuses it, and so does the plan
  // (UsesCpus; the bpf engine never compiles it there).
  const bool cpus = KernelAtLeast(6, 6);
  for (const std::string& f : filters) {
    auto e = ParseFilter(f, format);
    const bool ours = e.ok() && (cpus || !UsesCpus(*e));
    EXPECT_EQ(ours, inst.SetFilter(f)) << f << ": " << (ours ? "accepted here" : e.status().message());
  }
}

}  // namespace
}  // namespace tpe
