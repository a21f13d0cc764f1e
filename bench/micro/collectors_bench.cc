// Micro-benchmarks of the per-sample hot path and of scrape serialization (Google Benchmark).
// Each "sample" benchmark decodes one captured PERF_RECORD_SAMPLE (tests/data/linux-6.18/
// records/) and feeds it to a collector, as the reader thread does: ns per sample.
//   build/bench/micro/collectors_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <bpf/bpf.h>

#include <cmath>
#include <cstring>
#include <random>

#include "bpf/bpf_metric.h"
#include "collectors/counter.h"
#include "collectors/histogram.h"
#include "collectors/latency.h"
#include "common/file_util.h"
#include "decode/sample.h"
#include "exporter/exporter.h"
#include "format/event_format.h"
#include "testing/hex.h"

namespace tpe {
namespace {

const std::string kData = TPE_TEST_DATA "/linux-6.18";

struct Captured {
  std::vector<uint8_t> record;
  EventFormat format;
  Captured(const std::string& sys, const std::string& ev)
      : record(testing::ReadHexFile(kData + "/records/" + ev + ".hex")),
        format(*ParseFormat(*ReadFileToString(kData + "/events/" + sys + "/" + ev + "/format"), ev)) {}
  FieldExtractor Field(const std::string& name, LabelDecode d = LabelDecode::kAuto) const {
    return *FieldExtractor::Compile(*format.FindField(name), d, nullptr);
  }
};

CommTable Comms() {
  CommTable t([](uint32_t, char*, size_t) { return -1; });
  t.OnComm(4126, "tpe_capture");
  return t;
}

void RunSamples(benchmark::State& state, const std::vector<uint8_t>& record, Collector* c) {
  CommTable comms = Comms();
  for (auto _ : state) {
    Sample s;
    benchmark::DoNotOptimize(ParseSample(Bytes(record), &s));
    c->OnSample(0, s, &comms);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_CounterLabels(benchmark::State& state) {
  Captured w("sched", "sched_switch");
  std::vector<LabelSpec> specs;
  if (state.range(0) >= 1) specs.push_back({"comm", LabelSource::kComm, std::nullopt, nullptr});
  if (state.range(0) >= 3) {
    specs.push_back({"next_comm", LabelSource::kField, w.Field("next_comm"), nullptr});
    specs.push_back({"prev_state", LabelSource::kField, w.Field("prev_state"), nullptr});
  }
  CounterCollector c("c_total", "h", LabelSet(std::move(specs)), 10000);
  RunSamples(state, w.record, &c);
}
BENCHMARK(BM_CounterLabels)->Arg(0)->Arg(1)->Arg(3);

// The native bucket layout of the default options (schema 3) for raw × `scale`.
std::optional<NativeLayout> Native(double scale) { return *NativeLayout::Make(NativeOptions(), scale); }

// Arg 0: classic exp2 buckets; 1: native buckets (schema 3) alone.
void BM_ValueHistogram(benchmark::State& state) {
  Captured w("syscalls", "sys_enter_write");
  const bool native = state.range(0) == 1;
  HistogramCollector h("bytes", "h", LabelSet(), w.Field("count"), 1.0,
                       native ? Buckets::None() : *Buckets::Exp2(1, 1 << 20), native ? Native(1.0) : std::nullopt,
                       10000);
  RunSamples(state, w.record, &h);
}
BENCHMARK(BM_ValueHistogram)->Arg(0)->Arg(1);

// One start and one end per iteration (sched_switch prev_pid → next_pid on the same record).
// Arg 0: classic exp2 buckets; 1: native buckets (schema 3) alone.
void BM_LatencyPair(benchmark::State& state) {
  const bool native = state.range(0) == 1;
  Captured w("sched", "sched_switch");
  LatencyEndpoint start, end;
  start.key.push_back(w.Field("prev_pid"));
  end.key.push_back(w.Field("prev_pid"));
  std::vector<LatencyEndpoint> starts;
  starts.push_back(std::move(start));
  LatencyCollector lat("lat_seconds", "h", std::move(starts), std::move(end),
                       native ? Buckets::None() : *Buckets::Exp2(1e-6, 1), native ? Native(1e-9) : std::nullopt, 10000,
                       100000, 10'000'000'000ULL);
  CommTable comms = Comms();
  uint64_t t = 0;
  for (auto _ : state) {
    Sample s;
    ParseSample(Bytes(w.record), &s);
    s.time_ns = t += 1000;
    lat.OnSample(0, s, &comms);
    s.time_ns = t += 3000;
    lat.OnSample(1, s, &comms);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LatencyPair)->Arg(0)->Arg(1);

// Snapshot + Prometheus text serialization of one counter with 10,000 series.
void BM_Scrape10kSeries(benchmark::State& state) {
  Captured w("sched", "sched_waking");  // format only
  std::vector<LabelSpec> specs;
  specs.push_back({"pid", LabelSource::kField, w.Field("pid"), nullptr});
  CounterCollector c("c_total", "h", LabelSet(std::move(specs)), 10000);
  CommTable comms = Comms();
  std::vector<uint8_t> raw(40, 0);
  Sample s;
  s.raw = Bytes(raw);
  for (int32_t pid = 0; pid < 10000; ++pid) {
    std::memcpy(&raw[24], &pid, 4);
    c.OnSample(0, s, &comms);
  }
  size_t bytes = 0;
  for (auto _ : state) {
    std::vector<MetricSnapshot> snap{c.Snapshot()};
    std::string text = SerializeText(snap);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Scrape10kSeries)->Unit(benchmark::kMillisecond);

// A scrape of 1,000 latency series of 200 observations each (log-uniform 10 µs .. 100 ms):
// Arg 0: classic exp2 buckets (1 µs .. 1 s: 21) on the text page; 1: native buckets (schema 3)
// on the protobuf page; 2: native on the text page (the +Inf bucket alone). Counters: bytes.
void BM_Scrape1kLatencySeries(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const bool native = mode != 0;
  HistogramTable table(native ? Buckets::None() : *Buckets::Exp2(1e-6, 1), native ? Native(1e-9) : std::nullopt, 1e-9,
                       1000);
  std::mt19937_64 rng(5);
  for (int series = 0; series < 1000; ++series) {
    const std::string key = std::to_string(100000 + series);
    for (int i = 0; i < 200; ++i) {
      const double u = static_cast<double>(rng() % 1000000) / 1e6;
      const uint64_t ns = static_cast<uint64_t>(1e4 * std::pow(1e4, u));  // 10 µs .. 100 ms
      table.Observe(key, static_cast<double>(ns) * 1e-9, static_cast<int64_t>(ns), false);
    }
  }
  size_t bytes = 0;
  for (auto _ : state) {
    std::vector<MetricSnapshot> snap{table.Snapshot("lat_seconds", "h", [](std::string_view k) {
      return LabelPairs{{"pid", std::string(k)}};
    })};
    std::string page = mode == 1 ? SerializeProtobuf(snap) : SerializeText(snap);
    bytes = page.size();
    benchmark::DoNotOptimize(page);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Scrape1kLatencySeries)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// The bpf engine's scrape: 10,000 series read from a per-CPU hash map (one lookup per key,
// values summed over CPUs), rendered and serialized. Needs CAP_BPF (skipped without).
void BM_BpfScrape10kSeries(benchmark::State& state) {
  Captured w("sched", "sched_waking");
  std::vector<LabelSpec> specs;
  specs.push_back({"pid", LabelSource::kField, w.Field("pid"), nullptr});
  bpf::BpfMetricSpec spec;
  spec.name = "c_total";
  spec.help = "h";
  spec.end.event = "sched:sched_waking";
  spec.end.labels = LabelSet(std::move(specs));
  spec.max_series = 10000;
  auto m = bpf::BpfMetric::Create(std::move(spec));
  if (!m.ok()) {
    state.SkipWithError(m.status().ToString().c_str());
    return;
  }
  std::vector<uint64_t> per_cpu(static_cast<size_t>(bpf::PossibleCpus()), 1);
  for (int64_t pid = 0; pid < 10000; ++pid) {
    if (bpf_map_update_elem((*m)->values_fd(), &pid, per_cpu.data(), BPF_ANY) != 0) {
      state.SkipWithError("bpf_map_update_elem failed");
      return;
    }
  }
  size_t bytes = 0, series = 0;
  for (auto _ : state) {
    std::vector<MetricSnapshot> snap{(*m)->Snapshot()};
    series = snap[0].series.size();
    std::string text = SerializeText(snap);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_BpfScrape10kSeries)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tpe

BENCHMARK_MAIN();
