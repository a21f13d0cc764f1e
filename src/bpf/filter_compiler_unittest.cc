#include "bpf/filter_compiler.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "bpf/interpreter.h"
#include "common/file_util.h"
#include "format/event_format.h"
#include "testing/formats.h"
#include "testing/test_util.h"

namespace tpe::bpf {
namespace {

using testing::LoadFormat;
EventFormat Event(const std::string& sys, const std::string& ev) { return testing::CapturedFormat(sys, ev); }

// Every integer size and signedness, a misaligned int and u64, a 5-byte char array, a 2-byte
// array (compared as one unsigned integer) and a 200-byte char array.
EventFormat Synthetic() {
  auto f = testing::ParseSyntheticFormat(
      "\tfield:u8 u8v;\toffset:8;\tsize:1;\tsigned:0;\n"
      "\tfield:s8 s8v;\toffset:9;\tsize:1;\tsigned:1;\n"
      "\tfield:u16 u16v;\toffset:10;\tsize:2;\tsigned:0;\n"
      "\tfield:s16 s16v;\toffset:12;\tsize:2;\tsigned:1;\n"
      "\tfield:u32 u32v;\toffset:16;\tsize:4;\tsigned:0;\n"
      "\tfield:s32 s32v;\toffset:20;\tsize:4;\tsigned:1;\n"
      "\tfield:u64 u64v;\toffset:24;\tsize:8;\tsigned:0;\n"
      "\tfield:s64 s64v;\toffset:32;\tsize:8;\tsigned:1;\n"
      "\tfield:char name[5];\toffset:40;\tsize:5;\tsigned:0;\n"
      "\tfield:int odd;\toffset:45;\tsize:4;\tsigned:1;\n"
      "\tfield:u64 odd64;\toffset:49;\tsize:8;\tsigned:0;\n"
      "\tfield:u8 arr[2];\toffset:58;\tsize:2;\tsigned:0;\n"
      "\tfield:char big[200];\toffset:60;\tsize:200;\tsigned:0;\n"
      "\tfield:__data_loc char[] msg;\toffset:260;\tsize:4;\tsigned:0;\n"
      "\tfield:const char * ptr;\toffset:264;\tsize:8;\tsigned:0;\n"
      "\tfield:__data_loc cpumask_t mask;\toffset:272;\tsize:4;\tsigned:0;\n");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? *f : EventFormat{};
}

size_t RecordSize(const EventFormat& f) {
  size_t n = 8;
  for (const auto& x : f.fields) n = std::max<size_t>(n, x.offset + x.size);
  return (n + 7) / 8 * 8;
}

// r6 = r1; <filter>; r0 = 1; exit; false: r0 = 0; exit.
StatusOr<std::vector<bpf_insn>> Program(const FilterExpr& e, uint32_t nr_cpu_ids = 0) {
  Assembler a;
  a.MovReg(R6, R1);
  Label no = a.NewLabel();
  FilterCodeContext cx;
  cx.nr_cpu_ids = nr_cpu_ids;
  TPE_RETURN_IF_ERROR(CompileFilter(e, cx, &a, no));
  a.Mov(R0, 1);
  a.Exit();
  a.Bind(no);
  a.Mov(R0, 0);
  a.Exit();
  return a.Finish();
}

// What the kernel's filter decides on `record`: common_pid is the task's tid.
bool Reference(const FilterExpr& e, std::string record, const FakeTask& t, uint32_t nr_cpu_ids = 0) {
  std::memcpy(record.data() + 4, &t.tid, 4);
  FilterContext ctx;
  ctx.cpu = t.cpu;
  ctx.comm = t.comm;
  ctx.nr_cpu_ids = nr_cpu_ids;
  return EvaluateFilter(e, Bytes(reinterpret_cast<const uint8_t*>(record.data()), record.size()), ctx);
}

// What the program decides: the first 8 bytes are a pt_regs pointer, not the common fields.
// The instructions that no path from the first reaches, as the verifier's check_cfg
// (kernel/bpf/verifier.c) sees paths: both edges of a conditional jump, only the target of
// BPF_JA, nothing after BPF_EXIT, a 16-byte BPF_LD_IMM64 as one. It refuses a program with
// any ("unreachable insn N").
std::vector<size_t> Unreachable(const std::vector<bpf_insn>& prog) {
  std::vector<bool> seen(prog.size(), false);
  std::vector<size_t> todo = {0};
  while (!todo.empty()) {
    const size_t i = todo.back();
    todo.pop_back();
    if (i >= prog.size() || seen[i]) continue;
    seen[i] = true;
    const bpf_insn& in = prog[i];
    const uint8_t cls = BPF_CLASS(in.code);
    if (in.code == (BPF_LD | BPF_IMM | BPF_DW)) {
      if (i + 1 < prog.size()) seen[i + 1] = true;
      todo.push_back(i + 2);
      continue;
    }
    if (cls != BPF_JMP && cls != BPF_JMP32) {
      todo.push_back(i + 1);
      continue;
    }
    const uint8_t op = BPF_OP(in.code);
    if (op == BPF_EXIT) continue;
    if (op == BPF_CALL) {
      todo.push_back(i + 1);
      continue;
    }
    todo.push_back(static_cast<size_t>(static_cast<int64_t>(i) + 1 + in.off));
    if (op != BPF_JA) todo.push_back(i + 1);
  }
  std::vector<size_t> out;
  for (size_t i = 0; i < prog.size(); ++i) {
    if (!seen[i]) out.push_back(i);
  }
  return out;
}

StatusOr<bool> RunProgram(const std::vector<bpf_insn>& prog, std::string record, const FakeTask& t) {
  std::memset(record.data(), 0xa5, 8);
  Interpreter in;
  TPE_ASSIGN_OR_RETURN(uint64_t r0, in.Run(prog, record, t));
  return r0 != 0;
}

class FilterCompilerTest : public ::testing::Test {
 protected:
  // Parses `filter` against `fmt`, compiles it, runs it on `record` and checks that the
  // program agrees with EvaluateFilter; returns the decision.
  bool Decide(const EventFormat& fmt, const std::string& filter, const std::string& record, const FakeTask& t,
              uint32_t nr_cpu_ids = 0) {
    auto e = ParseFilter(filter, fmt);
    EXPECT_TRUE(e.ok()) << filter << ": " << e.status().ToString();
    if (!e.ok()) return false;
    auto prog = Program(*e, nr_cpu_ids);
    EXPECT_TRUE(prog.ok()) << filter << ": " << prog.status().ToString();
    if (!prog.ok()) return false;
    auto got = RunProgram(*prog, record, t);
    EXPECT_TRUE(got.ok()) << filter << ": " << got.status().ToString() << "\n" << Disassemble(*prog);
    const bool want = Reference(*e, record, t, nr_cpu_ids);
    EXPECT_EQ(got.ok() && *got, want) << filter << "\n" << Disassemble(*prog);
    return want;
  }

