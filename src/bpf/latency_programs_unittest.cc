// The latency shapes (programs.h) run in the Interpreter: pairs observed in the perf engine's
// buckets under its label keys, and every start or end that pairs with nothing counted by reason.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "bpf/interpreter.h"
#include "bpf/programs.h"
#include "bpf/programs_testing.h"
#include "collectors/buckets.h"
#include "collectors/comm_table.h"
#include "collectors/label_set.h"
#include "format/event_format.h"
#include "testing/labels.h"

namespace tpe::bpf {
namespace {

using testing::FieldLabel;
using testing::SourceLabel;

// ---------------------------------------------------------------------------------------------
// Latency: sched_waking(pid) → sched_switch(next_pid), and common_pid → common_pid.

class LatencyProgramTest : public ::testing::Test {
 protected:
  LatencyProgramTest()
      : waking_(Event("sched", "sched_waking")),
        switch_(Event("sched", "sched_switch")),
        buckets_(*Buckets::Exp2(1e-6, 1)) {}

  // Start labels: comm (the waker), the woken comm; end labels: cpu, prev_comm.
  void Build(size_t max_inflight, uint64_t timeout_ns, bool common_pid = false) {
    std::vector<LabelSpec> s;
    s.push_back(SourceLabel("waker", LabelSource::kComm));
    s.push_back(FieldLabel(waking_, "comm"));
    start_labels_ = LabelSet(std::move(s));
    std::vector<LabelSpec> e;
    e.push_back(SourceLabel("cpu", LabelSource::kCpu));
    e.push_back(FieldLabel(switch_, "prev_comm"));
    end_labels_ = LabelSet(std::move(e));
    auto sk = LayoutKey(start_labels_);
    auto ek = LayoutKey(end_labels_);
    ASSERT_TRUE(sk.ok() && ek.ok());
    start_key_ = *sk;
    end_key_ = *ek;
    LatencyStartShape st;
    st.match = {*IntegerField(*waking_.FindField(common_pid ? "common_pid" : "pid"))};
    st.labels = start_key_;
    auto sp = EmitLatencyStart(st, Fds());
    ASSERT_TRUE(sp.ok()) << sp.status().ToString();
    start_ = *sp;
    LatencyEndShape en;
    en.match = {*IntegerField(*switch_.FindField(common_pid ? "common_pid" : "next_pid"))};
    en.start_label_bytes = start_key_.size;
    en.labels = end_key_;
    en.thresholds = Thresholds(buckets_, 1e-9, false);
    en.timeout_ns = timeout_ns;
    thresholds_ = en.thresholds;
    auto ep = EmitLatencyEnd(en, Fds());
    ASSERT_TRUE(ep.ok()) << ep.status().ToString();
    end_ = *ep;
    AddMaps(&in_, std::max<uint32_t>(8, start_key_.size + end_key_.size),
            HistogramValueBytes(thresholds_.size(), false), 100);
    FakeMap starts;
    starts.type = BPF_MAP_TYPE_HASH;
    starts.key_size = 8;
    starts.value_size = 8 + start_key_.MapKeySize();
    starts.max_entries = static_cast<uint32_t>(max_inflight);
    in_.AddMap(kStartsFd, starts);
  }

  std::string Waking(const std::string& comm, int32_t pid) {
    std::string r(40, '\0');
    std::memcpy(r.data() + 8, comm.data(), std::min<size_t>(comm.size(), 16));
    std::memcpy(r.data() + 24, &pid, 4);
    return r;
  }

  // The series key the perf engine builds: start labels ++ end labels.
  std::string PerfKey(const std::string& start_rec, const FakeTask& st, const std::string& end_rec,
                      const FakeTask& et) {
    CommTable comms(NoProc);
    comms.OnComm(st.tid, st.comm);
    std::string a, b;
    EXPECT_TRUE(start_labels_.BuildKey(SampleOf(start_rec, st), &comms, &a));
    comms.OnComm(et.tid, et.comm);
    EXPECT_TRUE(end_labels_.BuildKey(SampleOf(end_rec, et), &comms, &b));
    return a + b;
  }

