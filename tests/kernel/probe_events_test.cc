// Kernel tier: dynamic probe events created through tracefs, opened as PERF_TYPE_TRACEPOINT
// events like any tracepoint, counted exactly, and removed. Needs root; skips with the reason
// otherwise, and fails under TPE_REQUIRE_KERNEL=1.
//
// The probed program is tests/triggers/uprobe_target: it reports its own functions' file offsets
// (from /proc/self/maps, no ELF reader) and calls them a given number of times.
//
// Every event is owned by a ProbeEvents (or a HandMadeProbe) declared before the perf fds on it,
// so the fds close first and the events are removed even when an assertion fails.
#include "tracefs/probe_events.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/scoped_fd.h"
#include "format/event_format.h"
#include "perf/perf_event.h"
#include "testing/test_util.h"
#include "tracefs/tracefs.h"

namespace tpe {
namespace {

using ::testing::HasSubstr;

constexpr int kCalls = 1000;
constexpr char kTarget[] = TPE_UPROBE_TARGET;

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Runs `command` through the shell and returns its stdout; "" on failure.
std::string Run(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "re");
  if (p == nullptr) return "";
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << ": status " << status;
  return out;
}

// "name 0x1234" lines of `uprobe_target --offsets`.
std::map<std::string, uint64_t> TargetOffsets() {
  std::map<std::string, uint64_t> out;
  std::istringstream in(Run(std::string(kTarget) + " --offsets"));
  std::string name, hex;
  while (in >> name >> hex) out[name] = std::stoull(hex, nullptr, 16);
  return out;
}

// Runs the trigger for `n` calls and returns the semaphore value it printed (-1 if none).
int RunTarget(int n) {
  std::string out = Run(std::string(kTarget) + " " + std::to_string(n));
  unsigned v = 0;
  return std::sscanf(out.c_str(), "semaphore %u", &v) == 1 ? static_cast<int>(v) : -1;
}

// One counting-mode PERF_TYPE_TRACEPOINT event per online CPU (as the perf engine opens them).
class Counter {
 public:
  explicit Counter(uint64_t id, const std::string& filter = "") {
    TracepointEventOptions o;
    o.tracepoint_id = id;
    auto cpus = OnlineCpus();
    EXPECT_TRUE(cpus.ok());
    if (!cpus.ok()) return;
    for (int cpu : *cpus) {
      auto fd = OpenPerfEvent(MakeTracepointAttr(o), cpu);
      EXPECT_TRUE(fd.ok()) << fd.status().ToString();
      if (!fd.ok()) continue;
      if (!filter.empty()) {
        EXPECT_TRUE(SetFilter(fd->get(), filter).ok());
      }
      EXPECT_TRUE(EnableEvent(fd->get()).ok());
      fds_.push_back(std::move(*fd));
    }
  }
  uint64_t Sum() const {
    uint64_t sum = 0;
    for (const auto& fd : fds_) {
      auto c = ReadEventCount(fd.get());
      EXPECT_TRUE(c.ok());
      if (c.ok()) sum += c->count;
    }
    return sum;
  }
  void Close() { fds_.clear(); }

 private:
  std::vector<ScopedFd> fds_;
};

// The lines of <root>/<file> that define events of `group`.
std::vector<std::string> LinesOfGroup(const Tracefs& tracefs, const std::string& file, const std::string& group) {
  std::vector<std::string> out;
  auto text = ReadFileToString(tracefs.root() + "/" + file);
  if (!text.ok()) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    auto e = ParseProbeEventsLine(line);
    if (e.ok() && e->system == group) out.push_back(line);
  }
  return out;
}

// A probe event written by hand (as a crashed run would have left it); removed at scope exit if
// still there.
class HandMadeProbe {
 public:
  HandMadeProbe(const Tracefs& tracefs, const std::string& line) : root_(tracefs.root()) {
    auto e = ParseProbeEventsLine(line);
    EXPECT_TRUE(e.ok());
    if (e.ok()) name_ = *e;
    EXPECT_EQ(Append(line), 0) << line;
  }
  ~HandMadeProbe() { Append("-:" + name_.system + "/" + name_.name); }
  const EventName& name() const { return name_; }