  // The error CheckFilterCompiles gives for `filter` (which must parse).
  Status Check(const EventFormat& fmt, const std::string& filter) {
    auto e = ParseFilter(filter, fmt);
    EXPECT_TRUE(e.ok()) << filter << ": " << e.status().ToString();
    if (!e.ok()) return Status::Ok();
    return CheckFilterCompiles(*e);
  }

  // A sched_switch record.
  std::string Switch(const std::string& prev_comm, int32_t prev_pid, int64_t prev_state, const std::string& next_comm,
                     int32_t next_pid) {
    std::string r(64, '\0');
    std::memcpy(r.data() + 8, prev_comm.data(), std::min<size_t>(prev_comm.size(), 16));
    std::memcpy(r.data() + 24, &prev_pid, 4);
    int32_t prio = 120;
    std::memcpy(r.data() + 28, &prio, 4);
    std::memcpy(r.data() + 32, &prev_state, 8);
    std::memcpy(r.data() + 40, next_comm.data(), std::min<size_t>(next_comm.size(), 16));
    std::memcpy(r.data() + 56, &next_pid, 4);
    std::memcpy(r.data() + 60, &prio, 4);
    return r;
  }

  template <typename T>
  std::string Synth(size_t offset, T v) {
    std::string r(RecordSize(synth_), '\0');
    std::memcpy(r.data() + offset, &v, sizeof(v));
    return r;
  }

  EventFormat sched_switch_ = Event("sched", "sched_switch");
  EventFormat synth_ = Synthetic();
  FakeTask task_{100, 101, 2, "bash", 0, 0};
};

TEST_F(FilterCompilerTest, IntegerOperators) {
  const std::string r = Switch("a", 10, 1, "b", 20);
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid == 10", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_pid != 10", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid < 11", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_pid < 10", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid <= 10", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "next_pid > 19", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "next_pid > 20", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "next_pid >= 20", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_state & 1", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_state & 0x6", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_state & 0", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "!(prev_state & 1)", r, task_));
}

