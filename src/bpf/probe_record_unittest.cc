// Probe programs (probe_record.h) run in the Interpreter with a pt_regs context and fake user
// memory: the record they materialize is the one the kernel's store_trace_args
// (kernel/trace/trace_probe_tmpl.h) writes for the same registers and memory, and the shapes on
// it count, key and filter as on a tracepoint. The formats are captured from Linux 6.18
// (tests/data/linux-6.18/events/tpe_capture: "p:tpe_capture/ent /usr/bin/python3.11:0x1000
// x=%di:s64 s=+0(%si):ustring g=+112(%sp):s32 t=+0(%dx):ustring b=%r8:u8" and
// "r:tpe_capture/ret ... rv=$retval:s32").
#include "bpf/probe_record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bpf/interpreter.h"
#include "bpf/programs.h"
#include "bpf/programs_testing.h"
#include "filter/filter.h"
#include "testing/labels.h"

namespace tpe::bpf {
namespace {

constexpr int kRecordFd = 15;
// pt_regs indexes (u64 slots) of the registers the tests set.
enum RegIndex { kBp = 4, kR8 = 9, kAx = 10, kDx = 12, kSi = 13, kDi = 14, kIp = 16, kSp = 19, kRegCount = 21 };
constexpr uint64_t kStr1 = 0x7f0000001000, kStr2 = 0x7f0000002000, kStack = 0x7ffd00000000;

const std::vector<std::pair<std::string, std::string>> kEntArgs = {
    {"x", "%di:s64"}, {"s", "+0(%si):ustring"}, {"g", "+112(%sp):s32"}, {"t", "+0(%dx):ustring"}, {"b", "%r8:u8"}};

MapFds ProbeFds() {
  MapFds m = Fds();
  m.record = kRecordFd;
  return m;
}

ProbeRecord Record(const EventFormat& f, const std::vector<std::pair<std::string, std::string>>& args) {
  auto r = BuildProbeRecord(args, f, true);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ProbeRecord{};
}

void AddRecordMap(Interpreter* in, const ProbeRecord& r) {
  FakeMap m;
  m.type = BPF_MAP_TYPE_PERCPU_ARRAY;
  m.key_size = 4;
  m.value_size = r.size;
  m.max_entries = 1;
  in->AddMap(kRecordFd, m);
}

std::string RecordBytes(Interpreter* in) { return in->map(kRecordFd)->entries.begin()->second; }

// The kernel's record for kEntArgs (store_trace_args with uprobes' fetch_store_string): the
// fixed part, then each string packed at the dynamic cursor, __data_loc = len << 16 | offset
// (the NUL counted); a string that faults gets length 0 at the cursor.
std::string KernelEntRecord(int64_t x, const std::string* s, int32_t g, const std::string* t, uint8_t b) {
  std::string rec(37, '\0');
  std::memcpy(rec.data() + 16, &x, 8);
  std::memcpy(rec.data() + 28, &g, 4);
  rec[36] = static_cast<char>(b);
  auto put = [&rec](uint32_t field_off, const std::string* str) {
    const uint32_t cursor = static_cast<uint32_t>(rec.size());
    uint32_t loc = cursor;
    if (str != nullptr) {
      loc |= static_cast<uint32_t>(str->size() + 1) << 16;
      rec += *str;
      rec.push_back('\0');
    }
    std::memcpy(rec.data() + field_off, &loc, 4);
  };
  put(24, s);
  put(32, t);
  return rec;
}

std::vector<uint64_t> EntRegs(int64_t x, bool s_mapped, bool t_mapped, uint64_t r8) {
  std::vector<uint64_t> regs(kRegCount, 0);
  regs[kDi] = static_cast<uint64_t>(x);
  regs[kSi] = s_mapped ? kStr1 : 0x10;
  regs[kDx] = t_mapped ? kStr2 : 0x20;
  regs[kSp] = kStack;
  regs[kR8] = r8;
  regs[kIp] = 0x401000;
  return regs;
}

void AddUser(Interpreter* in, const std::string& s, const std::string& t, int32_t g) {
  in->AddUserMemory(kStr1, s + std::string(1, '\0'));
  in->AddUserMemory(kStr2, t + std::string(1, '\0'));
  std::string stack(128, '\0');
  std::memcpy(stack.data() + 112, &g, 4);
  in->AddUserMemory(kStack, stack);
}

// Runs a label-less counter on the probe and returns the materialized record's bytes 16.. (the
// __probe_ip word and the common header are not materialized; see the header).
class ProbeRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    format_ = Event("tpe_capture", "ent");
    record_ = Record(format_, kEntArgs);
    AddMaps(&in_, 0, 8, 16);
    AddRecordMap(&in_, record_);
  }
  std::string Run(const std::vector<uint64_t>& regs) {
    CounterShape s;
    s.probe = &record_;
    auto prog = EmitCounter(s, ProbeFds());
    EXPECT_TRUE(prog.ok()) << prog.status().ToString();
    auto r = in_.RunKprobe(*prog, regs, FakeTask{});
    EXPECT_TRUE(r.ok()) << r.status().ToString() << "\n" << Disassemble(*prog);
    return RecordBytes(&in_);
  }
  EventFormat format_;
  ProbeRecord record_;
  Interpreter in_;
};

