// Probe names, args and the fetch args they become (plan/probes.h): pure, no root.
#include "plan/probes.h"

#include <gtest/gtest.h>

namespace tpe {
namespace {

TEST(ParseProbeRefTest, EveryForm) {
  auto u = ParseProbeRef("uprobe:/usr/bin/x:main+0x10");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->kind, ProbeKind::kUprobe);
  EXPECT_EQ(u->path, "/usr/bin/x");
  EXPECT_EQ(u->symbol, "main");
  EXPECT_EQ(u->offset, 16u);
  auto r = ParseProbeRef("uretprobe:/proc/42/root/lib/libc.so.6:malloc");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, ProbeKind::kUretprobe);
  EXPECT_EQ(r->path, "/proc/42/root/lib/libc.so.6");
  auto s = ParseProbeRef("usdt:/usr/bin/python3.11:python:audit");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->usdt);
  EXPECT_EQ(s->path, "/usr/bin/python3.11");
  EXPECT_EQ(s->provider, "python");
  EXPECT_EQ(s->name, "audit");
  auto k = ParseProbeRef("kprobe:do_nanosleep+4");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->kind, ProbeKind::kKprobe);
  EXPECT_EQ(k->symbol, "do_nanosleep");
  EXPECT_EQ(k->offset, 4u);
  EXPECT_EQ(ParseProbeRef("kretprobe:do_nanosleep")->kind, ProbeKind::kKretprobe);
  EXPECT_EQ(ParseProbeRef("kprobe:f+010")->offset, 10u);  // decimal, never octal
  EXPECT_EQ(ParseProbeRef("kprobe:f+0x1F")->offset, 31u);
  for (const char* bad : {"uprobe:relative/x:main", "uprobe:/x", "uprobe:/x:", "usdt:/x:audit",
                          "kprobe:", "uretprobe:/x:f+8", "kretprobe:f+1", "uprobe:/x:f+-1", "uprobe:/x:f+zz",
                          "tracepoint:a:b", "kprobe:f+ 4", "kprobe:f+0x", "kprobe:f+"}) {
    auto st = ParseProbeRef(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_TRUE(st.status().message().find("valid forms") != std::string::npos ||
                st.status().message().find("is not a number of bytes") != std::string::npos)
        << st.status().message();
  }
  EXPECT_TRUE(IsProbeEvent("usdt:/x:p:n"));
  EXPECT_FALSE(IsProbeEvent("sched:sched_switch"));
}

TEST(ParseProbeArgTest, ArgsRetvalTypesAndRefusals) {
  const ProbeRef entry = *ParseProbeRef("uprobe:/x:f");
  const ProbeRef ret = *ParseProbeRef("uretprobe:/x:f");
  const ProbeRef usdt = *ParseProbeRef("usdt:/x:p:n");
  const std::string too_long(33, 'a');  // outlives the table below
  auto a = ParseProbeArg(entry, "size", "arg1:u32");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->index, 1);
  EXPECT_EQ(a->type, "u32");
  EXPECT_TRUE(ParseProbeArg(ret, "rv", "retval:s64")->retval);
  EXPECT_TRUE(ParseProbeArg(usdt, "a", "arg11").ok());
  struct Bad {
    const ProbeRef* probe;
    const char* field;
    const char* spec;
    const char* says;
  } bads[] = {
      {&entry, "rv", "retval", "only for uretprobe"},
      {&ret, "a", "arg0", "return probe has no arguments"},
      {&entry, "a", "arg6", "on the stack"},
      {&usdt, "a", "arg12", "arg0 to arg11"},
      {&entry, "a", "arg0:u128", "is not one of"},
      {&entry, "common_pid", "arg0", "not a valid field"},
      {&entry, "1x", "arg0", "not a valid field"},
      {&entry, "a", "x0", "argN[:TYPE] or retval"},
      {&entry, "a", "arg0:", "type after ':' is missing"},
      {&entry, too_long.c_str(), "arg0", "32"},
  };
  for (const Bad& b : bads) {
    auto st = ParseProbeArg(*b.probe, b.field, b.spec);
    ASSERT_FALSE(st.ok()) << b.spec;
    EXPECT_NE(st.status().message().find(b.says), std::string::npos) << st.status().message();
  }
}

elf::UsdtArgument Usdt(const std::string& spec) { return *elf::ParseUsdtArgument(spec); }