TEST_F(FilterCompilerTest, SignedAndUnsignedCasts) {
  // int x < 4294967296 is x < 0 (the literal is cast to the field's 4 bytes).
  EXPECT_TRUE(Decide(synth_, "s32v < 4294967296", Synth<int32_t>(20, -5), task_));
  EXPECT_FALSE(Decide(synth_, "s32v < 4294967296", Synth<int32_t>(20, 5), task_));
  EXPECT_TRUE(Decide(synth_, "s32v == 4294967291", Synth<int32_t>(20, -5), task_));
  EXPECT_TRUE(Decide(synth_, "s8v < 0", Synth<int8_t>(9, -1), task_));
  EXPECT_TRUE(Decide(synth_, "s8v > 127", Synth<int8_t>(9, -1), task_) == false);
  EXPECT_TRUE(Decide(synth_, "s8v == 255", Synth<int8_t>(9, -1), task_));
  EXPECT_TRUE(Decide(synth_, "u8v > 127", Synth<uint8_t>(8, 200), task_));
  EXPECT_TRUE(Decide(synth_, "u8v == 456", Synth<uint8_t>(8, 200), task_));  // 456 & 0xff = 200
  EXPECT_TRUE(Decide(synth_, "s16v <= -32768", Synth<int16_t>(12, -32768), task_));
  EXPECT_TRUE(Decide(synth_, "u16v >= 0x8000", Synth<uint16_t>(10, 0x8000), task_));
  EXPECT_TRUE(Decide(synth_, "u32v > 0x7fffffff", Synth<uint32_t>(16, 0x80000000u), task_));
  EXPECT_TRUE(Decide(synth_, "u32v & 0x80000000", Synth<uint32_t>(16, 0x80000000u), task_));
  EXPECT_TRUE(Decide(synth_, "u64v > 0x7fffffffffffffff", Synth<uint64_t>(24, ~uint64_t{0}), task_));
  EXPECT_TRUE(Decide(synth_, "s64v < -9223372036854775807", Synth<int64_t>(32, INT64_MIN), task_));
  EXPECT_TRUE(Decide(synth_, "u64v & 0x100000000", Synth<uint64_t>(24, uint64_t{1} << 32), task_));
  // Misaligned fields are assembled from byte loads; arrays of 2 bytes compare unsigned.
  EXPECT_TRUE(Decide(synth_, "odd == -2", Synth<int32_t>(45, -2), task_));
  EXPECT_TRUE(Decide(synth_, "odd < -1", Synth<int32_t>(45, -2), task_));
  EXPECT_TRUE(Decide(synth_, "odd64 == 0x0102030405060708", Synth<uint64_t>(49, 0x0102030405060708), task_));
  EXPECT_TRUE(Decide(synth_, "arr > 0x7fff", Synth<uint16_t>(58, 0xff00), task_));
}

TEST_F(FilterCompilerTest, AndOrNotPrecedence) {
  const std::string r = Switch("a", 1, 0, "b", 2);
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid == 1 || prev_pid == 5 && next_pid == 9", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "(prev_pid == 1 || prev_pid == 5) && next_pid == 9", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid == 7 || !(next_pid == 9) && prev_pid == 1", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "!(prev_pid == 1 || next_pid == 9)", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "!!(prev_pid == 1) && !(!(next_pid == 2) || prev_pid == 3)", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid == 3 || next_pid == 3 || prev_state == 0", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_pid == 1 && next_pid == 2 && prev_state == 1", r, task_));
}

TEST_F(FilterCompilerTest, CharArrayStrings) {
  const std::string r = Switch("kworker/0:1", 1, 0, "swapper/0", 0);
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm == \"kworker/0:1\"", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_comm == \"kworker/0\"", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_comm == \"kworker/0:12\"", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm != \"kworker\"", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"kworker/0:1\"", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"kwork*\"", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_comm ~ \"work*\"", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"*er/0*\"", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "prev_comm ~ \"*er/1*\"", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"!swap*\"", r, task_));
  EXPECT_FALSE(Decide(sched_switch_, "next_comm ~ \"!swap*\"", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"*\"", r, task_));
  // The suffix quirk: "*x" matches the end of the whole 16-byte array, so "*0:1" does not
  // match "kworker/0:1", but a 15-character name ending in "0:1" does.
  EXPECT_FALSE(Decide(sched_switch_, "prev_comm ~ \"*0:1\"", r, task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"*0:1\"", Switch("kworker/u1:20:1", 1, 0, "x", 0), task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"!*0:1\"", r, task_));
  // Substring search sees stale bytes after the NUL.
  std::string stale = r;
  std::memcpy(stale.data() + 8 + 12, "zz", 2);
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"*zz*\"", stale, task_));
  // A pattern starting with a digit is compared literally.
  EXPECT_FALSE(Decide(sched_switch_, "prev_comm ~ \"1*\"", Switch("123", 1, 0, "x", 0), task_));
  EXPECT_TRUE(Decide(sched_switch_, "prev_comm ~ \"1*\"", Switch("1*", 1, 0, "x", 0), task_));
  // Patterns longer than the array.
  EXPECT_FALSE(Decide(synth_, "name ~ \"abcdef*\"", Synth<char>(40, 'a'), task_));
  EXPECT_FALSE(Decide(synth_, "name ~ \"*abcd\"", Synth<char>(40, 'a'), task_));
  EXPECT_FALSE(Decide(synth_, "name ~ \"*abcdef*\"", Synth<char>(40, 'a'), task_));
  std::string full = Synth<char>(40, 'a');
  std::memcpy(full.data() + 40, "abcde", 5);
  EXPECT_TRUE(Decide(synth_, "name == \"abcdefgh\"", full, task_));  // strncmp over 5 bytes
  EXPECT_TRUE(Decide(synth_, "name ~ \"*abcd\"", full, task_));
}

