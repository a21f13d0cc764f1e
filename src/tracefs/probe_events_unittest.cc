// Unit tier: the pure parts of probe events (definition lines, read-back parsing, stale-group
// selection, error_log parsing). No root needed. The read-back lines and error_log text below were
// captured from Linux 6.18's tracefs.
#include "tracefs/probe_events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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
  EXPECT_EQ(ProbeGroupName(1234, kInitPidNamespace), "tpe_1234");
  EXPECT_EQ(ProbeGroupName(1, 4026532512), "tpe_1_4026532512");  // pid 1 of a container
  EXPECT_EQ(ParseProbeGroup("tpe_1_4026532512"), (ProbeGroupOwner{1, 4026532512}));
  EXPECT_EQ(ParseProbeGroup("tpe_1234"), (ProbeGroupOwner{1234, kInitPidNamespace}));
  EXPECT_EQ(ParseProbeGroup("tpe_1_4026531836"), std::nullopt);  // the initial namespace has no suffix
  EXPECT_EQ(ParseProbeGroup("tpe_1_"), std::nullopt);
  EXPECT_EQ(ParseProbeGroup("tpe_1_04026532512"), std::nullopt);
  EXPECT_EQ(ProbeGroupForPid(7), ProbeGroupName(7, CurrentPidNamespace()));
  EXPECT_EQ(PidOfProbeGroup("tpe_1234"), 1234);
  EXPECT_EQ(PidOfProbeGroup(ProbeGroupForPid(2147483647)), 2147483647);
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
  std::set<int> asked;
  auto alive = [&](int pid) {
    asked.insert(pid);
    return pid == 200;
  };
  auto stale = SelectStaleProbeEvents(text, "tpe_300", alive);
  EXPECT_EQ(stale, (std::vector<EventName>{{"tpe_100", "a"}, {"tpe_100", "b"}, {"tpe_400", "z"}}));
  EXPECT_EQ(asked, (std::set<int>{100, 200, 400}));
  EXPECT_TRUE(SelectStaleProbeEvents("", "tpe_1", alive).empty());
  // Another pid namespace's groups are never judged by pid; in that namespace, only its own.
  const std::string mixed = "p:tpe_1_4026532512/a /bin/x:0x1\np:tpe_5/b /bin/x:0x1\np:tpe_6_4026532512/c /bin/x:0x1\n";
  EXPECT_EQ(SelectStaleProbeEvents(mixed, "tpe_300", [](int) { return false; }),
            (std::vector<EventName>{{"tpe_5", "b"}}));
  EXPECT_EQ(SelectStaleProbeEvents(mixed, "tpe_1_4026532512", [](int) { return false; }),
            (std::vector<EventName>{{"tpe_6_4026532512", "c"}}));
  EXPECT_TRUE(SelectStaleProbeEvents(text, "tpe_300", [](int) { return true; }).empty());
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