  // Series label key (perf form) → bucket counts, then the sum of the ns (its wide sum decoded).
  std::map<std::string, std::vector<uint64_t>> Series() {
    std::map<std::string, std::vector<uint64_t>> out;
    for (const auto& [k, v] : in_.map(kValuesFd)->entries) {
      std::string key = ToLabelKey(start_key_, std::string_view(k).substr(0, start_key_.size));
      key += ToLabelKey(end_key_, std::string_view(k).substr(start_key_.size));
      const std::vector<uint64_t> words = U64s(v);
      std::vector<uint64_t>& o = out[key];
      o.assign(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(thresholds_.size() + 1));
      o.push_back(static_cast<uint64_t>(WideAt(words, thresholds_.size() + 1)));
    }
    return out;
  }

  // One observation of `ns` in the right bucket.
  std::vector<uint64_t> Observation(uint64_t ns) {
    std::vector<uint64_t> v(thresholds_.size() + 2, 0);
    v[buckets_.Index(static_cast<double>(ns) * 1e-9)] = 1;
    v.back() = ns;
    return v;
  }

  EventFormat waking_, switch_;
  Buckets buckets_;
  LabelSet start_labels_, end_labels_;
  KeyLayout start_key_, end_key_;
  std::vector<uint64_t> thresholds_;
  std::vector<bpf_insn> start_, end_;
  Interpreter in_;
};

TEST_F(LatencyProgramTest, StartThenEndObservesTheDifference) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000'000));
  const FakeTask waker{10, 11, 2, "waker", 0, 1'000'000};
  const FakeTask cpu5{0, 0, 5, "swapper/5", 0, 1'000'000 + 123'456};
  const std::string w = Waking("sleepy", 42);
  const std::string s = Switch("prev", 0, 120, 0, "sleepy", 42);
  RunProg(&in_, start_, w, waker);
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 1u);
  RunProg(&in_, end_, s, cpu5);
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 0u);
  std::map<std::string, std::vector<uint64_t>> want;
  want[PerfKey(w, waker, s, cpu5)] = Observation(123'456);
  EXPECT_EQ(Series(), want);
  // A second end for the same key: no start any more.
  RunProg(&in_, end_, s, cpu5);
  EXPECT_EQ(StatOf(&in_, kNoStart), 1u);
  EXPECT_EQ(Series(), want);
  EXPECT_EQ(StatOf(&in_, kRuns), 3u);
  for (Stat st : {kReplaced, kTableFull, kExpired, kDropped, kDecodeErrors}) EXPECT_EQ(StatOf(&in_, st), 0u) << st;
}

TEST_F(LatencyProgramTest, ManyKeysInterleaved) {
  ASSERT_NO_FATAL_FAILURE(Build(100, 1'000'000'000));
  std::mt19937_64 rng(5);
  std::map<std::string, std::vector<uint64_t>> want;
  uint64_t now = 1'000'000;
  for (int round = 0; round < 20; ++round) {
    std::vector<std::pair<std::string, FakeTask>> starts;
    for (int32_t pid = 1; pid <= 8; ++pid) {
      FakeTask t{1, static_cast<uint32_t>(pid % 3), 0, pid % 2 ? "odd" : "even", 0, now += rng() % 5'000'000};
      starts.emplace_back(Waking(pid % 3 ? "x" : "y", pid), t);
      RunProg(&in_, start_, starts.back().first, t);
    }
    for (int32_t pid = 8; pid >= 1; --pid) {
      FakeTask t{0, 0, static_cast<uint32_t>(pid % 2), "swapper", 0, now += rng() % 50'000'000};
      const std::string e = Switch(pid % 4 ? "p" : "q", 0, 0, 0, "", pid);
      const auto& [srec, stask] = starts[static_cast<size_t>(pid - 1)];
      std::vector<uint64_t>& w = want[PerfKey(srec, stask, e, t)];
      if (w.empty()) w.resize(thresholds_.size() + 2);
      const uint64_t ns = t.ktime_ns - stask.ktime_ns;
      ++w[buckets_.Index(static_cast<double>(ns) * 1e-9)];
      w.back() += ns;
      RunProg(&in_, end_, e, t);
    }
  }
  EXPECT_EQ(Series(), want);
  EXPECT_EQ(StatOf(&in_, kRuns), 20u * 16);
  for (Stat st : {kReplaced, kTableFull, kExpired, kDropped, kNoStart}) EXPECT_EQ(StatOf(&in_, st), 0u) << st;
}

TEST_F(LatencyProgramTest, EndWithoutStartIsNoStart) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000'000));
  RunProg(&in_, start_, Waking("a", 1), FakeTask{});
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "b", 2), FakeTask{});
  EXPECT_EQ(StatOf(&in_, kNoStart), 1u);
  EXPECT_TRUE(in_.map(kValuesFd)->entries.empty());
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 1u);
}