TEST_F(FilterCompilerTest, CommCpuAndCommonPid) {
  const std::string r = Switch("a", 1, 0, "b", 2);
  FakeTask t = task_;
  t.comm = "systemd-journald";  // 16 characters: the task name keeps 15
  EXPECT_TRUE(Decide(sched_switch_, "COMM == \"systemd-journal\"", r, t));
  EXPECT_FALSE(Decide(sched_switch_, "comm == \"systemd-journald\"", r, t));
  EXPECT_TRUE(Decide(sched_switch_, "COMM ~ \"*journal\"", r, t));  // quirk: fills the array
  EXPECT_TRUE(Decide(sched_switch_, "COMM ~ \"sys*\" && COMM ~ \"*md-j*\"", r, t));
  EXPECT_TRUE(Decide(sched_switch_, "COMM != \"bash\"", r, t));
  t.comm = "bash";
  EXPECT_TRUE(Decide(sched_switch_, "COMM == \"bash\" && prev_pid == 1", r, t));
  EXPECT_FALSE(Decide(sched_switch_, "COMM ~ \"*sh\"", r, t));

  t.cpu = 3;
  EXPECT_TRUE(Decide(sched_switch_, "CPU == 3", r, t));
  EXPECT_TRUE(Decide(sched_switch_, "cpu >= 3 && common_cpu < 4", r, t));
  EXPECT_FALSE(Decide(sched_switch_, "CPU != 3", r, t));
  t.cpu = 0x80000000u;  // compared as a signed int
  EXPECT_TRUE(Decide(sched_switch_, "CPU < 0", r, t));

  t.tid = 4242;
  t.pid = 7;
  EXPECT_TRUE(Decide(sched_switch_, "common_pid == 4242", r, t));
  EXPECT_FALSE(Decide(sched_switch_, "common_pid == 7", r, t));
  EXPECT_TRUE(Decide(sched_switch_, "common_pid > 4000 && common_pid & 2", r, t));
  t.tid = 0xfffffffe;
  EXPECT_TRUE(Decide(sched_switch_, "common_pid < 0", r, t));
  EXPECT_TRUE(Decide(sched_switch_, "common_pid == -2", r, t));
}

TEST_F(FilterCompilerTest, Cpus) {
  const std::string r = Switch("a", 5, 0, "b", 2);
  FakeTask t = task_;
  for (uint32_t cpu : {0u, 1u, 3u, 4u, 8u, 9u, 100u, 8191u, 8192u}) {
    t.cpu = cpu;
    SCOPED_TRACE(cpu);
    Decide(sched_switch_, "CPU & CPUS{0-3,8}", r, t);
    Decide(sched_switch_, "CPU == CPUS{0-3,8}", r, t);
    Decide(sched_switch_, "CPU != CPUS{0-3,8}", r, t);
    Decide(sched_switch_, "CPU & CPUS{3}", r, t);
    Decide(sched_switch_, "CPU == CPUS{3}", r, t);
    Decide(sched_switch_, "CPU != CPUS{3}", r, t);
    Decide(sched_switch_, "CPU != CPUS{0-3,8}", r, t, 8);
    Decide(sched_switch_, "CPU & CPUS{0-3,8}", r, t, 4);
  }
  t.cpu = 2;
  EXPECT_TRUE(Decide(sched_switch_, "CPU & CPUS{0-3,8}", r, t));
  EXPECT_FALSE(Decide(sched_switch_, "CPU & CPUS{4-7}", r, t));
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid & CPUS{4-7}", r, t));
  EXPECT_TRUE(Decide(sched_switch_, "prev_pid == CPUS{5}", r, t));
  EXPECT_FALSE(Decide(sched_switch_, "prev_pid != CPUS{0-9}", Switch("a", -1, 0, "b", 2), t));
  EXPECT_TRUE(Decide(synth_, "u64v & CPUS{1,3}", Synth<uint64_t>(24, (uint64_t{1} << 32) | 3), t));
  EXPECT_TRUE(Decide(synth_, "u8v & CPUS{1,300}", Synth<uint8_t>(8, 1), t));
  EXPECT_TRUE(Decide(synth_, "common_pid & CPUS{101,103}", Synth<uint8_t>(8, 1), t));
}

