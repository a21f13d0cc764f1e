// Golden disassembly of each program shape (tests/data/bpf-golden/*.txt): the instructions the
// bpf engine generates for the shipped kinds of metric, checked in, so that any change in what
// a shape costs per hit shows in review as a diff of its listing. Each listing starts with its
// instruction count. After an intended change, regenerate them with
//   TPE_UPDATE_GOLDEN=1 build/src/bpf/programs_golden_unittest
// and review the diff. What the programs do is tested in programs_unittest.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bpf/assembler.h"
#include "bpf/programs.h"
#include "collectors/buckets.h"
#include "collectors/label_set.h"
#include "common/file_util.h"
#include "filter/filter.h"
#include "testing/formats.h"
#include "testing/labels.h"
#include "testing/test_util.h"

namespace tpe::bpf {
namespace {

MapFds Fds() {  // any numbers will do: they are immediates in the listing
  MapFds m;
  m.stats = 11;
  m.values = 12;
  m.zero = 13;
  m.starts = 14;
  return m;
}

using testing::FieldLabel;
using testing::SourceLabel;

KeyLayout Layout(std::vector<LabelSpec> specs) {
  auto layout = LayoutKey(LabelSet(std::move(specs)));
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return layout.ok() ? *layout : KeyLayout{};
}

FieldRef Int(const EventFormat& f, const std::string& field) {
  auto ref = IntegerField(*f.FindField(field));
  EXPECT_TRUE(ref.ok()) << ref.status().ToString();
  return ref.ok() ? *ref : FieldRef{};
}

// Compares the listing of `prog` with tests/data/bpf-golden/NAME.txt (or writes it).
void ExpectGolden(const std::string& name, const StatusOr<std::vector<bpf_insn>>& prog) {
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  const std::string listing = std::to_string(prog->size()) + " instructions\n" + Disassemble(*prog);
  const std::string path = testing::DataDir() + "/bpf-golden/" + name + ".txt";
  const char* update = std::getenv("TPE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << listing;
    return;
  }
  auto golden = ReadFileToString(path);
  ASSERT_TRUE(golden.ok()) << path << " is missing: run with TPE_UPDATE_GOLDEN=1 to write it";
  EXPECT_EQ(listing, *golden) << name << ": the generated instructions changed; if intended, regenerate " << path
                              << " with TPE_UPDATE_GOLDEN=1 and review the diff";
}

TEST(ProgramsGoldenTest, LabelLessCounter) {  // "engine": "bpf" on a label-less counter
  CounterShape s;
  ExpectGolden("counter_no_labels", EmitCounter(s, Fds()));
}

TEST(ProgramsGoldenTest, CommCounterOnRawSyscalls) {  // config/syscalls.json's syscalls_total
  CounterShape s;
  s.key = Layout([] {
    std::vector<LabelSpec> v;
    v.push_back(SourceLabel("comm", LabelSource::kComm));
    return v;
  }());
  ExpectGolden("counter_comm", EmitCounter(s, Fds()));
}

TEST(ProgramsGoldenTest, FilteredErrorCounter) {  // config/syscalls.json's syscall_errors_total
  const EventFormat exit = testing::CapturedFormat("raw_syscalls", "sys_exit");
  auto filter = ParseFilter("ret < 0 && ret > -4096", exit);
  ASSERT_TRUE(filter.ok()) << filter.status().ToString();
  CounterShape s;
  s.filter = &*filter;
  s.key = Layout([&] {
    std::vector<LabelSpec> v;
    v.push_back(FieldLabel(exit, "id"));
    v.push_back(FieldLabel(exit, "ret"));
    v.push_back(SourceLabel("comm", LabelSource::kComm));
    return v;
  }());
  ExpectGolden("counter_filter_fields_comm", EmitCounter(s, Fds()));
}

TEST(ProgramsGoldenTest, ValueCounter) {  // bytes written, by pid
  const EventFormat write = testing::CapturedFormat("syscalls", "sys_enter_write");
  CounterShape s;
  s.value = Int(write, "count");
  s.key = Layout([] {
    std::vector<LabelSpec> v;
    v.push_back(SourceLabel("pid", LabelSource::kPid));
    return v;
  }());
  ExpectGolden("counter_value_pid", EmitCounter(s, Fds()));
}

TEST(ProgramsGoldenTest, ValueHistogram) {  // write sizes, exp2 buckets
  const EventFormat write = testing::CapturedFormat("syscalls", "sys_enter_write");
  auto buckets = Buckets::Exp2(1, 1 << 20);
  ASSERT_TRUE(buckets.ok());
  HistogramShape s;
  s.value = Int(write, "count");
  s.thresholds = Thresholds(*buckets, 1, false);
  ExpectGolden("histogram_exp2", EmitHistogram(s, Fds()));
}

TEST(ProgramsGoldenTest, EnterExitLatency) {  // nanosleep enter -> exit by common_pid, {comm}
  const EventFormat enter = testing::CapturedFormat("syscalls", "sys_enter_nanosleep");
  const EventFormat exit = testing::CapturedFormat("syscalls", "sys_exit_getppid");  // any sys_exit_*
  auto buckets = Buckets::Exp2(1e-6, 1);
  ASSERT_TRUE(buckets.ok());
  LatencyStartShape start;
  start.match = {Int(enter, "common_pid")};
  start.labels = Layout([] {
    std::vector<LabelSpec> v;
    v.push_back(SourceLabel("comm", LabelSource::kComm));
    return v;
  }());
  ExpectGolden("latency_start_comm", EmitLatencyStart(start, Fds()));
  LatencyEndShape end;
  end.match = {Int(exit, "common_pid")};
  end.start_label_bytes = start.labels.size;
  end.thresholds = Thresholds(*buckets, 1e-9, false);
  end.timeout_ns = 10'000'000'000;
  ExpectGolden("latency_end", EmitLatencyEnd(end, Fds()));
}

// bench/bpf_cost.sh's latency pair: enter -> exit by common_pid, no labels.
TEST(ProgramsGoldenTest, EnterExitLatencyWithoutLabels) {
  const EventFormat enter = testing::CapturedFormat("syscalls", "sys_enter_nanosleep");
  const EventFormat exit = testing::CapturedFormat("syscalls", "sys_exit_getppid");
  LatencyStartShape start;
  start.match = {Int(enter, "common_pid")};
  ExpectGolden("latency_start_nolabels", EmitLatencyStart(start, Fds()));
  LatencyEndShape end;
  end.match = {Int(exit, "common_pid")};
  end.thresholds = Thresholds(*Buckets::Exp2(1e-6, 1), 1e-9, false);
  end.timeout_ns = 10'000'000'000;
  end.keyless_series = true;  // as BpfMetric makes it without labels
  ExpectGolden("latency_end_nolabels", EmitLatencyEnd(end, Fds()));
}

// A uprobe counter keyed by a ustring argument (the strs_total of the probe examples), on the
// captured event "p:tpe_capture/ent ... x=%di:s64 s=+0(%si):ustring g=+112(%sp):s32
// t=+0(%dx):ustring b=%r8:u8": the probe prologue (probe_record.h) materializes all five fields.
TEST(ProgramsGoldenTest, UprobeStringCounter) {
  const EventFormat ent = testing::CapturedFormat("tpe_capture", "ent");
  auto record = BuildProbeRecord(
      {{"x", "%di:s64"}, {"s", "+0(%si):ustring"}, {"g", "+112(%sp):s32"}, {"t", "+0(%dx):ustring"}, {"b", "%r8:u8"}},
      ent, true);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  CounterShape s;
  s.probe = &*record;
  s.key = Layout([&] {
    std::vector<LabelSpec> v;
    v.push_back(FieldLabel(ent, "s"));
    return v;
  }());
  MapFds fds = Fds();
  fds.record = 15;
  ExpectGolden("uprobe_counter_ustring", EmitCounter(s, fds));
}

}  // namespace
}  // namespace tpe::bpf