// The newer start wins, and a replaced start is written whole by map_update_elem (an element swap
// the kernel makes under RCU), never store by store into the value other CPUs' ends read: the
// interpreter refuses program stores into the starts map's values (the old shape failed here).
TEST_F(LatencyProgramTest, SecondStartReplacesWholeAndTheNewerTimeWins) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000'000));
  in_.map(kStartsFd)->values_read_only = true;
  const FakeTask first{1, 1, 0, "first", 0, 1000};
  const FakeTask second{2, 2, 0, "second", 0, 5000};
  const FakeTask end{3, 3, 1, "end", 0, 9000};
  const std::string w1 = Waking("one", 7), w2 = Waking("two", 7);
  const std::string s = Switch("p", 0, 0, 0, "", 7);
  RunProg(&in_, start_, w1, first);
  RunProg(&in_, start_, w2, second);
  EXPECT_EQ(StatOf(&in_, kReplaced), 1u);
  RunProg(&in_, end_, s, end);
  std::map<std::string, std::vector<uint64_t>> want;
  want[PerfKey(w2, second, s, end)] = Observation(4000);  // the newer start's labels and time
  EXPECT_EQ(Series(), want);
  // A replace whose start an end consumed meanwhile inserts it again (not "replaced").
  RunProg(&in_, start_, w1, first);
  bool injected = false;
  in_.set_before_helper([&](int helper) {
    if (helper == BPF_FUNC_map_update_elem && !injected) {
      injected = true;  // before the first (BPF_NOEXIST) update: the entry is there
    } else if (helper == BPF_FUNC_map_update_elem && injected) {
      in_.map(kStartsFd)->entries.clear();  // an end consumed it before the BPF_EXIST update
      in_.set_before_helper(nullptr);
    }
  });
  RunProg(&in_, start_, w2, second);
  EXPECT_EQ(StatOf(&in_, kReplaced), 1u);
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 1u);
}

TEST_F(LatencyProgramTest, StartOlderThanTimeoutIsExpired) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000));
  RunProg(&in_, start_, Waking("a", 1), FakeTask{1, 1, 0, "w", 0, 10'000'000});
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "a", 1), FakeTask{0, 0, 0, "e", 0, 11'000'001});
  EXPECT_EQ(StatOf(&in_, kExpired), 1u);
  EXPECT_TRUE(in_.map(kValuesFd)->entries.empty());
  EXPECT_TRUE(in_.map(kStartsFd)->entries.empty());  // the expired start is gone
  // Exactly the timeout is still in time.
  RunProg(&in_, start_, Waking("a", 1), FakeTask{1, 1, 0, "w", 0, 20'000'000});
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "a", 1), FakeTask{0, 0, 0, "e", 0, 21'000'000});
  EXPECT_EQ(StatOf(&in_, kExpired), 1u);
  EXPECT_EQ(in_.map(kValuesFd)->entries.size(), 1u);
}