// __data_loc strings (the kernel's filter_pred_strloc): strncmp over the length the __data_loc
// word gives, prefix patterns false for a shorter length; the string is read from ctx + offset.
TEST_F(FilterCompilerTest, DataLocStrings) {
  auto rec = [&](const std::string& bytes, uint32_t len) {
    std::string r(RecordSize(synth_) + 64, '\0');
    const uint32_t at = static_cast<uint32_t>(RecordSize(synth_));
    std::memcpy(r.data() + at, bytes.data(), bytes.size());
    const uint32_t loc = len << 16 | at;
    std::memcpy(r.data() + 260, &loc, 4);
    return r;
  };
  const std::string x = rec(std::string("tpe_x\0", 6), 6);
  EXPECT_TRUE(Decide(synth_, "msg == \"tpe_x\"", x, task_));
  EXPECT_FALSE(Decide(synth_, "msg == \"tpe_\"", x, task_));
  EXPECT_FALSE(Decide(synth_, "msg == \"tpe_xy\"", x, task_));
  EXPECT_FALSE(Decide(synth_, "msg != \"tpe_x\"", x, task_));
  EXPECT_TRUE(Decide(synth_, "msg != \"tpe_y\"", x, task_));
  EXPECT_TRUE(Decide(synth_, "msg ~ \"tpe*\"", x, task_));
  EXPECT_FALSE(Decide(synth_, "msg ~ \"tpx*\"", x, task_));
  EXPECT_FALSE(Decide(synth_, "msg ~ \"!tpe*\"", x, task_));
  EXPECT_FALSE(Decide(synth_, "msg == \"\"", x, task_));
  EXPECT_TRUE(Decide(synth_, "msg == \"\"", rec(std::string(1, '\0'), 1), task_));
  EXPECT_TRUE(Decide(synth_, "u8v == 0 && msg == \"tpe_x\" && s8v == 0", x, task_));
  // A length without the NUL: strncmp over 3 bytes.
  const std::string short3 = rec("tpe_x", 3);
  EXPECT_TRUE(Decide(synth_, "msg == \"tpe\"", short3, task_));
  EXPECT_TRUE(Decide(synth_, "msg == \"tpeXYZ\"", short3, task_));
  EXPECT_FALSE(Decide(synth_, "msg == \"tpX\"", short3, task_));
  EXPECT_FALSE(Decide(synth_, "msg ~ \"tpe_*\"", short3, task_));
  EXPECT_TRUE(Decide(synth_, "msg ~ \"tp*\"", short3, task_));
  // Longer than the 32 bytes read: a full match needs the NUL within them, a prefix does not.
  const std::string forty = std::string(40, 'a');
  const std::string long40 = rec(forty + std::string(1, '\0'), 41);
  EXPECT_FALSE(Decide(synth_, "msg == \"" + forty.substr(0, 31) + "\"", long40, task_));
  EXPECT_TRUE(Decide(synth_, "msg ~ \"" + forty.substr(0, 32) + "*\"", long40, task_));
  EXPECT_FALSE(Decide(synth_, "msg ~ \"" + forty.substr(0, 31) + "b*\"", long40, task_));
}