TEST_F(ProbeRecordTest, LayoutFollowsTheFormat) {
  ASSERT_EQ(record_.fetches.size(), 5u);
  EXPECT_EQ(record_.fixed, 37u);
  EXPECT_EQ(record_.size, 37u + 2 * kStringSlotBytes + 3);  // 8-aligned
  EXPECT_EQ(record_.fetches[2].reg_offset, 19u * 8);        // sp
  EXPECT_TRUE(record_.fetches[2].memory);
  EXPECT_EQ(record_.fetches[2].disp, 112);
  EXPECT_TRUE(record_.fetches[3].string);
  EXPECT_EQ(record_.fetches[3].offset, 32u);
}

TEST_F(ProbeRecordTest, RecordIsTheKernels) {
  const std::string s = "hello", t = "tpe_x";
  AddUser(&in_, s, t, -7);
  const std::string got = Run(EntRegs(-123456789012, true, true, 0x1ff));
  const std::string want = KernelEntRecord(-123456789012, &s, -7, &t, 0xff);
  ASSERT_GE(got.size(), want.size());
  EXPECT_EQ(got.substr(16, want.size() - 16), want.substr(16));
  EXPECT_EQ(got.substr(0, 8), std::string(8, '\0'));  // the guard, released
}

TEST_F(ProbeRecordTest, FaultingStringHasLengthZeroAtTheCursor) {
  const std::string t = "second";
  AddUser(&in_, "unused", t, 3);
  const std::string got = Run(EntRegs(5, false, true, 1));
  const std::string want = KernelEntRecord(5, nullptr, 3, &t, 1);
  EXPECT_EQ(got.substr(16, want.size() - 16), want.substr(16));
  // Counted, not silent (a page not resident reads as "" on bpf): one string faulted.
  EXPECT_EQ(StatOf(&in_, kStringFaults), 1u);
}

TEST_F(ProbeRecordTest, LongStringIsCutAtTheSlot) {
  const std::string s(300, 'a');
  AddUser(&in_, s, "b", 0);
  const std::string got = Run(EntRegs(0, true, true, 0));
  uint32_t loc = 0;
  std::memcpy(&loc, got.data() + 24, 4);
  EXPECT_EQ(loc, kStringSlotBytes << 16 | 37u);
  EXPECT_EQ(got.substr(37, kStringSlotBytes), std::string(kStringSlotBytes - 1, 'a') + std::string(1, '\0'));
  std::memcpy(&loc, got.data() + 32, 4);
  EXPECT_EQ(loc, 2u << 16 | (37u + kStringSlotBytes));
}