 private:
  int Append(const std::string& command) {
    ScopedFd fd(::open((root_ + "/uprobe_events").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    if (!fd.valid()) return errno;
    std::string data = command + "\n";
    return ::write(fd.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size()) ? 0 : errno;
  }
  std::string root_;
  EventName name_;
};

// A forked child that stays alive (blocked on a pipe) under `name` until destroyed.
class LiveChild {
 public:
  explicit LiveChild(const char* name) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    int ready[2];
    EXPECT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[1]);
      ::prctl(PR_SET_NAME, name);
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1) _exit(3);
      if (::read(p[0], &c, 1) < 0) _exit(2);
      _exit(0);
    }
    ::close(p[0]);
    ::close(ready[1]);
    char c;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);  // renamed
    ::close(ready[0]);
    go_ = p[1];
  }
  ~LiveChild() {
    ::close(go_);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
  int go_;
};

class ProbeEventsKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPE_REQUIRE_KERNEL_OR_SKIP();
    auto t = Tracefs::Discover("auto");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tracefs_.emplace(std::move(*t));
    if (!Exists(tracefs_->root() + "/uprobe_events")) {
      if (testing::KernelRequired()) FAIL() << "TPE_REQUIRE_KERNEL=1: no uprobe_events (CONFIG_UPROBE_EVENTS)";
      GTEST_SKIP() << "no " << tracefs_->root() << "/uprobe_events (CONFIG_UPROBE_EVENTS)";
    }
    offsets_ = TargetOffsets();
    ASSERT_NE(offsets_["tpe_target"], 0u);
    ASSERT_NE(offsets_["tpe_target_str"], 0u);
    ASSERT_NE(offsets_["tpe_semaphore"], 0u);
  }
  void TearDown() override {
    if (tracefs_) {
      EXPECT_THAT(LinesOfGroup(*tracefs_, "uprobe_events", ProbeGroupForPid(::getpid())), ::testing::IsEmpty());
    }
  }

  ProbeEventSpec Spec(ProbeKind kind, const std::string& event, const std::string& function) {
    ProbeEventSpec s;
    s.kind = kind;
    s.event = event;
    s.path = kTarget;
    s.offset = offsets_[function];
    return s;
  }

  std::optional<Tracefs> tracefs_;
  std::map<std::string, uint64_t> offsets_;
};

