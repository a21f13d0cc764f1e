// Unit tier: the pure parts of probe events (definition lines, read-back parsing, stale-group
// selection, error_log parsing). No root needed. The read-back lines and error_log text below were
// captured from Linux 6.18's tracefs.
#include "tracefs/probe_events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/file_util.h"

namespace tpe {
namespace {

using ::testing::HasSubstr;

ProbeEventSpec Uprobe() {
  ProbeEventSpec s;
  s.kind = ProbeKind::kUprobe;
  s.group = "tpe_1234";
  s.event = "m3_entry";
  s.path = "/bin/x";
  s.offset = 0x1139;
  return s;
}

ProbeEventSpec Kprobe() {
  ProbeEventSpec s;
  s.kind = ProbeKind::kKprobe;
  s.group = "tpe_1234";
  s.event = "sleep";
  s.symbol = "do_nanosleep";
  return s;
}

std::string Line(const ProbeEventSpec& s) {
  auto line = ProbeEventLine(s);
  EXPECT_TRUE(line.ok()) << line.status().ToString();
  return line.ok() ? *line : "";
}

Status Error(const ProbeEventSpec& s) {
  auto line = ProbeEventLine(s);
  EXPECT_FALSE(line.ok()) << "accepted: " << *line;
  return line.status();
}

TEST(ProbeEventLineTest, Uprobe) {
  ProbeEventSpec s = Uprobe();
  EXPECT_EQ(Line(s), "p:tpe_1234/m3_entry /bin/x:0x1139");
  s.args = {{"a0", "%di:u64"}, {"s", "+0(%si):ustring"}};
  EXPECT_EQ(Line(s), "p:tpe_1234/m3_entry /bin/x:0x1139 a0=%di:u64 s=+0(%si):ustring");
}

TEST(ProbeEventLineTest, UretprobeWithRetvalAndRefCtr) {
  ProbeEventSpec s = Uprobe();
  s.kind = ProbeKind::kUretprobe;
  s.event = "m3_ret";
  s.ref_ctr_offset = 0x4010;
  s.args = {{"rv", "$retval:s32"}};
  EXPECT_EQ(Line(s), "r:tpe_1234/m3_ret /bin/x:0x1139(0x4010) rv=$retval:s32");
}

TEST(ProbeEventLineTest, UprobeWithRefCtr) {
  ProbeEventSpec s = Uprobe();
  s.ref_ctr_offset = 0x20;
  EXPECT_EQ(Line(s), "p:tpe_1234/m3_entry /bin/x:0x1139(0x20)");
}

TEST(ProbeEventLineTest, KprobeAndKretprobe) {
  ProbeEventSpec s = Kprobe();
  EXPECT_EQ(Line(s), "p:tpe_1234/sleep do_nanosleep");
  s.offset = 16;
  s.args = {{"a", "%di"}, {"c", "$comm"}, {"bits", "+8(%si):b4@2/32"}, {"arr", "+0(%si):u8[4]"}};
  EXPECT_EQ(Line(s), "p:tpe_1234/sleep do_nanosleep+16 a=%di c=$comm bits=+8(%si):b4@2/32 arr=+0(%si):u8[4]");
  s = Kprobe();
  s.kind = ProbeKind::kKretprobe;
  s.symbol = "ext4:ext4_sync_file";
  s.args = {{"rv", "$retval:s64"}};
  EXPECT_EQ(Line(s), "r:tpe_1234/sleep ext4:ext4_sync_file rv=$retval:s64");
}

TEST(ProbeEventLineTest, NamesAreKernelNames) {
  ProbeEventSpec s = Uprobe();
  s.event = "";
  EXPECT_EQ(Error(s).message(),
            "uprobe event \"\" is not a valid name: use letters, digits and '_', not starting with a digit "
            "([A-Za-z_][A-Za-z0-9_]*)");
  s.event = "1abc";
  EXPECT_EQ(Error(s).code(), StatusCode::kInvalidArgument);
  s.event = "a.b";
  EXPECT_EQ(Error(s).code(), StatusCode::kInvalidArgument);
  s = Uprobe();
  s.group = "tpe-1";
  EXPECT_THAT(Error(s).message(), HasSubstr("uprobe group \"tpe-1\" is not a valid name"));
  // 63 characters are allowed (MAX_EVENT_NAME_LEN 64 with the NUL), 64 are not.
  s = Uprobe();
  s.event = std::string(63, 'e');
  EXPECT_EQ(Line(s), "p:tpe_1234/" + s.event + " /bin/x:0x1139");
  s.event = std::string(64, 'e');
  EXPECT_EQ(Error(s).message(), "uprobe event \"" + s.event + "\" has 64 characters; the kernel allows at most 63");
  s = Uprobe();
  s.group = std::string(64, 'g');
  EXPECT_THAT(Error(s).message(), HasSubstr("has 64 characters"));
  // Argument names: at most 32 (MAX_ARG_NAME_LEN).
  s = Uprobe();
  s.args = {{std::string(32, 'a'), "%di"}};
  EXPECT_TRUE(ProbeEventLine(s).ok());
  s.args = {{std::string(33, 'a'), "%di"}};
  EXPECT_THAT(Error(s).message(), HasSubstr("has 33 characters; the kernel allows at most 32"));
}

TEST(ProbeEventLineTest, ArgumentsAreChecked) {
  ProbeEventSpec s = Uprobe();
  s.args = {{"a", "%di"}, {"a", "%si"}};
  EXPECT_EQ(Error(s).message(), "uprobe m3_entry has two arguments named \"a\"");
  s.args = {{"common_pid", "%di"}};
  EXPECT_EQ(Error(s).message(),
            "uprobe m3_entry argument name \"common_pid\" is reserved: common_* and __probe_* are the event's own "
            "fields");
  s.args = {{"__probe_ip", "%di"}};
  EXPECT_THAT(Error(s).message(), HasSubstr("is reserved"));
  s.args = {{"a", ""}};
  EXPECT_THAT(Error(s).message(), HasSubstr("argument a has fetch arg \"\": expected e.g. \"%di:u64\""));
  s.args = {{"rv", "$retval"}};
  EXPECT_EQ(Error(s).message(),
            "uprobe m3_entry argument rv uses $retval, which only return probes (uretprobe, kretprobe) have");
  s.args = std::vector<std::pair<std::string, std::string>>(129, {"a", "%di"});
  EXPECT_EQ(Error(s).message(), "uprobe m3_entry has 129 arguments; the kernel allows at most 128");
}

// Nothing in a spec can end the definition early and start another one (e.g. a removal of some
// other tool's event) or add an argument the caller did not name.
TEST(ProbeEventLineTest, InjectionAttemptsAreRefused) {
  const std::vector<std::string> bad_fetch = {"%di\n-:x/y", "%di -:x/y", "%di\t", "%di b=%si", "\\\"str\"",
                                              "%di#",       "'x'",       "a=b",   "%di\r",     "\\imm"};
  for (const auto& fetch : bad_fetch) {
    ProbeEventSpec s = Uprobe();
    s.args = {{"a", fetch}};
    Status st = Error(s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << fetch;
    EXPECT_THAT(st.message(), HasSubstr("argument a has fetch arg")) << fetch;
  }
  const std::vector<std::string> bad_names = {"a\n-:x/y", "a b", "a=b", "a\"", "", "a/b", "a:b"};
  for (const auto& name : bad_names) {
    ProbeEventSpec s = Uprobe();
    s.args = {{name, "%di"}};
    EXPECT_THAT(Error(s).message(), HasSubstr("argument name")) << name;
    s = Uprobe();
    s.event = name;
    EXPECT_THAT(Error(s).message(), HasSubstr("uprobe event")) << name;
    s = Uprobe();
    s.group = name;
    EXPECT_THAT(Error(s).message(), HasSubstr("uprobe group")) << name;
  }
  EXPECT_THAT(Error([] {
                ProbeEventSpec s = Uprobe();
                s.event = "a\n-:x/y";
                return s;
              }())
                  .message(),
              HasSubstr("\"a\\n-:x/y\""));  // the newline is shown escaped
  const std::vector<std::string> bad_paths = {"bin/x",   "",           "/bin/x -:x/y", "/bin/x\n-:x/y",
                                              "/bin/x#", "/bin/\"x\"", "/bin/x\\y",    "/bin/x\t"};
  for (const auto& path : bad_paths) {
    ProbeEventSpec s = Uprobe();
    s.path = path;
    EXPECT_THAT(Error(s).message(), HasSubstr("uprobe path")) << path;
  }
  const std::vector<std::string> bad_symbols = {"", "do_nanosleep -:x/y", "do_nanosleep\n", "1abc", "a+1", "a(b)"};
  for (const auto& symbol : bad_symbols) {
    ProbeEventSpec s = Kprobe();
    s.symbol = symbol;
    EXPECT_THAT(Error(s).message(), HasSubstr("kprobe symbol")) << symbol;
  }
}

// The kernel splits a definition with argv_split(), whose isspace() (lib/ctype.c) is true for
// 0x09-0x0d, 0x20 and 0xa0: a path holding one would be cut there (a U+00A0 in a UTF-8 path is
// 0xc2 0xa0). Each is refused, naming the path and the byte; other bytes >= 0x80 pass.
TEST(ProbeEventLineTest, PathsWithBytesTheKernelTakesForSpacesAreRefused) {
  for (int c : {0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0xa0}) {
    ProbeEventSpec s = Uprobe();
    s.path = std::string("/opt/my") + static_cast<char>(c) + "app/bin";
    Status st = Error(s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c;
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02x", c);
    EXPECT_THAT(st.message(), HasSubstr(std::string(" holds byte ") + byte +
                                        " at offset 7, which the kernel takes "
                                        "for a space (isspace() of lib/ctype.c"))
        << st.message();
    EXPECT_THAT(st.message(), HasSubstr("uprobe path \"/opt/my")) << st.message();
  }
  ProbeEventSpec s = Uprobe();
  s.path = "/opt/caf\xc3\xa9 \xc2\xa0/x";  // "café", then a space
  EXPECT_THAT(Error(s).message(), HasSubstr("byte 0x20 at offset 10"));
  s.path = "/opt/caf\xc3\xa9\xc2\xa0x/bin";  // "café" U+00A0 "x"
  EXPECT_THAT(Error(s).message(), HasSubstr("byte 0xa0 at offset 11"));
  s.path = "/opt/caf\xc3\xa9/\xe2\x80\xaf/bin";  // U+202F (bytes e2 80 af): not a kernel space
  EXPECT_EQ(Line(s), "p:tpe_1234/m3_entry /opt/caf\xc3\xa9/\xe2\x80\xaf/bin:0x1139");
}

TEST(ProbeEventLineTest, PlaceMatchesKind) {
  ProbeEventSpec s = Uprobe();
  s.symbol = "main";
  EXPECT_EQ(Error(s).message(),
            "uprobe m3_entry has symbol \"main\": a uprobe is placed by path and file offset; symbols are for kprobes");
  s = Kprobe();
  s.path = "/bin/x";
  EXPECT_THAT(Error(s).message(), HasSubstr("paths are for uprobes"));
  s = Kprobe();
  s.ref_ctr_offset = 8;
  EXPECT_THAT(Error(s).message(), HasSubstr("USDT semaphores are for uprobes"));
  s = Kprobe();
  s.kind = ProbeKind::kKretprobe;
  s.offset = 4;
  EXPECT_EQ(Error(s).message(),
            "kretprobe sleep has offset 4 into do_nanosleep: a return probe attaches to a function's entry (offset 0)");
}

TEST(ProbeGroupTest, ForPidAndBack) {
  // This version: pid, start time, and the namespace outside the initial one.
  EXPECT_EQ(ProbeGroupName(1234, 98765, kInitPidNamespace), "tpe_1234_s98765");
  EXPECT_EQ(ProbeGroupName(1, 42, 4026532512), "tpe_1_s42_4026532512");  // pid 1 of a container
  EXPECT_EQ(ParseProbeGroup("tpe_1234_s98765"), (ProbeGroupOwner{1234, 98765, kInitPidNamespace}));
  EXPECT_EQ(ParseProbeGroup("tpe_1_s42_4026532512"), (ProbeGroupOwner{1, 42, 4026532512}));
  EXPECT_EQ(ParseProbeGroup("tpe_7_s0"), (ProbeGroupOwner{7, 0, kInitPidNamespace}));
  // The longest fits the kernel's 63 characters.
  const std::string longest = ProbeGroupName(2147483647, UINT64_MAX, UINT64_MAX);
  EXPECT_EQ(longest.size(), 57u);
  EXPECT_EQ(ParseProbeGroup(longest), (ProbeGroupOwner{2147483647, UINT64_MAX, UINT64_MAX}));
  // The earlier versions' formats, still recognised (their leftovers are judged by name).
  EXPECT_EQ(ProbeGroupName(1234, std::nullopt, kInitPidNamespace), "tpe_1234");
  EXPECT_EQ(ProbeGroupName(1, std::nullopt, 4026532512), "tpe_1_4026532512");
  EXPECT_EQ(ParseProbeGroup("tpe_1_4026532512"), (ProbeGroupOwner{1, std::nullopt, 4026532512}));
  EXPECT_EQ(ParseProbeGroup("tpe_1234"), (ProbeGroupOwner{1234, std::nullopt, kInitPidNamespace}));
  for (const char* g : {"tpe_1_4026531836", "tpe_1_s5_4026531836",  // the initial namespace has no suffix
                        "tpe_1_", "tpe_1_04026532512", "tpe_1_s", "tpe_1_s01", "tpe_1_sx", "tpe_1_s5_", "tpe_1_s5_s6",
                        "tpe_1_s5_7_8", "tpe_1_7_s5", "tpe_1_s18446744073709551616"}) {
    EXPECT_EQ(ParseProbeGroup(g), std::nullopt) << g;
  }
  EXPECT_EQ(ProbeGroupForPid(getpid()), ProbeGroupName(getpid(), ProcessStartTime(getpid()), CurrentPidNamespace()));
  EXPECT_TRUE(ProcessStartTime(getpid()).has_value());
  EXPECT_EQ(ProcessStartTime(0), ProcessStartTime(getpid()));
  EXPECT_EQ(ProcessStartTime(2147483647), std::nullopt);
  EXPECT_EQ(PidOfProbeGroup("tpe_1234"), 1234);
  EXPECT_EQ(PidOfProbeGroup(ProbeGroupForPid(getpid())), getpid());
  for (const char* g : {"tpe_", "tpe_01234", "tpe_0", "tpe_12x", "tpe_1234_x", "uprobes", "xtpe_1", "tpe_99999999999",
                        "tpe_2147483648", "tpe_-1", "TPE_1"}) {
    EXPECT_EQ(PidOfProbeGroup(g), std::nullopt) << g;
  }
}

TEST(ParseProbeEventsLineTest, RealReadBackLines) {
  struct Case {
    const char* line;
    EventName want;
  };
  const Case cases[] = {
      {"p:tpe_scratch/e1 /bin/true:0x0000000000001139 a0=%di:u64 s=+0(%si):ustring", {"tpe_scratch", "e1"}},
      {"r:tpe_scratch/e2 /bin/true:0x0000000000001139 rv=$retval:s32", {"tpe_scratch", "e2"}},
      {"p:tpe_scratch/e5 /bin/true:0x0000000000001140(0x20)", {"tpe_scratch", "e5"}},
      {"p:tpe_scratch/e14 /bin/true:0x0000000000001160 c=$comm", {"tpe_scratch", "e14"}},
      {"p:kprobes/myprobe do_sys_open dfd=%ax", {"kprobes", "myprobe"}},
      {"r16:kprobes/ret do_sys_open $retval", {"kprobes", "ret"}},
      {"p:uprobes/p_bash_0x4245c0 /bin/bash:0x00000000000445c0", {"uprobes", "p_bash_0x4245c0"}},
      {"p:tpe_1/noargs", {"tpe_1", "noargs"}},
  };
  for (const auto& c : cases) {
    auto e = ParseProbeEventsLine(c.line);
    ASSERT_TRUE(e.ok()) << c.line << ": " << e.status().ToString();
    EXPECT_EQ(*e, c.want) << c.line;
  }
  for (const char* bad :
       {"", "x:a/b /bin/x:0x1", "p:ab /bin/x:0x1", "p a/b", "p:/b x", "p:a/ x", "rx:a/b x", "p:a-b/c x"}) {
    EXPECT_FALSE(ParseProbeEventsLine(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseProbeEventsLine("p:ab /bin/x:0x1").status().message(),
            "probe events line \"p:ab /bin/x:0x1\" is not \"p|r[N]:GROUP/EVENT PLACE [ARGS]\"");
}

// A ProcessTable of the initial namespace where namespace 4026532512 has pids 1 (host pid 500)
// and 7 (501), and 4026532600 has a process whose pids are not mapped (no NSpid).
ProcessTable InitialTable() {
  ProcessTable t;
  t.own_pidns = kInitPidNamespace;
  t.complete = true;
  t.live_pidns = {kInitPidNamespace, 4026532512, 4026532600};
  t.ns_pids = {{{4026532512, 1}, 500}, {{4026532512, 7}, 501}};
  t.mapped_pidns = {4026532512};
  return t;
}

TEST(SelectStaleProbeEventsTest, OnlyDeadOrForeignPidsOfOurPrefix) {
  const std::string text =
      "p:tpe_100/a /bin/x:0x0000000000001139 a0=%di:u64\n"
      "r:tpe_100/b /bin/x:0x0000000000001139 rv=$retval:s32\n"
      "p:tpe_200/a /bin/x:0x0000000000001139\n"    // alive
      "p:tpe_300/a /bin/x:0x0000000000001139\n"    // our own group, whatever the predicate says
      "p:uprobes/p_bash_0x4245c0 /bin/bash:0x1\n"  // another tool
      "p:tpe_0100/a /bin/x:0x1\n"                  // not a group we would name
      "p:tpe_scratch/a /bin/x:0x1\n"               // not ours
      "garbage line\n"
      "\n"
      "p:tpe_400/z /bin/x:0x0000000000001139";  // no trailing newline
  std::vector<int> asked;
  auto alive = [&](int pid, const ProbeGroupOwner&) {
    asked.push_back(pid);
    return pid == 200;
  };
  ProcessTable own;  // judging only this namespace
  auto stale = SelectStaleProbeEvents(text, "tpe_300", own, alive);
  EXPECT_EQ(stale, (std::vector<EventName>{{"tpe_100", "a"}, {"tpe_100", "b"}, {"tpe_400", "z"}}));
  EXPECT_EQ(asked, (std::vector<int>{100, 200, 400}));  // each group judged once
  EXPECT_TRUE(SelectStaleProbeEvents("", "tpe_1", own, alive).empty());
  EXPECT_TRUE(SelectStaleProbeEvents(text, "tpe_300", own, [](int, const ProbeGroupOwner&) { return true; }).empty());
}

// Owners are judged by pid and start time; the earlier format's by the predicate's old rule (the
// predicate gets the parsed owner either way).
TEST(SelectStaleProbeEventsTest, StartTimesAndEarlierFormats) {
  const std::string text =
      "p:tpe_100_s5000/a /bin/x:0x1\n"  // pid 100 started at 5000: alive
      "p:tpe_100_s4000/a /bin/x:0x1\n"  // pid 100 started at 4000: that process is gone
      "p:tpe_100/a /bin/x:0x1\n"        // earlier format
      "p:tpe_300_s1/a /bin/x:0x1\n";    // our own
  std::vector<ProbeGroupOwner> asked;
  auto alive = [&](int pid, const ProbeGroupOwner& owner) {
    EXPECT_EQ(pid, owner.pid);
    asked.push_back(owner);
    return owner.start_time == std::optional<uint64_t>(5000);
  };
  EXPECT_EQ(SelectStaleProbeEvents(text, "tpe_300_s1", ProcessTable{}, alive),
            (std::vector<EventName>{{"tpe_100_s4000", "a"}, {"tpe_100", "a"}}));
  EXPECT_EQ(asked, (std::vector<ProbeGroupOwner>{{100, 5000, kInitPidNamespace},
                                                 {100, 4000, kInitPidNamespace},
                                                 {100, std::nullopt, kInitPidNamespace}}));
}

// Another pid namespace's groups: from the initial namespace, stale when no process lives in the
// namespace, or (pids mapped through NSpid) when the owner's pid is not there or is not the
// owner; left alone when the namespace's pids are not mapped or the table is incomplete. From
// any other namespace, never judged.
TEST(SelectStaleProbeEventsTest, OtherPidNamespaces) {
  const std::string text =
      "p:tpe_1_s10_4026532512/a /bin/x:0x1\n"  // pid 1 (host 500) started at 10: alive
      "p:tpe_1_s11_4026532512/a /bin/x:0x1\n"  // pid 1 started at 11: gone (the pid was reused)
      "p:tpe_9_s10_4026532512/a /bin/x:0x1\n"  // no pid 9 there
      "p:tpe_7_4026532512/a /bin/x:0x1\n"      // earlier format, pid 7 (host 501): asked
      "p:tpe_1_s10_4026532999/a /bin/x:0x1\n"  // namespace with no process: gone
      "p:tpe_1_4026532999/b /bin/x:0x1\n"      // earlier format, same
      "p:tpe_1_s10_4026532600/a /bin/x:0x1\n"  // live namespace, pids not mapped: left alone
      "p:tpe_5_s10/a /bin/x:0x1\n";            // the initial namespace: asked
  std::vector<std::pair<int, ProbeGroupOwner>> asked;
  auto alive = [&](int pid, const ProbeGroupOwner& owner) {
    asked.emplace_back(pid, owner);
    return owner.start_time == std::optional<uint64_t>(10) || (pid == 501 && !owner.start_time);
  };
  EXPECT_EQ(SelectStaleProbeEvents(text, "tpe_2_s3", InitialTable(), alive),
            (std::vector<EventName>{{"tpe_1_s11_4026532512", "a"},
                                    {"tpe_9_s10_4026532512", "a"},
                                    {"tpe_1_s10_4026532999", "a"},
                                    {"tpe_1_4026532999", "b"}}));
  // The owners were asked about by their pids here.
  EXPECT_EQ(asked, (std::vector<std::pair<int, ProbeGroupOwner>>{{500, {1, 10, 4026532512}},
                                                                 {500, {1, 11, 4026532512}},
                                                                 {501, {7, std::nullopt, 4026532512}},
                                                                 {5, {5, 10, kInitPidNamespace}}}));
  auto never = [](int, const ProbeGroupOwner&) { return false; };
  // Incomplete (some /proc/<pid>/ns/pid unreadable): other namespaces are left alone.
  ProcessTable incomplete = InitialTable();
  incomplete.complete = false;
  EXPECT_EQ(SelectStaleProbeEvents(text, "tpe_2_s3", incomplete, never), (std::vector<EventName>{{"tpe_5_s10", "a"}}));
  // A daemon in namespace 4026532512 judges only its own namespace's groups.
  ProcessTable inside;
  inside.own_pidns = 4026532512;
  EXPECT_EQ(SelectStaleProbeEvents(text, "tpe_1_s10_4026532512", inside, never),
            (std::vector<EventName>{
                {"tpe_1_s11_4026532512", "a"}, {"tpe_9_s10_4026532512", "a"}, {"tpe_7_4026532512", "a"}}));
}

// A daemon killed and not yet reaped is a zombie: /proc/<pid>/comm still says tracepoint_expo,
// but its events are no one's.
std::string ProcFile(pid_t pid, const char* name) {
  auto text = ReadFileToString("/proc/" + std::to_string(pid) + "/" + name);
  return text.ok() ? *text : "";
}

TEST(ProbeOwnerAliveTest, AZombieExporterIsNotAlive) {
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_NAME, "tracepoint_exporter");
    char c;
    if (read(go[0], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  for (int i = 0; i < 200 && ProcFile(child, "comm") != "tracepoint_expo\n"; ++i) {
    usleep(5000);
  }
  EXPECT_TRUE(ProbeOwnerAlive(child));  // running, named like an exporter
  ASSERT_EQ(write(go[1], "x", 1), 1);
  for (int i = 0; i < 200; ++i) {  // until it is a zombie
    const std::string stat = ProcFile(child, "stat");
    if (stat.find(") Z") != std::string::npos) break;
    usleep(5000);
  }
  EXPECT_FALSE(ProbeOwnerAlive(child));
  waitpid(child, nullptr, 0);
  close(go[0]);
  close(go[1]);
}

TEST(ProbeOwnerAliveTest, ThisProcessIsNotAnExporterAndNoPidIsAlive) {
  // This test binary is alive but is not a tracepoint_exporter (comm "tracefs_unittes").
  EXPECT_FALSE(ProbeOwnerAlive(getpid()));
  EXPECT_FALSE(ProbeOwnerAlive(0));
  EXPECT_FALSE(ProbeOwnerAlive(-5));
  EXPECT_FALSE(ProbeOwnerAlive(2147483647));  // above pid_max
}

// With a start time the owner is the process with that pid that started then, whatever its
// name: this test binary (not named tracepoint_exporter) is the owner of its own group, and not of
// a group naming another start time.
TEST(ProbeOwnerAliveTest, StartTimeDecidesWhateverTheName) {
  const std::optional<uint64_t> start = ProcessStartTime(getpid());
  ASSERT_TRUE(start.has_value());
  EXPECT_TRUE(ProbeOwnerAlive(getpid(), ProbeGroupOwner{getpid(), *start, CurrentPidNamespace()}));
  EXPECT_FALSE(ProbeOwnerAlive(getpid(), ProbeGroupOwner{getpid(), *start + 1, CurrentPidNamespace()}));
  EXPECT_FALSE(ProbeOwnerAlive(getpid(), ProbeGroupOwner{getpid(), std::nullopt, CurrentPidNamespace()}));
  EXPECT_FALSE(ProbeOwnerAlive(2147483647, ProbeGroupOwner{2147483647, *start, CurrentPidNamespace()}));
  EXPECT_FALSE(ProbeOwnerAlive(0, ProbeGroupOwner{0, *start, CurrentPidNamespace()}));
}

// The initial namespace sees its own namespace among the live ones.
TEST(ReadProcessTableTest, ThisNamespaceIsLive) {
  const ProcessTable t = ReadProcessTable(true);
  EXPECT_EQ(t.own_pidns, CurrentPidNamespace());
  if (t.own_pidns != kInitPidNamespace) {
    EXPECT_TRUE(t.live_pidns.empty());  // only the initial namespace scans
    return;
  }
  EXPECT_EQ(t.live_pidns.count(kInitPidNamespace), 1u);
  for (const auto& [key, here] : t.ns_pids) {
    EXPECT_NE(key.first, kInitPidNamespace);
    EXPECT_EQ(t.live_pidns.count(key.first), 1u);
    EXPECT_GT(here, 0);
  }
  EXPECT_TRUE(ReadProcessTable(false).live_pidns.empty());
}

// <tracefs>/README as kernels print it (kernel/trace/trace.c readme_msg):
//  - linux-6.18/README: this VM's 6.18 (uprobes, no kprobes), captured from /sys/kernel/tracing;
//  - linux-5.10/README: Debian 11's 5.10.223 (kprobes and uprobes), captured in a
//    tests/vm/matrix.sh guest;
//  - linux-4.19/README: v4.19's readme_msg (read from a v4.19 tree) printed with x86_64's
//    defaults for the CONFIG_ options it tests (CONFIG_KPROBE_EVENTS, CONFIG_UPROBE_EVENTS,
//    CONFIG_DYNAMIC_FTRACE, CONFIG_HIST_TRIGGERS, ...): neither (ref_ctr_offset) nor ustring.
std::string Readme(const std::string& kernel) {
  auto text = ReadFileToString(std::string(TPE_TEST_DATA) + "/" + kernel + "/README");
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : "";
}

TEST(ParseProbeReadmeTest, CapturedReadmes) {
  const ProbeReadme now = ParseProbeReadme(Readme("linux-6.18"));
  EXPECT_TRUE(now.probe_synopsis);
  EXPECT_TRUE(now.uprobe_ref_ctr);
  EXPECT_EQ(now.types, (std::vector<std::string>{"s8/16/32/64", "u8/16/32/64", "x8/16/32/64", "char", "string",
                                                 "symbol", "b<bit-width>@<bit-offset>/<container-size>", "ustring",
                                                 "symstr", "%pd/%pD", "<type>\\[<array-size>\\]"}));
  EXPECT_TRUE(now.HasType("ustring"));

  const ProbeReadme bullseye = ParseProbeReadme(Readme("linux-5.10"));
  EXPECT_TRUE(bullseye.probe_synopsis);
  EXPECT_TRUE(bullseye.uprobe_ref_ctr);
  EXPECT_EQ(bullseye.types, (std::vector<std::string>{"s8/16/32/64", "u8/16/32/64", "x8/16/32/64", "string", "symbol",
                                                      "b<bit-width>@<bit-offset>/<container-size>", "ustring",
                                                      "<type>\\[<array-size>\\]"}));

  const ProbeReadme old = ParseProbeReadme(Readme("linux-4.19"));
  EXPECT_TRUE(old.probe_synopsis);
  EXPECT_FALSE(old.uprobe_ref_ctr);
  EXPECT_EQ(old.types, (std::vector<std::string>{"s8/16/32/64", "u8/16/32/64", "x8/16/32/64", "string",
                                                 "b<bit-width>@<bit-offset>/<container-size>"}));
  EXPECT_FALSE(old.HasType("ustring"));

  const ProbeReadme none = ParseProbeReadme("tracing mini-HOWTO:\n\n  trace\t\t\t- The static contents\n");
  EXPECT_FALSE(none.probe_synopsis);
  EXPECT_TRUE(none.types.empty());
}

TEST(CheckProbeSupportTest, RefCtrAndUstringNeedTheKernelToHaveThem) {
  const ProbeReadme now = ParseProbeReadme(Readme("linux-6.18"));
  const ProbeReadme bullseye = ParseProbeReadme(Readme("linux-5.10"));
  const ProbeReadme old = ParseProbeReadme(Readme("linux-4.19"));
  ProbeEventSpec usdt = Uprobe();
  usdt.ref_ctr_offset = 0x4010;
  EXPECT_TRUE(CheckProbeSupport(usdt, now, "/t/README").ok());
  EXPECT_TRUE(CheckProbeSupport(usdt, bullseye, "/t/README").ok());
  Status st = CheckProbeSupport(usdt, old, "/t/README");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.message(),
            "uprobe m3_entry on /bin/x needs a USDT semaphore (ref_ctr_offset 0x4010), which this kernel's "
            "uprobe_events does not take (Linux 4.20 added it; /t/README shows no \"(ref_ctr_offset)\" in the uprobe "
            "place): without it the program never sees its semaphore set and skips the probe");
  ProbeEventSpec plain = Uprobe();
  plain.args = {{"s", "+0(%si):string"}, {"n", "%di:u64"}};
  EXPECT_TRUE(CheckProbeSupport(plain, old, "/t/README").ok());

  ProbeEventSpec k = Kprobe();
  k.args = {{"n", "%di:u64"}, {"path", "+0(%si):ustring"}};
  EXPECT_TRUE(CheckProbeSupport(k, now, "/t/README").ok());
  EXPECT_TRUE(CheckProbeSupport(k, bullseye, "/t/README").ok());
  st = CheckProbeSupport(k, old, "/t/README");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.message(),
            "kprobe sleep argument path (+0(%si):ustring) reads a user-space string (ustring), a fetch-arg type this "
            "kernel does not have (/t/README lists no ustring among its types); a kprobe has no other way to read "
            "user memory as a string");
  k.args = {{"path", "+0(%si):ustring[2]"}};
  EXPECT_EQ(CheckProbeSupport(k, old, "/t/README").code(), StatusCode::kUnavailable);
  ProbeEventSpec u = Uprobe();
  u.args = {{"s", "+0(%si):ustring"}};
  EXPECT_THAT(CheckProbeSupport(u, old, "/t/README").message(), HasSubstr("uprobe reads the program's memory with"));
  // Without the synopsis nothing is known: the kernel decides.
  EXPECT_TRUE(CheckProbeSupport(usdt, ProbeReadme{}, "/t/README").ok());
  EXPECT_TRUE(CheckProbeSupport(k, ProbeReadme{}, "/t/README").ok());
}

// ProbeEvents::Create reads <root>/README before writing a definition that needs ref_ctr_offset
// or ustring, and refuses it there on a kernel without them (a tracefs made of plain files).
TEST(CheckProbeSupportTest, CreateRefusesBeforeWriting) {
  const std::string root = std::filesystem::temp_directory_path() / ("tracefs_unittest_" + std::to_string(getpid()));
  std::filesystem::create_directories(root + "/events");
  std::ofstream(root + "/README") << Readme("linux-4.19");
  std::ofstream(root + "/uprobe_events").flush();
  {
    Tracefs tracefs(root);
    ProbeEvents probes(tracefs, "tpe_1_s2");
    ProbeEventSpec usdt = Uprobe();
    usdt.group = "";
    usdt.ref_ctr_offset = 0x4010;
    auto e = probes.Create(usdt);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
    EXPECT_THAT(e.status().message(), HasSubstr(root + "/README shows no \"(ref_ctr_offset)\""));
    ProbeEventSpec plain = Uprobe();
    plain.group = "";
    ASSERT_TRUE(probes.Create(plain).ok());
    EXPECT_EQ(*ReadFileToString(root + "/uprobe_events"), "p:tpe_1_s2/m3_entry /bin/x:0x1139\n");
  }
  std::filesystem::remove_all(root);
}

constexpr char kErrorLog[] =
    "[ 1512.687795] trace_uprobe: error: Invalid register name\n"
    "  Command: p:tpe_scratch/e3 /bin/true:0x1139 a0=%zz:u64\n"
    "                                                ^\n"
    "[ 1512.687814] trace_uprobe: error: $retval is not available on probe\n"
    "  Command: p:tpe_scratch/e4 /bin/true:0x1139 a0=$retval\n"
    "                                                ^\n"
    "[ 1515.483749] trace_uprobe: error: Failed to find the given file\n"
    "  Command: p:tpe_scratch/e8 /nonexist:0x1139\n"
    "                            ^\n"
    "[ 1531.468641] trace_uprobe: error: Event name is too long\n"
    "  Command: p:tpe_scratch/abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd /bin/true:0x1150\n"
    "                         ^\n"
    "[ 1600.000000] trace_uprobe: error: Failed to find the given file\n"
    "  Command: p:tpe_scratch/e8 /nonexist:0x1139\n"
    "                            ^\n";

TEST(KernelErrorForTest, FindsTheNewestEntryForTheCommand) {
  EXPECT_EQ(KernelErrorFor(kErrorLog, "p:tpe_scratch/e3 /bin/true:0x1139 a0=%zz:u64"),
            "Invalid register name (at \"%zz:u64\")");
  EXPECT_EQ(KernelErrorFor(kErrorLog, "p:tpe_scratch/e4 /bin/true:0x1139 a0=$retval"),
            "$retval is not available on probe (at \"$retval\")");
  EXPECT_EQ(KernelErrorFor(kErrorLog, "p:tpe_scratch/e8 /nonexist:0x1139"),
            "Failed to find the given file (at \"/nonexist:0x1139\")");
  EXPECT_EQ(KernelErrorFor(kErrorLog,
                           "p:tpe_scratch/abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd "
                           "/bin/true:0x1150"),
            "Event name is too long (at \"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd\")");
  EXPECT_EQ(KernelErrorFor(kErrorLog, "p:tpe_scratch/e9 /bin/true:0x1"), std::nullopt);
  EXPECT_EQ(KernelErrorFor("", "p:a/b /x:0x1"), std::nullopt);
  // An entry without its caret line still gives the message.
  EXPECT_EQ(KernelErrorFor("[ 1.0] trace_kprobe: error: Invalid argument\n  Command: p:a/b c", "p:a/b c"),
            "Invalid argument");
}

}  // namespace
}  // namespace tpe
