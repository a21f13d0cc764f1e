// The off-CPU program (programs.h OffCpuShape) run by the Interpreter on sched_switch records in
// a known order: each block's ns under the key (comm, process, stack ids) of the task's switch-out;
// the idle task, the exporter's own process and exiting tasks left out; short blocks, unpaired
// switch-outs and a full map counted.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bpf/interpreter.h"
#include "bpf/programs.h"
#include "bpf/programs_testing.h"
#include "collectors/label_set.h"
#include "testing/labels.h"

namespace tpe::bpf {
namespace {

constexpr int kStacksFd = 15;
constexpr uint32_t kOwnTgid = 4242;

class OffCpuProgramTest : public ::testing::Test {
 protected:
  OffCpuProgramTest() : fmt_(Event("sched", "sched_switch")) {
    labels_ = LabelSet({testing::SourceLabel("comm", LabelSource::kComm)});
    auto layout = LayoutKey(labels_);
    EXPECT_TRUE(layout.ok());
    layout_ = *layout;
    shape_.key = layout_;
    shape_.stacks = CounterShape::Stacks{true, true, layout_.size};
    shape_.key.size = layout_.size + sizeof(StackKey);
    auto field = [&](const char* name) { return *IntegerField(*fmt_.FindField(name)); };
    shape_.prev_pid = field("prev_pid");
    shape_.next_pid = field("next_pid");
    shape_.prev_state = field("prev_state");
    shape_.own_tgid = kOwnTgid;
  }

  // The program and its maps (values: key -> u64 ns; starts: tid -> {u64 time, key}), at most
  // `blocked` tasks switched out at once.
  void Load(uint32_t blocked = 1000) {
    MapFds fds = Fds();
    fds.stacks = kStacksFd;
    auto prog = EmitOffCpu(shape_, fds);
    ASSERT_TRUE(prog.ok()) << prog.status().ToString();
    prog_ = *prog;
    AddMaps(&in_, shape_.key.size, 8, 1000);
    FakeMap starts;
    starts.type = BPF_MAP_TYPE_HASH;
    starts.key_size = 4;
    starts.value_size = 8 + shape_.key.size;
    starts.max_entries = blocked;
    in_.AddMap(kStartsFd, starts);
    FakeMap stacks;
    stacks.type = BPF_MAP_TYPE_STACK_TRACE;
    stacks.key_size = 4;
    stacks.value_size = 8 * 127;
    stacks.max_entries = 100;
    in_.AddMap(kStacksFd, stacks);
  }

  // `current` switches out (as prev_pid, state `state`) for next_pid at time `now_ns`; the
  // current task's stacks are `kid`/`uid`.
  void Switch(const FakeTask& current, int64_t state, int32_t next_pid, uint64_t now_ns, int64_t kid = 1,
              int64_t uid = 2) {
    FakeTask t = current;
    t.ktime_ns = now_ns;
    t.kernel_stack_id = kid;
    t.user_stack_id = uid;
    RunProg(&in_, prog_,
            bpf::Switch(current.comm, static_cast<int32_t>(current.tid), 120, state, "next", next_pid,
                        static_cast<int32_t>(current.tid)),
            t);
  }

  // ns per (comm, tgid, kernel id, user id).
  std::map<std::string, uint64_t> Series() {
    std::map<std::string, uint64_t> out;
    for (const auto& [k, v] : in_.map(kValuesFd)->entries) {
      StackKey sk;
      std::memcpy(&sk, k.data() + layout_.size, sizeof(sk));
      const LabelPairs l = labels_.Render(ToLabelKey(layout_, k.substr(0, layout_.size)));
      out[l[0].second + " " + std::to_string(sk.tgid) + " " + std::to_string(sk.kernel_id) + " " +
          std::to_string(sk.user_id)] += U64s(v)[0];
    }
    return out;
  }