TEST_F(ProbeEventsKernelTest, UprobeAndUretprobeCountEveryCallExactly) {
  const std::string group = ProbeGroupForPid(::getpid());
  ProbeEvents probes(*tracefs_, group);
  ProbeEventSpec entry = Spec(ProbeKind::kUprobe, "target_entry", "tpe_target");
  entry.args = {{"x", "%di:s64"}};
  ProbeEventSpec ret = Spec(ProbeKind::kUretprobe, "target_ret", "tpe_target");
  ret.args = {{"rv", "$retval:s64"}};
  ProbeEventSpec str = Spec(ProbeKind::kUprobe, "target_str", "tpe_target_str");
  str.args = {{"s", "+0(%di):ustring"}, {"c", "$comm"}};
  auto e = probes.Create(entry);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(*e, (EventName{group, "target_entry"}));
  auto r = probes.Create(ret);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto s = probes.Create(str);
  ASSERT_TRUE(s.ok()) << s.status().ToString();

  // The kernel reads them back as written, with the offset zero-padded.
  auto lines = LinesOfGroup(*tracefs_, "uprobe_events", group);
  char off[32];
  std::snprintf(off, sizeof(off), "0x%016llx", static_cast<unsigned long long>(entry.offset));
  EXPECT_THAT(lines, ::testing::Contains("p:" + group + "/target_entry " + kTarget + ":" + off + " x=%di:s64"));
  EXPECT_THAT(lines, ::testing::Contains("r:" + group + "/target_ret " + kTarget + ":" + off + " rv=$retval:s64"));

  // Each has an id and a format the existing parser reads, with the arguments as fields.
  std::map<std::string, uint64_t> ids;
  for (const auto& [name, field, type, is_signed] :
       std::vector<std::tuple<EventName, std::string, std::string, bool>>{{*e, "x", "s64", true},
                                                                          {*r, "rv", "s64", true},
                                                                          {*s, "s", "__data_loc char[]", true},
                                                                          {*s, "c", "__data_loc char[]", true}}) {
    auto id = tracefs_->ReadId(name);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids[name.name] = *id;
    auto text = tracefs_->ReadFormat(name);
    ASSERT_TRUE(text.ok());
    auto format = ParseFormat(*text, name.ToString());
    ASSERT_TRUE(format.ok()) << format.status().ToString();
    EXPECT_EQ(format->id, *id);
    const FieldFormat* f = format->FindField(field);
    ASSERT_NE(f, nullptr) << *text;
    EXPECT_EQ(f->type, type) << *text;
    EXPECT_EQ(f->is_signed, is_signed) << *text;
    // The kernel's own fields: the probed address, or for a return probe the function and the
    // address it returned to.
    for (const char* own : name == *r ? std::vector<const char*>{"__probe_func", "__probe_ret_ip"}
                                      : std::vector<const char*>{"__probe_ip"}) {
      EXPECT_NE(format->FindField(own), nullptr) << own << " in " << *text;
    }
  }

  Counter entries(ids["target_entry"]), returns(ids["target_ret"]), strs(ids["target_str"]);
  EXPECT_EQ(RunTarget(kCalls), 0);
  EXPECT_EQ(entries.Sum(), static_cast<uint64_t>(kCalls));
  EXPECT_EQ(returns.Sum(), static_cast<uint64_t>(kCalls));
  EXPECT_EQ(strs.Sum(), static_cast<uint64_t>(kCalls));

  // Still open: the kernel refuses to remove it, and it stays owned.
  Status busy = probes.Remove(*e);
  EXPECT_EQ(busy.code(), StatusCode::kUnavailable) << busy.ToString();
  EXPECT_EQ(busy.message(), "cannot remove probe event " + group +
                                "/target_entry: it is in use (EBUSY): a perf event or BPF program is still open on "
                                "it; close them first");
  EXPECT_EQ(probes.events().size(), 3u);

  entries.Close();
  returns.Close();
  strs.Close();
  EXPECT_TRUE(probes.Remove(*e).ok());
  EXPECT_FALSE(tracefs_->HasEvent(*e));
  EXPECT_EQ(probes.Remove(*e).code(), StatusCode::kInvalidArgument);  // no longer ours
  EXPECT_TRUE(probes.RemoveAll().ok());
  EXPECT_TRUE(probes.events().empty());
  EXPECT_THAT(LinesOfGroup(*tracefs_, "uprobe_events", group), ::testing::IsEmpty());
  EXPECT_FALSE(tracefs_->HasEvent(*r));
}

// ref_ctr (Linux 4.20): while the probe is enabled the kernel increments the semaphore in every
// process mapping the file, including ones started afterwards.
TEST_F(ProbeEventsKernelTest, RefCtrOffsetDrivesTheSemaphore) {
  ProbeEvents probes(*tracefs_, ProbeGroupForPid(::getpid()));
  ProbeEventSpec spec = Spec(ProbeKind::kUprobe, "target_usdt", "tpe_target");
  spec.ref_ctr_offset = offsets_["tpe_semaphore"];
  auto e = probes.Create(spec);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto id = tracefs_->ReadId(*e);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(RunTarget(1), 0);  // created, not enabled: the semaphore stays 0
  {
    Counter counter(*id);
    EXPECT_EQ(RunTarget(kCalls), 1);
    EXPECT_EQ(counter.Sum(), static_cast<uint64_t>(kCalls));
  }
  EXPECT_EQ(RunTarget(1), 0);
}