TEST_F(LatencyProgramTest, EndStampedBeforeStartObservesZero) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000));
  const FakeTask st{1, 1, 0, "w", 0, 5000};
  const FakeTask en{0, 0, 1, "e", 0, 4000};  // another CPU's clock a hair behind
  const std::string w = Waking("a", 1), s = Switch("p", 0, 0, 0, "a", 1);
  RunProg(&in_, start_, w, st);
  RunProg(&in_, end_, s, en);
  std::map<std::string, std::vector<uint64_t>> want;
  want[PerfKey(w, st, s, en)] = Observation(0);
  EXPECT_EQ(Series(), want);
  EXPECT_EQ(StatOf(&in_, kExpired), 0u);
}

TEST_F(LatencyProgramTest, FullStartsMapIsTableFull) {
  ASSERT_NO_FATAL_FAILURE(Build(2, 1'000'000'000));
  for (int32_t pid = 1; pid <= 3; ++pid) RunProg(&in_, start_, Waking("a", pid), FakeTask{});
  EXPECT_EQ(StatOf(&in_, kTableFull), 1u);
  EXPECT_EQ(in_.map(kStartsFd)->entries.size(), 2u);
  // A replacement still fits.
  RunProg(&in_, start_, Waking("b", 2), FakeTask{});
  EXPECT_EQ(StatOf(&in_, kTableFull), 1u);
  EXPECT_EQ(StatOf(&in_, kReplaced), 1u);
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "", 3), FakeTask{});
  EXPECT_EQ(StatOf(&in_, kNoStart), 1u);
}

TEST_F(LatencyProgramTest, CommonPidKeysComeFromTheTaskTid) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000'000, true));
  // The records' common_pid bytes are clobbered (Run): only the task's tid can match.
  RunProg(&in_, start_, Waking("a", 1), FakeTask{500, 77, 0, "w", 0, 100});
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "", 0), FakeTask{500, 78, 0, "e", 0, 200});
  EXPECT_EQ(StatOf(&in_, kNoStart), 1u);
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "", 0), FakeTask{77, 77, 0, "e", 0, 300});
  EXPECT_EQ(StatOf(&in_, kNoStart), 1u);
  ASSERT_EQ(in_.map(kValuesFd)->entries.size(), 1u);
  EXPECT_EQ(Series().begin()->second.back(), 200u);
  // The match key is the tid sign-extended to 8 bytes, as the perf engine reads common_pid.
  RunProg(&in_, start_, Waking("a", 1), FakeTask{0, 0x80000001u, 0, "w", 0, 400});
  ASSERT_EQ(in_.map(kStartsFd)->entries.size(), 1u);
  const int64_t want = static_cast<int32_t>(0x80000001u);
  EXPECT_EQ(in_.map(kStartsFd)->entries.begin()->first, std::string(reinterpret_cast<const char*>(&want), 8));
}

TEST(LatencyNoLabelsTest, OneSeriesUnderAZeroKey) {
  EventFormat sw = Event("sched", "sched_switch");
  LatencyStartShape st;
  st.match = {*IntegerField(*sw.FindField("prev_pid")), *IntegerField(*sw.FindField("prev_prio"))};
  auto sp = EmitLatencyStart(st, Fds());
  ASSERT_TRUE(sp.ok()) << sp.status().ToString();
  LatencyEndShape en;
  en.match = {*IntegerField(*sw.FindField("next_pid")), *IntegerField(*sw.FindField("next_prio"))};
  en.thresholds = Thresholds(*Buckets::Explicit({1e-6, 1e-3}), 1e-9, false);
  en.timeout_ns = 1'000'000'000;
  auto ep = EmitLatencyEnd(en, Fds());
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  Interpreter in;
  AddMaps(&in, 8, HistogramValueBytes(en.thresholds.size(), false), 10);
  FakeMap starts;
  starts.key_size = 16;
  starts.value_size = 16;
  starts.max_entries = 10;
  in.AddMap(kStartsFd, starts);
  std::string s = Switch("a", 5, -7, 0, "b", 0), e = Switch("c", 0, 0, 0, "d", 5);
  std::memcpy(e.data() + 60, s.data() + 28, 4);  // next_prio = prev_prio: the second key field
  RunProg(&in, *sp, s, FakeTask{0, 0, 0, "", 0, 100});
  RunProg(&in, *ep, Switch("c", 0, 0, 0, "d", 5), FakeTask{0, 0, 0, "", 0, 200});  // prio differs
  EXPECT_EQ(StatOf(&in, kNoStart), 1u);
  RunProg(&in, *ep, e, FakeTask{0, 0, 0, "", 0, 2'000'100});
  ASSERT_EQ(in.map(kValuesFd)->entries.size(), 1u);
  EXPECT_EQ(in.map(kValuesFd)->entries.begin()->first, std::string(8, '\0'));
  // 3 buckets, then the wide sum {commit, lo, announce} of the ns.
  EXPECT_EQ(U64s(in.map(kValuesFd)->entries.begin()->second), (std::vector<uint64_t>{0, 0, 1, 0, 2'000'000, 0}));
}