TEST(ProbeRecordRetTest, RetvalIsAx) {
  const EventFormat f = Event("tpe_capture", "ret");
  ProbeRecord r = Record(f, {{"rv", "$retval:s32"}});
  Interpreter in;
  AddMaps(&in, 8, 8, 16);
  AddRecordMap(&in, r);
  auto spec = testing::FieldLabel(f, "rv");
  CounterShape s;
  s.probe = &r;
  s.key = *LayoutKey(LabelSet({spec}));
  auto prog = EmitCounter(s, ProbeFds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  std::vector<uint64_t> regs(kRegCount, 0);
  regs[kAx] = static_cast<uint64_t>(int64_t{-5});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(in.RunKprobe(*prog, regs, FakeTask{}).ok());
  int32_t rv = 0;
  std::memcpy(&rv, RecordBytes(&in).data() + 24, 4);
  EXPECT_EQ(rv, -5);
  FakeMap* values = in.map(kValuesFd);
  ASSERT_EQ(values->entries.size(), 1u);
  EXPECT_EQ(U64s(values->entries.begin()->first)[0], static_cast<uint64_t>(int64_t{-5}));  // sign-extended key
  EXPECT_EQ(U64s(values->entries.begin()->second)[0], 3u);
}

// A counter keyed by the ustring s, filtered on g, adding x: as a tracepoint counter would.
TEST_F(ProbeRecordTest, CountsKeysAndFiltersAsOnTracepoints) {
  AddMaps(&in_, kStringSlotBytes, CounterValueBytes(true), 16);
  auto filter = ParseFilter("g == 7 && b < 9", format_);
  ASSERT_TRUE(filter.ok()) << filter.status().ToString();
  CounterShape s;
  s.probe = &record_;
  s.filter = &*filter;
  s.key = *LayoutKey(LabelSet({testing::FieldLabel(format_, "s")}));
  s.value = *IntegerField(*format_.FindField("x"));
  auto prog = EmitCounter(s, ProbeFds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  struct Hit {
    std::string s;
    int32_t g;
    int64_t x;
    uint64_t r8;
  };
  const std::vector<Hit> hits = {
      {"a", 7, 10, 1}, {"bb", 7, 20, 2}, {"a", 7, 5, 3}, {"a", 8, 100, 1}, {"a", 7, 1000, 9}};
  for (const Hit& h : hits) {
    Interpreter& in = in_;
    in.AddUserMemory(kStr1, h.s + std::string(1, '\0'));
    in.AddUserMemory(kStr2, std::string(1, '\0'));
    std::string stack(128, '\0');
    std::memcpy(stack.data() + 112, &h.g, 4);
    in.AddUserMemory(kStack, stack);
    auto r = in.RunKprobe(*prog, EntRegs(h.x, true, true, h.r8), FakeTask{});
    ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << Disassemble(*prog);
  }
  FakeMap* values = in_.map(kValuesFd);
  ASSERT_EQ(values->entries.size(), 2u);
  auto key = [](const std::string& str) {
    std::string k(kStringSlotBytes, '\0');
    std::memcpy(k.data(), str.data(), str.size());
    return k;
  };
  EXPECT_TRUE(WideAt(U64s(values->entries.at(key("a"))), 0) == 15);  // a wide sum (programs.h)
  EXPECT_TRUE(WideAt(U64s(values->entries.at(key("bb"))), 0) == 20);
  EXPECT_EQ(StatOf(&in_, kRuns), 5u);
  EXPECT_EQ(StatOf(&in_, kBusy), 0u);
}

// A run that finds the guard taken (it preempted another run on its CPU) counts kBusy only.
TEST_F(ProbeRecordTest, BusyRecordIsCountedNotTouched) {
  for (bool atomic : {true, false}) {
    SCOPED_TRACE(atomic);
    record_.atomic_guard = atomic;
    in_.map(kRecordFd)->entries.begin()->second[0] = 1;
    const std::string before = RecordBytes(&in_);
    CounterShape s;
    s.probe = &record_;
    s.filter = nullptr;
    s.key = *LayoutKey(LabelSet({testing::SourceLabel("comm", LabelSource::kComm)}));
    auto prog = EmitCounter(s, ProbeFds());
    ASSERT_TRUE(prog.ok());
    const uint64_t busy = StatOf(&in_, kBusy);
    ASSERT_TRUE(in_.RunKprobe(*prog, EntRegs(1, true, true, 0), FakeTask{}).ok());
    EXPECT_EQ(StatOf(&in_, kBusy), busy + 1);
    EXPECT_EQ(RecordBytes(&in_), before);
    EXPECT_EQ(StatOf(&in_, kRuns), 0u);
    in_.map(kRecordFd)->entries.begin()->second[0] = 0;
    ASSERT_TRUE(in_.RunKprobe(*prog, EntRegs(1, true, true, 0), FakeTask{}).ok());
    EXPECT_EQ(StatOf(&in_, kRuns), 1u);
    EXPECT_EQ(RecordBytes(&in_)[0], 0);
    AddMaps(&in_, 0, 8, 16);  // fresh stats
  }
}

// A uprobe's operands and strings are user memory. A kprobe's memory operands and `string`
// args are kernel memory, but its `ustring` args are user memory (a user pointer handed to the
// kernel): since 5.5 probe_read_kernel_str of a user address fails on x86, so reading them as
// kernel memory gave "" for every value (this test used to assert that).
TEST(ProbeRecordBuildTest, KprobeUstringsReadUserMemoryAndTheRestKernelMemory) {
  const EventFormat f = Event("tpe_capture", "ent");
  const std::vector<std::pair<std::string, std::string>> kprobe_args = {
      {"x", "%di:s64"}, {"s", "+0(%si):ustring"}, {"g", "+112(%sp):s32"}, {"t", "+0(%dx):string"}, {"b", "%r8:u8"}};
  for (bool user : {true, false}) {
    auto r = BuildProbeRecord(user ? kEntArgs : kprobe_args, f, user);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->user, user);
    CounterShape s;
    s.probe = &*r;
    auto prog = EmitCounter(s, ProbeFds());
    ASSERT_TRUE(prog.ok());
    std::map<int, int> calls;
    for (const bpf_insn& i : *prog) {
      if (i.code == (BPF_JMP | BPF_CALL)) ++calls[i.imm];
    }
    EXPECT_EQ(calls[BPF_FUNC_probe_read_user_str], user ? 2 : 1) << user;    // s (and t on a uprobe)
    EXPECT_EQ(calls[BPF_FUNC_probe_read_user], user ? 1 : 0) << user;        // g
    EXPECT_EQ(calls[BPF_FUNC_probe_read_kernel_str], user ? 0 : 1) << user;  // t on a kprobe
    EXPECT_EQ(calls[BPF_FUNC_probe_read_kernel], user ? 0 : 1) << user;      // g on a kprobe
    EXPECT_EQ(r->UserStringFields(), user ? (std::vector<std::string>{"s", "t"}) : (std::vector<std::string>{"s"}));
  }
}

TEST(ProbeRecordBuildTest, RefusesWhatItCannotCompute) {
  const EventFormat f = Event("tpe_capture", "ent");
  EXPECT_FALSE(BuildProbeRecord({{"x", "$stack0:s64"}}, f, true).ok());
  EXPECT_FALSE(BuildProbeRecord({{"x", "%xyz:s64"}}, f, true).ok());
  EXPECT_FALSE(BuildProbeRecord({{"nope", "%di:s64"}}, f, true).ok());
  EXPECT_FALSE(BuildProbeRecord({{"x", "%di:s32"}}, f, true).ok());  // the format says 8 bytes
  EXPECT_FALSE(BuildProbeRecord({{"s", "%si:ustring"}}, f, true).ok());
  EXPECT_FALSE(BuildProbeRecord({{"x", "+8(+0(%si)):s64"}}, f, true).ok());
  EXPECT_EQ(PtRegsOffset("di"), 112);
  EXPECT_EQ(PtRegsOffset("r15"), 0);
  EXPECT_EQ(PtRegsOffset("ss"), 160);
}

}  // namespace
}  // namespace tpe::bpf