TEST_F(ProbeEventsKernelTest, KernelRefusalsCarryTheKernelsReason) {
  const std::string group = ProbeGroupForPid(::getpid());
  ProbeEvents probes(*tracefs_, group);
  ProbeEventSpec bad_reg = Spec(ProbeKind::kUprobe, "bad_reg", "tpe_target");
  bad_reg.args = {{"x", "%zz:s64"}};
  auto st = probes.Create(bad_reg);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.status().message(), HasSubstr(": Invalid register name (at \"%zz:s64\")"));

  ProbeEventSpec no_file = Spec(ProbeKind::kUprobe, "no_file", "tpe_target");
  no_file.path = "/nonexistent/tpe_binary";
  st = probes.Create(no_file);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound);
  std::string line = *ProbeEventLine([&] {
    ProbeEventSpec s = no_file;
    s.group = group;
    return s;
  }());
  EXPECT_EQ(st.status().message(), "the kernel refuses \"" + line + "\" in " + tracefs_->root() +
                                       "/uprobe_events: Failed to find the given file (at \"/nonexistent/tpe_binary:" +
                                       line.substr(line.rfind(':') + 1) + "\")");

  ProbeEventSpec ok = Spec(ProbeKind::kUprobe, "twice", "tpe_target");
  ASSERT_TRUE(probes.Create(ok).ok());
  st = probes.Create(ok);
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.status().message(), HasSubstr("already exists"));

  // Refused with a reason only in dmesg: another ref_ctr offset at the same place as "twice".
  ProbeEventSpec semaphore = Spec(ProbeKind::kUprobe, "with_semaphore", "tpe_target");
  semaphore.ref_ctr_offset = offsets_["tpe_semaphore"];
  st = probes.Create(semaphore);
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.status().message(),
              HasSubstr("/uprobe_events: Invalid argument (error_log has no reason; the kernel logs some refusals "
                        "only to dmesg, e.g. \"Reference counter offset mismatch\""));

  ProbeEventSpec other_group = ok;
  other_group.group = "tpe_elsewhere";
  EXPECT_THAT(probes.Create(other_group).status().message(), HasSubstr("but these probe events are group"));
  EXPECT_EQ(probes.events().size(), 1u);
}

// kprobes: this test asserts whichever is true of the running kernel.
TEST_F(ProbeEventsKernelTest, KprobeCountsNanosleepsOrIsUnavailable) {
  ProbeEvents probes(*tracefs_, ProbeGroupForPid(::getpid()));
  ProbeEventSpec spec;
  spec.kind = ProbeKind::kKprobe;
  spec.event = "nanosleep";
  spec.symbol = "do_nanosleep";
  const std::string kprobe_events = tracefs_->root() + "/kprobe_events";
  auto e = probes.Create(spec);
  if (!Exists(kprobe_events)) {
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(e.status().message(),
              "kprobes are not available on this kernel (no " + kprobe_events + "; CONFIG_KPROBE_EVENTS)");
    EXPECT_TRUE(probes.events().empty());
    return;
  }
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto id = tracefs_->ReadId(*e);
  ASSERT_TRUE(id.ok());
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(go[1]);
    char c;
    if (::read(go[0], &c, 1) != 1) _exit(2);
    for (int i = 0; i < 10; ++i) {
      struct timespec ts = {0, 1000};
      ::nanosleep(&ts, nullptr);
    }
    _exit(0);
  }
  ::close(go[0]);
  {
    Counter counter(*id, "common_pid == " + std::to_string(child));
    EXPECT_EQ(::write(go[1], "x", 1), 1);
    ::close(go[1]);
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_EQ(counter.Sum(), 10u);
  }
  EXPECT_TRUE(probes.RemoveAll().ok());
  EXPECT_THAT(LinesOfGroup(*tracefs_, "kprobe_events", probes.group()), ::testing::IsEmpty());
}

std::string Place(uint64_t offset) {
  char b[32];
  std::snprintf(b, sizeof(b), "%llx", static_cast<unsigned long long>(offset));
  return std::string(kTarget) + ":0x" + b;
}