  EventFormat fmt_;
  LabelSet labels_;
  KeyLayout layout_;
  OffCpuShape shape_;
  std::vector<bpf_insn> prog_;
  Interpreter in_;
};

const FakeTask kSleeper{300, 301, 0, "sleeper", 0, 0};
const FakeTask kIdle{0, 0, 0, "swapper/0", 0, 0};
const FakeTask kOwn{kOwnTgid, kOwnTgid + 1, 0, "tracepoint_expo", 0, 0};

TEST_F(OffCpuProgramTest, EachBlockIsAddedUnderTheStackItLeftWith) {
  Load();
  // Out at 1 ms with stacks (3, 5); back in at 11 ms (on another "CPU": the idle task switches
  // to it); out at 20 ms with stacks (4, 5), in at 50 ms.
  Switch(kSleeper, /*S*/ 1, 0, 1000000, 3, 5);
  Switch(kIdle, 0, 301, 11000000);
  Switch(kSleeper, 1, 0, 20000000, 4, 5);
  Switch(kIdle, 0, 301, 50000000);
  EXPECT_EQ(Series(), (std::map<std::string, uint64_t>{{"sleeper 300 3 5", 10000000}, {"sleeper 300 4 5", 30000000}}));
  EXPECT_EQ(StatOf(&in_, kRuns), 4u);
  EXPECT_EQ(StatOf(&in_, kBlocks), 2u);
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 0u) << "every switched-out task came back";
}

TEST_F(OffCpuProgramTest, IdleOwnAndExitingTasksAreLeftOut) {
  Load();
  Switch(kIdle, 0, 301, 1000);              // the idle task switching out: nothing remembered
  Switch(kOwn, 1, 0, 2000);                 // the exporter's thread
  Switch(kSleeper, 0x20, 0, 3000);          // EXIT_ZOMBIE: it will not come back
  Switch(kIdle, 0, kOwnTgid + 1, 9000000);  // their switch-ins find nothing
  Switch(kIdle, 0, 301, 9000000);
  EXPECT_TRUE(Series().empty());
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 0u);
  EXPECT_EQ(StatOf(&in_, kBlocks), 0u);
  EXPECT_EQ(StatOf(&in_, kRuns), 5u);
}

// A task whose switch-in was missed and that then exits: its entry goes at its last switch-out,
// so a new thread with the same id adds nothing at its first switch-in.
TEST_F(OffCpuProgramTest, AnExitingTaskTakesItsEntryAlong) {
  Load();
  Switch(kSleeper, 1, 0, 1000);        // out; its switch-in is never seen
  Switch(kSleeper, 0x20, 0, 5000000);  // its last switch-out (EXIT_ZOMBIE)
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 0u);
  Switch(kIdle, 0, 301, 900000000);  // a new thread 301, much later
  EXPECT_TRUE(Series().empty());
  EXPECT_EQ(StatOf(&in_, kBlocks), 0u);
}

TEST_F(OffCpuProgramTest, ShortBlocksUnpairedAndAFullMapAreCounted) {
  shape_.min_block_ns = 1000000;  // 1 ms
  Load(/*blocked=*/1);
  Switch(kSleeper, 1, 0, 1000);
  Switch(kIdle, 0, 301, 501000);  // 0.5 ms: short
  EXPECT_EQ(StatOf(&in_, kShortBlocks), 1u);
  // Out twice with no switch-in between: the first block is lost, counted; the second counts.
  Switch(kSleeper, 1, 0, 1000000);
  Switch(kSleeper, 1, 0, 2000000);
  EXPECT_EQ(StatOf(&in_, kUnpaired), 1u);
  // The map holds one task: another task switching out meanwhile is dropped, counted.
  const FakeTask other{500, 500, 1, "other", 0, 0};
  Switch(other, 1, 0, 2500000);
  EXPECT_EQ(StatOf(&in_, kTableFull), 1u);
  Switch(kIdle, 0, 301, 7000000);
  EXPECT_EQ(Series(), (std::map<std::string, uint64_t>{{"sleeper 300 1 2", 5000000}}));
  EXPECT_EQ(StatOf(&in_, kBlocks), 1u);
}

TEST_F(OffCpuProgramTest, AKernelThreadKeepsItsMissingUserStackAsItsId) {
  Load();
  // A kernel thread has no user stack: bpf_get_stackid's -EFAULT is kept in the key (shown
  // empty when rendered, bpf_profile.h).
  const FakeTask kworker{20, 20, 0, "kworker/0:1", 0, 0};
  Switch(kworker, 1, 0, 1000, 7, kStackEmpty);
  Switch(kIdle, 0, 20, 3001000);
  EXPECT_EQ(Series(), (std::map<std::string, uint64_t>{{"kworker/0:1 20 7 " + std::to_string(kStackEmpty), 3000000}}));
}

}  // namespace
}  // namespace tpe::bpf