TEST(LatencyNoLabelsTest, TooManyMatchFieldsOrKeyBytesAreRefused) {
  EventFormat sw = Event("sched", "sched_switch");
  LatencyStartShape st;
  for (int i = 0; i < 5; ++i) st.match.push_back(*IntegerField(*sw.FindField("prev_pid")));
  EXPECT_FALSE(EmitLatencyStart(st, Fds()).ok());
  LatencyEndShape en;
  en.match = {*IntegerField(*sw.FindField("next_pid"))};
  en.start_label_bytes = 128;
  std::vector<LabelSpec> specs;
  for (int i = 0; i < 9; ++i) specs.push_back(SourceLabel("c" + std::to_string(i), LabelSource::kComm));
  auto l = LayoutKey(LabelSet(std::move(specs)));
  ASSERT_TRUE(l.ok());
  en.labels = *l;
  auto ep = EmitLatencyEnd(en, Fds());
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnimplemented);
}

TEST_F(LatencyProgramTest, EnomemIsCountedApartFromTableFullAndDrops) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000'000));
  in_.map(kStartsFd)->insert_errno = ENOMEM;
  RunProg(&in_, start_, Waking("a", 1), FakeTask{});
  EXPECT_EQ(StatOf(&in_, kNoMemory), 1u);
  EXPECT_EQ(StatOf(&in_, kTableFull), 0u);
  in_.map(kStartsFd)->insert_errno = 0;
  in_.map(kValuesFd)->insert_errno = ENOMEM;
  RunProg(&in_, start_, Waking("a", 1), FakeTask{});
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "a", 1), FakeTask{});
  EXPECT_EQ(StatOf(&in_, kNoMemory), 2u);
  EXPECT_EQ(StatOf(&in_, kDropped), 0u);
}

// Two ends on two CPUs look up one start; the other CPU's end deletes it between this end's
// lookup and its delete (injected before the delete helper). Exactly one observes: this one
// counts kNoStart (it used to observe the start a second time).
TEST_F(LatencyProgramTest, EndWhoseDeleteFailsDoesNotObserve) {
  ASSERT_NO_FATAL_FAILURE(Build(10, 1'000'000'000));
  RunProg(&in_, start_, Waking("a", 1), FakeTask{1, 1, 0, "w", 0, 1000});
  bool injected = false;
  in_.set_before_helper([&](int helper) {
    if (helper == BPF_FUNC_map_delete_elem && !injected) {
      injected = true;
      in_.map(kStartsFd)->entries.clear();  // the other CPU's end won the start
    }
  });
  RunProg(&in_, end_, Switch("p", 0, 0, 0, "a", 1), FakeTask{0, 0, 1, "e", 0, 2000});
  in_.set_before_helper(nullptr);
  EXPECT_TRUE(injected);
  EXPECT_TRUE(in_.map(kValuesFd)->entries.empty());
  EXPECT_EQ(StatOf(&in_, kNoStart), 1u);
}

}  // namespace
}  // namespace tpe::bpf