TEST_F(FilterCompilerTest, UnimplementedReasons) {
  struct Case {
    const char* filter;
    const char* reason;
  };
  const Case cases[] = {
      {"prev_comm ~ \"k*r\"", "glob"}, {"prev_comm ~ \"k?\"", "glob"},          {"COMM ~ \"[ab]*\"", "glob"},
      {"common_flags & 1", "pt_regs"}, {"common_preempt_count > 0", "pt_regs"}, {"common_type == 372", "pt_regs"},
  };
  for (const Case& c : cases) {
    Status s = Check(sched_switch_, c.filter);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << c.filter;
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << s.message();
  }
  const Case synth_cases[] = {
      {"msg ~ \"*x\"", "__data_loc"},
      {"msg ~ \"*x*\"", "__data_loc"},
      {"msg == \"0123456789abcdef0123456789abcdef\"", "more than 31 bytes"},
      {"ptr == \"x\"", "char *"},
      {"ptr.ustring ~ \"x*\"", "user"},
      {"mask & CPUS{1}", "cpumask"},
      {"big ~ \"*abcdefghij*\"", "byte compares"},
      {"u8v == 1 && (s8v == 2 || big ~ \"*0123456789abcdefghij*\")", "column 26"},
  };
  for (const Case& c : synth_cases) {
    Status s = Check(synth_, c.filter);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << c.filter;
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << s.message();
  }
  EventFormat rel = LoadFormat(testing::DataDir() + "/synthetic/events/sample/foo_rel/format");
  Status rs = Check(rel, "ok == 1 && msg ~ \"x*\"");
  EXPECT_EQ(rs.code(), StatusCode::kUnimplemented);
  EXPECT_NE(rs.message().find("__rel_loc"), std::string::npos) << rs.message();
  EXPECT_TRUE(Check(rel, "ok == 1").ok());
  // The message names the predicate as FilterToString prints it, and its column.
  Status s = Check(sched_switch_, "prev_pid == 1 && prev_comm ~ 'k*r'");
  EXPECT_EQ(s.message().rfind("prev_comm ~ \"k*r\" at column 18: glob", 0), 0u) << s.message();
  // A small substring search on a big array compiles.
  EXPECT_TRUE(Check(synth_, "big ~ \"*abcd*\"").ok());

  // Nothing is emitted on error; a bad context is InvalidArgument.
  auto e = ParseFilter("prev_pid == 1 || common_flags == 2", sched_switch_);
  ASSERT_TRUE(e.ok());
  Assembler a;
  Label no = a.NewLabel();
  EXPECT_EQ(CompileFilter(*e, FilterCodeContext{}, &a, no).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(a.size(), 0u);
  auto ok = ParseFilter("COMM == \"x\"", sched_switch_);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(CompileFilter(*ok, FilterCodeContext{R1, -48}, &a, no).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CompileFilter(*ok, FilterCodeContext{R6, -16}, &a, no).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CompileFilter(*ok, FilterCodeContext{R6, -520}, &a, no).code(), StatusCode::kInvalidArgument);
}

TEST_F(FilterCompilerTest, PreservesCalleeSavedRegistersAndOtherContexts) {
  // ctx in R9, scratch at -32: R6-R8 and the stack outside the scratch survive.
  auto e = ParseFilter("COMM ~ \"*a*\" && CPU == 2 && common_pid == 101 && prev_pid == 1 || prev_comm == \"x\"",
                       sched_switch_);
  ASSERT_TRUE(e.ok());
  Assembler a;
  a.MovReg(R9, R1);
  a.Mov(R6, 6);
  a.Mov(R7, 7);
  a.Mov(R8, 8);
  a.StoreImm(8, R10, -40, 1234);
  Label no = a.NewLabel(), bad = a.NewLabel();
  ASSERT_TRUE(CompileFilter(*e, FilterCodeContext{R9, -32}, &a, no).ok());
  a.Jump(BPF_JNE, R6, 6, bad);
  a.Jump(BPF_JNE, R7, 7, bad);
  a.Jump(BPF_JNE, R8, 8, bad);
  a.Load(8, R0, R10, -40);
  a.Jump(BPF_JNE, R0, 1234, bad);
  a.Mov(R0, 1);
  a.Exit();
  a.Bind(no);
  a.Mov(R0, 0);
  a.Exit();
  a.Bind(bad);
  a.Mov(R0, 99);
  a.Exit();
  auto prog = a.Finish();
  ASSERT_TRUE(prog.ok());
  FakeTask t = task_;
  t.comm = "bash";
  Interpreter in;
  auto r = in.Run(*prog, Switch("y", 1, 0, "z", 0), t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 1u);
  t.comm = "sh";
  r = in.Run(*prog, Switch("x", 1, 0, "z", 0), t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 1u);
  r = in.Run(*prog, Switch("y", 1, 0, "z", 0), t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 0u);
}

// ---------------------------------------------------------------------------------------------
// Differential test: random filters and records, the compiled program against EvaluateFilter.

class Fuzzer {
 public:
  Fuzzer(const EventFormat& fmt, uint64_t seed) : fmt_(fmt), rng_(seed) {}

  uint64_t Below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

  uint64_t EdgeValue() {
    static constexpr uint64_t kEdges[] = {0,
                                          1,
                                          2,
                                          3,
                                          5,
                                          8,
                                          0x7f,
                                          0x80,
                                          0xff,
                                          0x100,
                                          0x7fff,
                                          0x8000,
                                          0xffff,
                                          0x10000,
                                          0x7fffffff,
                                          0x80000000,
                                          0xffffffff,
                                          0x100000000,
                                          0x100000001,
                                          0x7fffffffffffffff,
                                          0x8000000000000000,
                                          0xfffffffffffffffe,
                                          0xffffffffffffffff};
    switch (Below(4)) {
      case 0:
        return rng_();
      case 1:
        return Below(10);
      default:
        return kEdges[Below(std::size(kEdges))];
    }
  }

  std::string Letters(size_t max_len) {
    std::string s;
    const size_t n = Below(max_len + 1);
    for (size_t i = 0; i < n; ++i) s += "ab"[Below(2)];
    return s;
  }

  std::string Literal(bool is_signed) {
    const uint64_t v = EdgeValue();
    if (is_signed && Below(2)) return std::to_string(static_cast<int64_t>(v));
    if (Below(3) == 0) {
      char buf[24];
      std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
      return buf;
    }
    if (is_signed && v > INT64_MAX) return std::to_string(static_cast<int64_t>(v));
    return std::to_string(v);
  }

  std::string Cpus() {
    std::string s = "CPUS{";
    const size_t n = 1 + Below(3);
    uint32_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      at += static_cast<uint32_t>(Below(4));
      if (i) s += ",";
      if (Below(2)) {
        const uint32_t end = at + static_cast<uint32_t>(Below(4));
        s += std::to_string(at) + "-" + std::to_string(end);
        at = end;
      } else {
        s += std::to_string(at);
      }
      at += 2;
    }
    return s + "}";
  }

  std::string StringPredicate(const std::string& name) {
    static const char* kOps[] = {"==", "!=", "~"};
    const std::string op = kOps[Below(3)];
    std::string pat = Letters(5);
    if (op == "~") {
      switch (Below(6)) {
        case 0:
          pat += "*";
          break;
        case 1:
          pat = "*" + pat;
          break;
        case 2:
          pat = "*" + pat + "*";
          break;
        case 3:
          pat = "1" + pat + "*";  // a leading digit: compared literally
          break;
        default:
          break;
      }
      if (Below(4) == 0) pat = "!" + pat;
    }
    return name + " " + op + " \"" + pat + "\"";
  }

  std::string Predicate() {
    // A record field, or CPU/COMM/common_pid.
    const size_t n = fmt_.fields.size();
    const uint64_t pick = Below(n + 3);
    if (pick == n) {
      static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">="};
      if (Below(3) == 0) return std::string("CPU ") + (Below(2) ? "&" : Below(2) ? "==" : "!=") + " " + Cpus();
      return std::string("CPU ") + kOps[Below(6)] + " " + std::to_string(Below(10));
    }
    if (pick == n + 1) return StringPredicate(Below(2) ? "COMM" : "comm");
    // common_type/flags/preempt_count are Unimplemented: pick them rarely.
    const bool pid = pick == n + 2 || (fmt_.fields[pick].is_common && Below(8) != 0);
    const FieldFormat& f = pid ? *fmt_.FindField("common_pid") : fmt_.fields[pick];
    if (f.kind == FieldKind::kCharArray) return StringPredicate(f.name);
    static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">=", "&"};
    if (Below(8) == 0) return f.name + " " + (Below(2) ? "&" : Below(2) ? "==" : "!=") + " " + Cpus();
    return f.name + " " + kOps[Below(7)] + " " + Literal(f.is_signed);
  }

  std::string Filter(int depth) {
    const uint64_t r = Below(10);
    if (depth >= 3 || r < 4) return Predicate();
    if (r < 6) return "!(" + Filter(depth + 1) + ")";
    const char* op = Below(2) ? " && " : " || ";
    std::string a = Filter(depth + 1), b = Filter(depth + 1);
    if (Below(2)) a = "(" + a + ")";
    if (Below(2)) b = "(" + b + ")";
    return a + op + b;
  }

  std::string Record() {
    std::string r(RecordSize(fmt_), '\0');
    for (auto& c : r) c = static_cast<char>(Below(256));
    for (const auto& f : fmt_.fields) {
      if (f.kind == FieldKind::kCharArray) {
        std::string s = Letters(f.size);
        for (uint32_t i = 0; i < f.size; ++i) {
          r[f.offset + i] = i < s.size() ? s[i] : i == s.size() ? '\0' : "ab\0"[Below(3)];
        }
      } else if (f.size <= 8) {
        const uint64_t v = EdgeValue();
        std::memcpy(r.data() + f.offset, &v, f.size);
      }
    }
    return r;
  }

  FakeTask Task() {
    static constexpr uint32_t kCpus[] = {0, 1,   2,    3,    4,          5,          7,         8,
                                         9, 100, 8191, 8192, 0x7fffffff, 0x80000000, 0xffffffff};
    FakeTask t;
    t.cpu = kCpus[Below(std::size(kCpus))];
    t.tid = static_cast<uint32_t>(EdgeValue());
    t.pid = static_cast<uint32_t>(rng_());
    t.comm = Letters(17);
    return t;
  }

 private:
  const EventFormat& fmt_;
  std::mt19937_64 rng_;
};

