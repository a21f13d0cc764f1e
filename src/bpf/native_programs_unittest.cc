// Native buckets in a program (programs.h NativeShape): the cell every value lands in — its
// position and its classic bucket — is the one NativeLayout and Buckets give in user space, for
// every schema, scales that flip the sign, signed and unsigned fields, and values on both sides
// of every boundary of sampled octaves; and the perf engine's HistogramCollector sees the same
// buckets and sum.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>

#include "bpf/programs_testing.h"
#include "collectors/histogram.h"
#include "collectors/label_set.h"
#include "testing/labels.h"

namespace tpe::bpf {
namespace {

using testing::SourceLabel;

// Raw values next to the boundaries of octaves 0, 1, 7, 31, 40, 62, 63 (each mantissa threshold
// shifted down, ±1), the extremes, and random ones.
std::vector<uint64_t> Candidates(const NativeLayout& l) {
  std::vector<uint64_t> out = {0, 1, 2, 3, ~uint64_t{0}, uint64_t{1} << 63, (uint64_t{1} << 63) - 1};
  for (int o : {0, 1, 7, 31, 40, 62, 63}) {
    for (uint64_t t : l.mantissa_thresholds()) {
      const uint64_t x = t >> (63 - o);
      for (uint64_t d : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) out.push_back(x + d);
    }
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) out.push_back(rng() >> (rng() % 64));
  return out;
}

struct Cell {
  int32_t position;
  uint32_t classic;
  bool operator<(const Cell& o) const { return std::tie(position, classic) < std::tie(o.position, o.classic); }
  bool operator==(const Cell& o) const { return position == o.position && classic == o.classic; }
};

TEST(NativeProgramTest, CellsAreNativeLayoutPositionsAndClassicBuckets) {
  EventFormat fmt = Event("sched", "sched_switch");
  const FieldFormat* vf = fmt.FindField("prev_state");  // 8 bytes, signed
  ASSERT_NE(vf, nullptr);
  const Buckets classic = *Buckets::Exp2(1, 1 << 20);
  for (int schema = 0; schema <= 8; ++schema) {
    for (double scale : {1.0, 1e-9, -0.5, 3.7}) {
      for (bool is_signed : {true, false}) {
        for (bool with_classic : {true, false}) {
          SCOPED_TRACE("schema " + std::to_string(schema) + " scale " + std::to_string(scale) +
                       (is_signed ? " signed" : " unsigned") + (with_classic ? " +classic" : ""));
          NativeOptions o;
          o.schema = schema;
          o.zero_threshold = scale > 0 && scale < 1e-6 ? 1e-6 : 0.75;  // zero_max 1000 or 0/1
          auto layout = NativeLayout::Make(o, scale);
          ASSERT_TRUE(layout.ok());
          HistogramShape shape;
          shape.value = *IntegerField(*vf);
          shape.value.is_signed = is_signed;
          if (with_classic && scale > 0) shape.thresholds = Thresholds(classic, scale, is_signed);
          shape.native = NativeShape{layout->mantissa_thresholds(), layout->zero_max(), schema, scale < 0};
          auto prog = EmitHistogram(shape, Fds());
          ASSERT_TRUE(prog.ok()) << prog.status().ToString();
          Interpreter in;
          AddMaps(&in, kNativeCellBytes, NativeValueBytes(is_signed), 100000);
          std::map<Cell, uint64_t> want;
          int128 want_sum = 0;
          for (uint64_t raw : Candidates(*layout)) {
            const std::string rec = Switch("p", 1, 2, static_cast<int64_t>(raw), "n", 3);
            RunProg(&in, *prog, rec, FakeTask{1, 2, 0, "t", 0, 0});
            // The classic bucket: the first threshold at or above raw (programs.h Thresholds).
            uint32_t bucket = 0;
            while (bucket < shape.thresholds.size() &&
                   (is_signed ? static_cast<int64_t>(raw) > static_cast<int64_t>(shape.thresholds[bucket])
                              : raw > shape.thresholds[bucket])) {
              ++bucket;
            }
            ++want[Cell{layout->Position(static_cast<int64_t>(raw), is_signed), bucket}];
            want_sum += is_signed ? static_cast<int128>(static_cast<int64_t>(raw)) : static_cast<int128>(raw);
          }
          std::map<Cell, uint64_t> got;
          int128 got_sum = 0;
          for (const auto& [k, v] : in.map(kValuesFd)->entries) {
            ASSERT_EQ(k.size(), kNativeCellBytes);
            Cell cell;
            std::memcpy(&cell.position, k.data(), 4);
            std::memcpy(&cell.classic, k.data() + 4, 4);
            const std::vector<uint64_t> slots = U64s(v);
            ASSERT_EQ(slots.size(), NativeValueBytes(is_signed) / 8);
            got[cell] += slots[0];
            got_sum += WideAt(slots, 1, is_signed);
          }
          EXPECT_EQ(got, want);
          EXPECT_TRUE(got_sum == want_sum);  // exact: the candidates' extremes sum far past 2^64
          EXPECT_EQ(StatOf(&in, kDropped), 0u);
        }
      }
    }
  }
}

// With labels: the cell follows the labels, rounded up to 8 bytes.
TEST(NativeProgramTest, CellFollowsTheLabels) {
  EventFormat fmt = Event("sched", "sched_switch");
  std::vector<LabelSpec> specs;
  specs.push_back(SourceLabel("cpu", LabelSource::kCpu));  // 4 bytes
  LabelSet labels(std::move(specs));
  auto key = LayoutKey(labels);
  ASSERT_TRUE(key.ok());
  auto layout = NativeLayout::Make(NativeOptions(), 1.0);
  HistogramShape shape;
  shape.key = *key;
  shape.value = *IntegerField(*fmt.FindField("prev_state"));
  shape.native = NativeShape{layout->mantissa_thresholds(), layout->zero_max(), 3, false};
  auto prog = EmitHistogram(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, 8 + kNativeCellBytes, NativeValueBytes(true), 100);
  for (uint32_t cpu : {0u, 1u, 1u}) RunProg(&in, *prog, Switch("p", 1, 2, 100, "n", 3), FakeTask{1, 2, cpu, "t", 0, 0});
  std::map<std::pair<uint32_t, int32_t>, uint64_t> got;
  for (const auto& [k, v] : in.map(kValuesFd)->entries) {
    ASSERT_EQ(k.size(), 16u);
    uint32_t cpu;
    int32_t position;
    std::memcpy(&cpu, k.data(), 4);
    std::memcpy(&position, k.data() + 8, 4);
    got[{cpu, position}] += U64s(v)[0];
  }
  const int32_t p = layout->Position(100, true);
  EXPECT_EQ(got, (std::map<std::pair<uint32_t, int32_t>, uint64_t>{{{0, p}, 1}, {{1, p}, 2}}));
}

}  // namespace
}  // namespace tpe::bpf