// Groups name their owner by pid and start time: a live process with that pid and start time is
// the owner whatever its name (a renamed binary), any other process with that pid is not. Groups
// of the earlier format (no start time) are still judged by the old rule, so an upgrade removes
// the earlier version's leftovers.
TEST_F(ProbeEventsKernelTest, RemoveStaleRemovesDeadAndForeignOwnersOnly) {
  const std::string own = ProbeGroupForPid(::getpid());
  const std::string place = Place(offsets_["tpe_target"]);
  const uint64_t ns = CurrentPidNamespace();
  // A process that existed and is gone, with its start time.
  std::optional<uint64_t> dead_start;
  pid_t dead = 0;
  {
    LiveChild gone("tpe_gone");
    dead = gone.pid();
    dead_start = ProcessStartTime(dead);
  }
  ASSERT_TRUE(dead_start.has_value());
  LiveChild renamed("not_an_exporter");     // alive, any name: the owner by start time
  LiveChild other("tpe_not_daemon");        // alive, not a tracepoint_exporter: a reused pid (old rule)
  LiveChild daemon("tracepoint_exporter");  // alive, comm "tracepoint_expo": another daemon (old rule)
  const std::optional<uint64_t> renamed_start = ProcessStartTime(renamed.pid());
  ASSERT_TRUE(renamed_start.has_value());

  ProbeEvents probes(*tracefs_, own);
  ASSERT_TRUE(probes.Create(Spec(ProbeKind::kUprobe, "mine", "tpe_target")).ok());
  HandMadeProbe dead_probe(*tracefs_, "p:" + ProbeGroupName(dead, dead_start, ns) + "/left " + place);
  HandMadeProbe dead_ret(*tracefs_, "r:" + ProbeGroupName(dead, dead_start, ns) + "/left_ret " + place);
  HandMadeProbe live(*tracefs_, "p:" + ProbeGroupName(renamed.pid(), renamed_start, ns) + "/theirs " + place);
  HandMadeProbe reused(*tracefs_, "p:" + ProbeGroupName(renamed.pid(), *renamed_start + 1, ns) + "/left " + place);
  HandMadeProbe old_dead(*tracefs_, "p:" + ProbeGroupName(dead, std::nullopt, ns) + "/left " + place);
  HandMadeProbe old_reused(*tracefs_, "p:" + ProbeGroupName(other.pid(), std::nullopt, ns) + "/left " + place);
  HandMadeProbe old_live(*tracefs_, "p:" + ProbeGroupName(daemon.pid(), std::nullopt, ns) + "/theirs " + place);
  HandMadeProbe tool(*tracefs_, "p:tpe_other_tool/theirs " + place);

  auto removed = RemoveStaleProbeEvents(*tracefs_, own);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_GE(*removed, 5);  // and whatever other runs on this machine left
  for (const HandMadeProbe* gone : {&dead_probe, &dead_ret, &reused, &old_dead, &old_reused}) {
    EXPECT_FALSE(tracefs_->HasEvent(gone->name())) << gone->name().ToString();
  }
  for (const HandMadeProbe* kept : {&live, &old_live, &tool}) {
    EXPECT_TRUE(tracefs_->HasEvent(kept->name())) << kept->name().ToString();
  }
  EXPECT_TRUE(tracefs_->HasEvent({own, "mine"}));
  // Nothing of ours left to do a second time.
  removed = RemoveStaleProbeEvents(*tracefs_, own);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(tracefs_->HasEvent(live.name()));
  EXPECT_TRUE(tracefs_->HasEvent(old_live.name()));
}