TEST_F(FilterCompilerTest, DifferentialAgainstEvaluateFilter) {
  const std::vector<EventFormat> formats = {sched_switch_, Event("syscalls", "sys_enter_openat"),
                                            Event("sched", "sched_waking"), Event("sock", "inet_sock_set_state"),
                                            synth_};
  size_t compiled = 0, unimplemented = 0, unparsed = 0, runs = 0, trues = 0;
  uint64_t seed = 1;
  for (const EventFormat& fmt : formats) {
    Fuzzer fz(fmt, seed++);
    for (int i = 0; i < 1200; ++i) {
      const std::string text = fz.Filter(0);
      auto e = ParseFilter(text, fmt);
      if (!e.ok()) {
        ++unparsed;
        continue;
      }
      const uint32_t nr = static_cast<uint32_t>(std::vector<uint32_t>{0, 4, 8}[fz.Below(3)]);
      auto prog = Program(*e, nr);
      if (!prog.ok()) {
        ASSERT_EQ(prog.status().code(), StatusCode::kUnimplemented) << text << ": " << prog.status().ToString();
        ++unimplemented;
        continue;
      }
      ++compiled;
      ASSERT_EQ(Unreachable(*prog), std::vector<size_t>{}) << text << "\n" << Disassemble(*prog);
      for (int k = 0; k < 8; ++k) {
        const std::string rec = fz.Record();
        const FakeTask t = fz.Task();
        auto got = RunProgram(*prog, rec, t);
        ASSERT_TRUE(got.ok()) << text << ": " << got.status().ToString() << "\n" << Disassemble(*prog);
        const bool want = Reference(*e, rec, t, nr);
        ASSERT_EQ(*got, want) << fmt.name << ": " << text << " (canonical " << FilterToString(*e) << ")\ncpu " << t.cpu
                              << " tid " << t.tid << " comm \"" << t.comm << "\" nr_cpu_ids " << nr << "\n"
                              << Disassemble(*prog);
        ++runs;
        trues += want ? 1 : 0;
      }
    }
  }
  std::printf("differential: %zu filters compiled, %zu unimplemented, %zu unparsed; %zu runs, %zu true\n", compiled,
              unimplemented, unparsed, runs, trues);
  EXPECT_GE(compiled, 3000u);
  EXPECT_GT(trues, runs / 10);
  EXPECT_LT(trues, runs * 9 / 10);
}