TEST(FetchArgsTest, RegistersStringsRetvalAndUsdtSpecs) {
  const ProbeRef entry = *ParseProbeRef("uprobe:/x:f");
  std::vector<ProbeArg> args = {*ParseProbeArg(entry, "a", "arg0"), *ParseProbeArg(entry, "b", "arg5:s32"),
                                *ParseProbeArg(entry, "s", "arg1:ustring")};
  auto f = FetchArgs(entry, args, {});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f, (std::vector<std::pair<std::string, std::string>>{
                    {"a", "%di:u64"}, {"b", "%r9:s32"}, {"s", "+0(%si):string"}}));
  const ProbeRef ret = *ParseProbeRef("kretprobe:f");
  EXPECT_EQ(FetchArgs(ret, {*ParseProbeArg(ret, "rv", "retval:s32")}, {})->at(0).second, "$retval:s32");
  // CPython 3.11's python:audit is "8@%rbx 8@%r15"; gc__start "-4@112(%rsp)".
  const ProbeRef usdt = *ParseProbeRef("usdt:/x:python:audit");
  auto u = FetchArgs(usdt, {*ParseProbeArg(usdt, "event", "arg0:ustring"), *ParseProbeArg(usdt, "t", "arg1")},
                     {Usdt("8@%rbx"), Usdt("8@%r15")});
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(*u, (std::vector<std::pair<std::string, std::string>>{{"event", "+0(%bx):string"}, {"t", "%r15:u64"}}));
  auto g = FetchArgs(usdt, {*ParseProbeArg(usdt, "generation", "arg0")}, {Usdt("-4@112(%rsp)")});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->at(0).second, "+112(%sp):s32");
  EXPECT_EQ(FetchArgs(usdt, {*ParseProbeArg(usdt, "x", "arg0")}, {Usdt("-8@-24(%rbp)")})->at(0).second, "-24(%bp):s64");
  // Refused: an argument the probe lacks, a constant, a string in a 4-byte argument.
  EXPECT_NE(
      FetchArgs(usdt, {*ParseProbeArg(usdt, "x", "arg2")}, {Usdt("8@%rbx")}).status().message().find("has 1 arguments"),
      std::string::npos);
  EXPECT_NE(
      FetchArgs(usdt, {*ParseProbeArg(usdt, "x", "arg0")}, {Usdt("4@$42")}).status().message().find("constant 42"),
      std::string::npos);
  EXPECT_NE(FetchArgs(usdt, {*ParseProbeArg(usdt, "x", "arg0:ustring")}, {Usdt("-4@%eax")})
                .status()
                .message()
                .find("not a pointer"),
            std::string::npos);
}

// A uprobe's string is always user memory, and kernels before the ustring type refuse that name:
// uprobes, uretprobes and USDT probes write "string" for both types. A kprobe keeps the
// distinction (ustring: user memory, string: kernel memory).
TEST(FetchArgsTest, UprobeStringsAreWrittenStringKprobesKeepUstring) {
  using Args = std::vector<std::pair<std::string, std::string>>;
  for (const char* event : {"uprobe:/x:f", "uretprobe:/x:f"}) {
    const ProbeRef u = *ParseProbeRef(event);
    const bool ret = u.kind == ProbeKind::kUretprobe;
    auto f = FetchArgs(u,
                       {*ParseProbeArg(u, "a", ret ? "retval:ustring" : "arg0:ustring"),
                        *ParseProbeArg(u, "b", ret ? "retval:string" : "arg1:string")},
                       {});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(*f, ret ? (Args{{"a", "+0($retval):string"}, {"b", "+0($retval):string"}})
                      : (Args{{"a", "+0(%di):string"}, {"b", "+0(%si):string"}}))
        << event;
  }
  const ProbeRef usdt = *ParseProbeRef("usdt:/x:python:audit");
  EXPECT_EQ(*FetchArgs(usdt, {*ParseProbeArg(usdt, "event", "arg0:ustring")}, {Usdt("8@%rbx")}),
            (Args{{"event", "+0(%bx):string"}}));
  const ProbeRef k = *ParseProbeRef("kprobe:do_sys_openat2");
  EXPECT_EQ(*FetchArgs(k, {*ParseProbeArg(k, "path", "arg1:ustring"), *ParseProbeArg(k, "comm", "arg0:string")}, {}),
            (Args{{"path", "+0(%si):ustring"}, {"comm", "+0(%di):string"}}));
  const ProbeRef kr = *ParseProbeRef("kretprobe:f");
  EXPECT_EQ(FetchArgs(kr, {*ParseProbeArg(kr, "s", "retval:ustring")}, {})->at(0).second, "+0($retval):ustring");
}

TEST(ProbeEventNameTest, ValidStableAndDistinct) {
  const ProbeRef ref = *ParseProbeRef("usdt:/usr/bin/python3.11:python:audit");
  ProbeEventSpec a;
  a.path = "/usr/bin/python3.11";
  a.offset = 0x42512a;
  a.ref_ctr_offset = 0x684276;
  ProbeEventSpec b = a;
  b.args = {{"event", "+0(%bx):ustring"}};
  const std::string na = ProbeEventName(ref, a), nb = ProbeEventName(ref, b);
  EXPECT_TRUE(na.starts_with("usdt_python_audit_")) << na;
  EXPECT_EQ(na, ProbeEventName(ref, a));
  EXPECT_NE(na, nb);
  const ProbeRef longname = *ParseProbeRef("uprobe:/x:" + std::string(100, 'f') + "::g");
  EXPECT_LE(ProbeEventName(longname, a).size(), 63u);
  a.group = "tpe_1";
  a.event = ProbeEventName(longname, a);
  EXPECT_TRUE(ProbeEventLine(a).ok()) << a.event;
}

}  // namespace
}  // namespace tpe