// A process made pid 1 of a new pid namespace (unshare(CLONE_NEWPID) + fork, as a container's
// daemon is): from the initial namespace its groups stay while it lives, those naming another
// pid or start time there go, and once no process lives in the namespace all of its groups go
// (they would otherwise stay for good, pinning what their paths hold).
TEST_F(ProbeEventsKernelTest, RemoveStaleRemovesGroupsOfDeadPidNamespaces) {
  if (CurrentPidNamespace() != kInitPidNamespace) {
    if (testing::KernelRequired()) FAIL() << "TPE_REQUIRE_KERNEL=1: not in the initial pid namespace";
    GTEST_SKIP() << "not in the initial pid namespace: other namespaces' groups are not judged from here";
  }
  int report[2], release[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(release, O_CLOEXEC), 0);
  pid_t parent = ::fork();
  if (parent == 0) {
    ::close(report[0]);
    ::close(release[1]);  // so that the test closing its end is the namespace's end
    // The child enters no namespace itself; its next child is pid 1 of a new one.
    if (::unshare(CLONE_NEWPID) != 0) {
      dprintf(report[1], "error %d\n", errno);
      _exit(1);
    }
    pid_t init = ::fork();
    if (init == 0) {
      ::prctl(PR_SET_NAME, "tracepoint_exporter");
      struct stat st {};
      ::stat("/proc/self/ns/pid", &st);
      const std::optional<uint64_t> start = ProcessStartTime(0);
      dprintf(report[1], "ns %llu pid %d start %llu\n", static_cast<unsigned long long>(st.st_ino), ::getpid(),
              static_cast<unsigned long long>(start.value_or(0)));
      char c;
      if (::read(release[0], &c, 1) < 0) _exit(2);
      _exit(0);
    }
    int status = 0;
    ::waitpid(init, &status, 0);
    _exit(init > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 3);
  }
  ::close(report[1]);
  ::close(release[0]);
  char buf[128] = {};
  ASSERT_GT(::read(report[0], buf, sizeof(buf) - 1), 0);
  ::close(report[0]);
  int err = 0;
  if (std::sscanf(buf, "error %d", &err) == 1) {
    ::close(release[1]);
    ::waitpid(parent, nullptr, 0);
    if (testing::KernelRequired()) FAIL() << "unshare(CLONE_NEWPID): " << std::strerror(err);
    GTEST_SKIP() << "unshare(CLONE_NEWPID): " << std::strerror(err);
  }
  unsigned long long ns = 0, start = 0;
  int inner_pid = 0;
  ASSERT_EQ(std::sscanf(buf, "ns %llu pid %d start %llu", &ns, &inner_pid, &start), 3) << buf;
  ASSERT_EQ(inner_pid, 1);
  ASSERT_NE(ns, kInitPidNamespace);

  const std::string own = ProbeGroupForPid(::getpid());
  const std::string place = Place(offsets_["tpe_target"]);
  std::optional<HandMadeProbe> owner, old_owner;
  owner.emplace(*tracefs_, "p:" + ProbeGroupName(1, start, ns) + "/theirs " + place);
  old_owner.emplace(*tracefs_, "p:" + ProbeGroupName(1, std::nullopt, ns) + "/theirs " + place);
  HandMadeProbe absent(*tracefs_, "p:" + ProbeGroupName(9, start, ns) + "/left " + place);
  HandMadeProbe reused(*tracefs_, "p:" + ProbeGroupName(1, start + 1, ns) + "/left " + place);
  HandMadeProbe never(*tracefs_, "p:" + ProbeGroupName(1, start, 1) + "/left " + place);  // no such namespace

  auto removed = RemoveStaleProbeEvents(*tracefs_, own);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_GE(*removed, 3);
  EXPECT_TRUE(tracefs_->HasEvent(owner->name()));
  EXPECT_TRUE(tracefs_->HasEvent(old_owner->name()));
  EXPECT_FALSE(tracefs_->HasEvent(absent.name()));
  EXPECT_FALSE(tracefs_->HasEvent(reused.name()));
  EXPECT_FALSE(tracefs_->HasEvent(never.name()));

  // The namespace's only process exits (SIGKILL of a container's daemon would do the same).
  ::close(release[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(parent, &status, 0), parent);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  removed = RemoveStaleProbeEvents(*tracefs_, own);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_GE(*removed, 2);
  EXPECT_FALSE(tracefs_->HasEvent(owner->name()));
  EXPECT_FALSE(tracefs_->HasEvent(old_owner->name()));
}

}  // namespace
}  // namespace tpe