// Filters with parts that do not depend on the record (the verifier refused them with
// "unreachable insn"): the parts are folded away, the program has no unreachable instruction,
// and it still decides as EvaluateFilter does.
TEST_F(FilterCompilerTest, ConstantPartsAreFoldedAndNoCodeIsUnreachable) {
  const EventFormat& f = sched_switch_;
  std::string rec(RecordSize(f), '\0');
  FakeTask t;
  t.comm = "tpe";
  struct Case {
    const char* filter;
    size_t max_insns;  // the test program is 6 instructions around the filter; 0: not checked
  };
  const Case cases[] = {
      {"prev_pid & 0", 7},                                        // always false: one jump
      {"!(prev_pid & 0)", 7},                                     // always true: one jump never taken
      {"COMM ~ \"abcdefghijklmnopq*\"", 7},                       // a 17-byte prefix of a 16-byte comm
      {"prev_comm ~ \"*abcdefghijklmnopq\"", 7},                  // suffix longer than the array
      {"CPU == CPUS{0-1}", 7},                                    // a set never equals one CPU
      {"prev_pid & 0 || prev_pid == 7", 0},                       // reduces to prev_pid == 7
      {"prev_pid & 0 && prev_pid == 7", 7},                       // false
      {"!(prev_pid & 0) && (prev_pid == 7 || COMM ~ \"*\")", 7},  // true
      {"(prev_pid == 7 || prev_pid & 0) && !(CPU == CPUS{0-1}) && next_pid > 3", 0},
  };
  for (const Case& c : cases) {
    auto e = ParseFilter(c.filter, f);
    ASSERT_TRUE(e.ok()) << c.filter << ": " << e.status().ToString();
    auto prog = Program(*e);
    ASSERT_TRUE(prog.ok()) << c.filter << ": " << prog.status().ToString();
    EXPECT_EQ(Unreachable(*prog), std::vector<size_t>{}) << c.filter << "\n" << Disassemble(*prog);
    if (c.max_insns != 0) {
      EXPECT_LE(prog->size(), c.max_insns) << c.filter << "\n" << Disassemble(*prog);
    }
    for (uint32_t pid : {0u, 7u, 9u}) {
      std::memcpy(rec.data() + f.FindField("prev_pid")->offset, &pid, 4);
      std::memcpy(rec.data() + f.FindField("next_pid")->offset, &pid, 4);
      for (uint32_t cpu : {0u, 1u}) {
        t.cpu = cpu;
        Decide(f, c.filter, rec, t);
      }
    }
  }
}

}  // namespace
}  // namespace tpe::bpf
