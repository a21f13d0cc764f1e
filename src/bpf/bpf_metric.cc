#include "bpf/bpf_metric.h"

#include <bpf/bpf.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "bpf/map_syscall_priority.h"
#include "common/clock.h"

namespace tpe::bpf {
namespace {

// Whether /proc has no entry for thread `tid`: the reader knows exits from PERF_RECORD_EXIT only
// when some ring is open, and a bpf-only plan has none.
bool GoneFromProc(uint32_t tid) { return ::access(("/proc/" + std::to_string(tid)).c_str(), F_OK) != 0; }

}  // namespace

BpfMetric::~BpfMetric() { Detach(); }

StatusOr<std::unique_ptr<BpfMetric>> BpfMetric::CreateUnloaded(BpfMetricSpec spec) {
  std::unique_ptr<BpfMetric> m(new BpfMetric(std::move(spec)));
  TPE_RETURN_IF_ERROR(m->Build(false));
  return m;
}

StatusOr<std::unique_ptr<BpfMetric>> BpfMetric::Create(BpfMetricSpec spec) {
  std::unique_ptr<BpfMetric> m(new BpfMetric(std::move(spec)));
  TPE_RETURN_IF_ERROR(m->Build(true));
  return m;
}

std::vector<BpfEndpoint*> BpfMetric::Endpoints() {
  std::vector<BpfEndpoint*> out;
  for (BpfEndpoint& s : spec_.starts) out.push_back(&s);
  out.push_back(&spec_.end);
  return out;
}

Status BpfMetric::Attach() {
  if (attached()) return Status::Ok();
  if (!loaded()) return Internal(spec_.name + ": its BPF maps and programs were never loaded");
  std::vector<TracepointAttachment> fds;
  for (const Program& p : programs_) {
    if (p.endpoint->clock) {
      clock_attached_ = true;  // attached by the pipeline to its clock events (the header)
      continue;
    }
    auto fd = AttachTracepoint(p.fd.get(), p.endpoint->tracepoint_id);
    if (!fd.ok()) return fd.status().WithContext(spec_.name + " (" + p.endpoint->event + ")");
    fds.push_back(std::move(*fd));
  }
  attach_fds_ = std::move(fds);
  return Status::Ok();
}

void BpfMetric::Detach() {
  attach_fds_.clear();
  clock_attached_ = false;
}

namespace {

// The raw sum of the wide sums at `w` (summed values: at rest): that of the values >= 0, less
// (`is_signed`) that of the negative ones' magnitudes after it.
int128 RawSum(const uint64_t* w, bool is_signed) {
  uint128 pos = 0, neg = 0;
  DecodeWide(w[kWideCommit], w[kWideLo], w[kWideAnnounce], &pos);
  if (is_signed) DecodeWide(w[kWideWords + kWideCommit], w[kWideWords + kWideLo], w[kWideWords + kWideAnnounce], &neg);
  return static_cast<int128>(pos) - static_cast<int128>(neg);
}

// Slot `slot` of a per-CPU stats map, summed over CPUs (0 if unreadable).
uint64_t ReadStat(int stats_fd, uint32_t slot) {
  std::vector<uint64_t> per_cpu(static_cast<size_t>(PossibleCpus()));
  FifoMapSyscall fifo;
  if (bpf_map_lookup_elem(stats_fd, &slot, per_cpu.data()) != 0) return 0;
  uint64_t sum = 0;
  for (uint64_t v : per_cpu) sum += v;
  return sum;
}

}  // namespace

std::array<uint64_t, kStatCount> BpfMetric::Stats() const {
  std::array<uint64_t, kStatCount> out{};
  for (const Program& p : programs_) {
    for (uint32_t slot = 0; slot < kStatCount; ++slot) out[slot] += ReadStat(p.stats.get(), slot);
  }
  return out;
}

uint64_t BpfMetric::KeylessCount() const {
  if (!values_.valid()) return 0;
  KernelMap map(values_.get());
  MapShape shape;
  shape.key_size = 4;
  shape.slots = value_slots_;
  shape.cpus = static_cast<uint32_t>(PossibleCpus());
  shape.max_entries = 1;
  shape.array = true;
  bool batch = false;  // one entry: one lookup
  uint64_t n = 0;
  for (const MapEntry& e : ReadMap(&map, shape, &batch)) {
    // A counter's count; a histogram's buckets (the wide sums follow them).
    const size_t counts = spec_.kind == BpfMetricSpec::Kind::kCounter ? 1 : wide_at_;
    for (size_t i = 0; i < counts && i < e.value.size(); ++i) n += e.value[i];
  }
  return n;
}

std::vector<BpfMetric::ProgramReport> BpfMetric::Programs() const {
  std::vector<ProgramReport> out;
  for (const Program& p : programs_) {
    ProgramReport r;
    r.role = p.role;
    r.event = p.endpoint->event;
    r.runs = runs_in_value_ ? KeylessCount() : ReadStat(p.stats.get(), kRuns);
    r.kernel = ReadProgramStats(p.fd.get());
    if (p.endpoint->probe) {
      r.probe = true;
      r.busy = ReadStat(p.stats.get(), kBusy);
      r.string_faults = ReadStat(p.stats.get(), kStringFaults);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string BpfMetric::Disassembly() const {
  std::string out;
  for (const Program& p : programs_) {
    out += "program " + p.role + " (" + p.endpoint->event + "), " + std::to_string(p.insns.size()) +
           " instructions:\n" + Disassemble(p.insns);
  }
  return out;
}

uint64_t BpfMetric::series_dropped() const {
  uint64_t lost = 0;
  if (series_ && extreme_gauge()) lost = series_->lost();
  std::lock_guard<std::mutex> lock(mu_);
  return Stats()[kDropped] + inflight_refused_total_ + lost;
}
uint64_t BpfMetric::decode_errors() const { return Stats()[kDecodeErrors]; }
uint64_t BpfMetric::no_memory() const { return Stats()[kNoMemory]; }
void BpfMetric::OnCostWindow(bool open) {
  const bool sysctl = RunTimeStatsSysctlOn();
  for (const Program& p : programs_) {
    const ProgramStats st = ReadProgramStats(p.fd.get());
    if (open) {
      p.cost->BeginWindow(st.run_time_ns, st.run_cnt, sysctl);
    } else {
      p.cost->EndWindow(st.run_time_ns, st.run_cnt, sysctl);
    }
  }
}

std::vector<EngineStat> BpfMetric::EngineStats() const {
  std::vector<EngineStat> out;
  const std::vector<ProgramReport> reports = Programs();
  for (size_t i = 0; i < reports.size(); ++i) {
    const ProgramReport& p = reports[i];
    LabelPairs l{{"metric", spec_.name}, {"program", p.role}, {"event", p.event}};
    out.push_back({&kBpfProgramRunsTotalDesc, l, static_cast<double>(p.runs)});
    // A clock's program skipped by bpf_overflow_handler (bpf_prog_active raised) is not a miss
    // the kernel counts: no series rather than a false 0 (bpf_profile.h).
    if (!spec_.end.clock) {
      out.push_back({&kBpfProgramMissesTotalDesc, l, static_cast<double>(p.kernel.recursion_misses)});
    }
    if (p.probe) {
      // Our own counts: exported on every kernel (the misses family is not before Linux 6.7).
      out.push_back({&kBpfProbeBusyTotalDesc, l, static_cast<double>(p.busy)});
      out.push_back({&kBpfProbeStringFaultsTotalDesc, l, static_cast<double>(p.string_faults)});
    }
    // What the sysctl timed, without our cost windows' own time; absent where the kernel's
    // bpf_prog_info has no run_time_ns (before 5.1: never a false 0).
    if (p.kernel.has_run_time) {
      out.push_back({&kBpfProgramRunSecondsTotalDesc, l,
                     static_cast<double>(programs_[i].cost->RunTimeNs(p.kernel.run_time_ns)) * 1e-9});
    }
    // Absent until a cost window has measured the program (never a false 0).
    if (auto seconds = programs_[i].cost->Seconds(p.runs)) {
      out.push_back({&kBpfProgramCpuSecondsTotalDesc, l, *seconds});
    }
  }
  out.push_back({&kBpfMapNoMemoryTotalDesc, {{"metric", spec_.name}}, static_cast<double>(no_memory())});
  out.push_back({&kBpfMapMemoryBytesDesc, {{"metric", spec_.name}}, static_cast<double>(map_memory_bytes())});
  return out;
}

uint64_t BpfMetric::map_memory_bytes() const {
  uint64_t n = 0;
  for (const ScopedFd* fd : {&values_, &zero_, &starts_, &stacks_, &epoch_map_, &refused_, &lost_}) {
    if (fd->valid()) n += MapMemoryBytes(fd->get());
  }
  for (const Program& p : programs_) {
    if (p.stats.valid()) n += MapMemoryBytes(p.stats.get());
    if (p.record.valid()) n += MapMemoryBytes(p.record.get());
  }
  return n;
}

uint64_t BpfMetric::unmatched(Reason r) const {
  const auto st = Stats();
  switch (r) {
    case LatencyUnmatched::kReplaced: {
      std::lock_guard<std::mutex> lock(mu_);
      return st[bpf::kReplaced] + swept_.replaced;
    }
    case LatencyUnmatched::kNoStart:
      return st[bpf::kNoStart];
    case LatencyUnmatched::kTableFull: {
      std::lock_guard<std::mutex> lock(mu_);
      return st[bpf::kTableFull] + swept_.table_full;
    }
    case LatencyUnmatched::kExpired: {
      std::lock_guard<std::mutex> lock(mu_);
      return st[bpf::kExpired] + swept_.expired;
    }
    case LatencyUnmatched::kSeriesLimit:
      return st[bpf::kDropped];
    default:
      return 0;
  }
}

size_t BpfMetric::inflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(swept_.inflight);
}

std::pair<uint64_t, uint64_t> BpfMetric::series_removed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {removed_idle_, removed_exited_};
}

std::string BpfMetric::LabelKey(std::string_view bpf_key) const {
  if (spec_.native) {  // the labels' key, then the cell as it is
    const std::string_view cell = bpf_key.substr(std::min<size_t>(cell_off_, bpf_key.size()));
    std::string out = LabelKeyOfLabels(bpf_key.substr(0, std::min<size_t>(cell_off_, bpf_key.size())));
    out.append(cell.data(), cell.size());
    return out;
  }
  return LabelKeyOfLabels(bpf_key);
}

std::string BpfMetric::LabelKeyOfLabels(std::string_view bpf_key) const {
  if (!latency()) return ToLabelKey(key_, bpf_key);
  const std::string_view start = bpf_key.substr(0, std::min<size_t>(start_key_.size, bpf_key.size()));
  const std::string_view end = bpf_key.substr(start.size());
  return ToLabelKey(start_key_, start) + ToLabelKey(key_, end);
}

LabelPairs BpfMetric::Render(std::string_view label_key) const {
  if (!latency()) return OwnLabels().Render(label_key);
  const LabelSet& start = spec_.starts.front().labels;
  const size_t n = start.KeySize(label_key);
  LabelPairs out = start.Render(label_key.substr(0, n));
  LabelPairs end = spec_.end.labels.Render(label_key.substr(n));
  out.insert(out.end(), end.begin(), end.end());
  return out;
}

void BpfMetric::AddNativeSeries(const std::map<std::string, std::vector<uint64_t>>& cells, bool signed_sum,
                                double scale, MetricSnapshot* s) const {
  const NativeLayout& layout = *spec_.native;
  s->classic = !s->bucket_bounds.empty();
  s->native_max_buckets = layout.options().max_buckets;
  const size_t n = s->bucket_bounds.size() + 1;
  struct Series {
    SeriesSnapshot snap;
    int128 raw_sum = 0;
    std::map<int32_t, uint64_t> positive, negative;
  };
  std::map<std::string, Series> by_labels;  // label key (without the cell) -> its cells added up
  for (const auto& [key, v] : cells) {
    if (key.size() < kNativeCellBytes || v.size() < NativeValueBytes(signed_sum) / 8) continue;
    const std::string labels = key.substr(0, key.size() - kNativeCellBytes);
    int32_t position;
    uint32_t classic;
    std::memcpy(&position, key.data() + labels.size(), 4);
    std::memcpy(&classic, key.data() + labels.size() + 4, 4);
    Series& ser = by_labels[labels];
    if (ser.snap.bucket_counts.empty()) ser.snap.bucket_counts.assign(n, 0);
    ser.snap.bucket_counts[std::min<size_t>(classic, n - 1)] += v[0];
    ser.snap.count += v[0];
    ser.raw_sum += RawSum(v.data() + 1, signed_sum);
    if (position == 0) {
      if (!ser.snap.native) ser.snap.native.emplace();
      ser.snap.native->zero_count += v[0];
    } else if (position > 0) {
      ser.positive[layout.IndexOfPosition(static_cast<uint32_t>(position - 1))] += v[0];
    } else {
      ser.negative[layout.IndexOfPosition(static_cast<uint32_t>(-position - 1))] += v[0];
    }
  }
  for (auto& [labels, ser] : by_labels) {
    SeriesSnapshot& ss = ser.snap;
    ss.labels = Render(labels);
    ss.sum = ToDouble(ser.raw_sum) * scale;  // the exact sum rounded once, as the perf engine's
    if (!ss.native) ss.native.emplace();
    ss.native->schema = layout.options().schema;
    ss.native->zero_threshold = layout.options().zero_threshold;
    ss.native->positive.assign(ser.positive.begin(), ser.positive.end());
    ss.native->negative.assign(ser.negative.begin(), ser.negative.end());
    s->series.push_back(std::move(ss));
  }
}

double BpfMetric::UpDownValue(const std::vector<uint64_t>& v) const {
  auto side = [](const BpfEndpoint& ep, uint64_t raw) {
    if (!ep.value) return static_cast<double>(raw);  // events counted
    const double x = ep.value->is_signed ? static_cast<double>(static_cast<int64_t>(raw)) : static_cast<double>(raw);
    return x * ep.scale;
  };
  if (v.size() < kUpDownSlots || spec_.starts.empty()) return 0;
  return side(spec_.starts.front(), v[0]) - side(spec_.end, v[1]);
}

void BpfMetric::UpDownSeries(const std::map<std::string, std::vector<uint64_t>>& merged, MetricSnapshot* s) const {
  for (const auto& [key, v] : merged) {
    SeriesSnapshot ss;
    ss.labels = Render(key);
    ss.value = UpDownValue(v);
    s->series.push_back(std::move(ss));
  }
}

void BpfMetric::SweepRefused(const std::function<bool(const std::string&)>& dead) {
  KernelMap map(refused_.get());
  MapShape shape;
  shape.key_size = key_size_;
  shape.slots = kUpDownSlots;
  shape.max_entries = static_cast<uint32_t>(spec_.max_series);
  bool batch = GetLoadOptions().map_batch_ops;
  // Not exact: a change a program adds between the read and the delete is lost with the entry
  // (its label set's series refused again within those microseconds).
  for (const MapEntry& e : ReadMap(&map, shape, &batch)) {
    if (UpDownValue(e.value) == 0 || (dead && dead(LabelKey(e.key)))) map.Delete(e.key.data());
  }
}

void BpfMetric::InflightSeries(MetricSnapshot* s) const {
  if (!starts_map_) return;
  MapShape shape;
  shape.key_size = static_cast<uint32_t>(8 * spec_.end.match.size());
  shape.slots = (8 + start_key_.MapKeySize()) / 8;  // the start's time, then its labels
  shape.max_entries = static_cast<uint32_t>(spec_.max_inflight);
  bool batch = true;
  const uint64_t now = MonotonicNs();  // bpf_ktime_get_ns: CLOCK_MONOTONIC
  std::map<std::string, uint64_t> counts;
  for (const MapEntry& e : ReadMap(starts_map_.get(), shape, &batch)) {
    if (e.value.size() < shape.slots) continue;
    // Older than the timeout: expired (the sweep or an end takes it out and counts it), as the
    // perf engine's starts leave their gauge.
    if (spec_.timeout_ns != 0 && now > e.value[0] && now - e.value[0] > spec_.timeout_ns) continue;
    const std::string_view labels(reinterpret_cast<const char*>(e.value.data() + 1), start_key_.size);
    ++counts[ToLabelKey(start_key_, labels)];
  }
  const LabelSet& labels = spec_.starts.front().labels;
  const TaskExited gone = GoneFromProc;
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> refused;  // this scrape's
  for (auto it = counts.begin(); it != counts.end();) {
    const std::string& key = it->first;
    // A start of a task that exited (it died inside the call) names a series that went with the
    // task, as on the perf engine; the start leaves when it expires.
    if (start_names_tasks_ && labels.NamesExitedTask(key, gone)) {
      it = counts.erase(it);
      continue;
    }
    auto seen = inflight_seen_.find(key);
    if (seen == inflight_seen_.end()) {
      if (inflight_seen_.size() >= spec_.max_series) {  // no room: dropped, counted once while it lasts
        if (inflight_refused_.insert(key).second) ++inflight_refused_total_;
        refused.insert(key);
        it = counts.erase(it);
        continue;
      }
      seen = inflight_seen_.emplace(key, now).first;
      inflight_refused_.erase(key);
    }
    seen->second = now;
    ++it;
  }
  // A label set refused before but not now (no starts left, or shown): a later refusal is a new drop.
  inflight_refused_ = std::move(refused);
  for (const auto& [key, seen] : inflight_seen_) {
    SeriesSnapshot ss;
    ss.labels = labels.Render(key);
    auto it = counts.find(key);
    ss.value = it == counts.end() ? 0 : static_cast<double>(it->second);
    s->series.push_back(std::move(ss));
  }
}

void BpfMetric::ExtremeSeries(MetricSnapshot* s) const {
  if (!series_ || !epoch_map_.valid()) return;
  std::lock_guard<std::mutex> window_lock(window_mu_);
  // Close the window: runs from now on write the next one.
  const uint64_t closed = window_.load();
  const uint64_t open = closed + 1;
  const uint32_t index = 0;
  FifoMapSyscall fifo;
  if (bpf_map_update_elem(epoch_map_.get(), &index, &open, BPF_ANY) != 0) {
    spdlog::warn("{}: cannot close its scrape window (epoch map update: {}): no series on this page", spec_.name,
                 strerror(errno));
    return;
  }
  window_.store(open);
  // Every run that read `closed` has written its value.
  if (Status st = WaitForProgramRuns(); !st.ok()) {
    static std::once_flag said;
    std::call_once(said, [&] {
      spdlog::warn(
          "{}: max/min/last gauges on the bpf engine wait 20 ms at each scrape instead (a program run "
          "preempted for longer could write into a window already read)",
          st.ToString());
    });
    usleep(20000);
  }
  const bool is_signed = spec_.value && spec_.value->is_signed;
  const size_t record = kExtremeSlots * (closed % kExtremeRecords);  // window w is in record w & 1
  // Per program key (program keys that render one label set combine like CPUs, not added).
  std::map<std::string, std::vector<const uint64_t*>> by_labels;  // label key -> its CPUs' records
  const auto values = series_->ReadEach();
  read_through_.store(closed);  // the sweep may take a series now empty of unread windows
  const size_t per_cpu = kExtremeSlots * kExtremeRecords;
  for (const auto& [key, v] : values) {
    auto& records = by_labels[key];
    for (size_t c = 0; (c + 1) * per_cpu <= v.size(); ++c) records.push_back(v.data() + c * per_cpu + record);
  }
  for (const auto& [key, records] : by_labels) {
    bool have = false;
    double best = 0;
    uint64_t best_time = 0;
    for (const uint64_t* cpu : records) {
      if (cpu[kExtremeWindow] != closed) continue;  // nothing of the closed window on this CPU
      const uint64_t raw = cpu[kExtremeValue];
      const double x =
          (is_signed ? static_cast<double>(static_cast<int64_t>(raw)) : static_cast<double>(raw)) * spec_.scale;
      bool take = !have;
      switch (spec_.gauge) {
        case BpfMetricSpec::Gauge::kMax:
          take = take || x > best;
          break;
        case BpfMetricSpec::Gauge::kMin:
          take = take || x < best;
          break;
        default:  // kLast: the latest
          take = take || cpu[kExtremeTime] > best_time;
      }
      if (take) {
        best = x;
        best_time = cpu[kExtremeTime];
        have = true;
      }
    }
    if (!have) continue;
    SeriesSnapshot ss;
    ss.labels = Render(key);
    ss.value = best;
    s->series.push_back(std::move(ss));
  }
}

MetricSnapshot BpfMetric::Snapshot() const {
  if (spec_.kind == BpfMetricSpec::Kind::kGauge) {
    MetricSnapshot s;
    s.name = spec_.name;
    s.help = spec_.help;
    s.kind = MetricKind::kGauge;
    s.combine = GaugeCollector::CombineOf(spec_.gauge);
    if (inflight_gauge()) {
      InflightSeries(&s);
    } else if (gauge(BpfMetricSpec::Gauge::kUpDown)) {
      if (series_) UpDownSeries(series_->Read(), &s);
    } else {
      ExtremeSeries(&s);
    }
    return s;
  }
  const bool counter = spec_.kind == BpfMetricSpec::Kind::kCounter;
  // By label key: program keys whose labels render the same merge, and retired values join.
  std::map<std::string, std::vector<uint64_t>> merged;
  if (series_) merged = series_->Read();
  MetricSnapshot s;
  s.name = spec_.name;
  s.help = spec_.help;
  s.kind = counter ? MetricKind::kCounter : MetricKind::kHistogram;
  if (!counter) s.bucket_bounds = spec_.buckets->bounds();
  const bool signed_sum = spec_.value && spec_.value->is_signed;
  const double scale = latency() ? 1e-9 : spec_.scale;
  if (spec_.native) {
    AddNativeSeries(merged, signed_sum, scale, &s);
    return s;
  }
  for (auto& [key, v] : merged) {
    SeriesSnapshot ss;
    ss.labels = Render(key);
    if (counter) {
      ss.value = spec_.value ? ToDouble(RawSum(v.data(), false)) * scale : static_cast<double>(v[0]);
    } else {
      ss.bucket_counts.assign(v.begin(), v.begin() + wide_at_);
      for (uint64_t c : ss.bucket_counts) ss.count += c;
      ss.sum = ToDouble(RawSum(v.data() + wide_at_, signed_sum)) * scale;
    }
    s.series.push_back(std::move(ss));
  }
  return s;
}

void BpfMetric::Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited_record) {
  // A profile keeps its stacks for its whole life (collectors/profile.h), on either engine.
  if (spec_.kind == BpfMetricSpec::Kind::kProfile) return;
  const TaskExited exited = [&exited_record](uint32_t tid) { return exited_record(tid) || GoneFromProc(tid); };
  // A series names a task when a pid/tid label does; reading every series costs a syscall
  // each, so only when some series could be removed (MapSeries::Sweep).
  const bool names_tasks =
      spec_.end.labels.names_tasks() || (!spec_.starts.empty() && spec_.starts.front().labels.names_tasks());
  std::function<bool(const std::string&)> dead;
  if (names_tasks) {
    dead = [&](const std::string& lk) {
      if (!latency()) return OwnLabels().NamesExitedTask(lk, exited);
      const LabelSet& start = spec_.starts.front().labels;
      const size_t n = start.KeySize(lk);
      return start.NamesExitedTask(lk.substr(0, n), exited) || spec_.end.labels.NamesExitedTask(lk.substr(n), exited);
    };
  }
  MapSeries::Removed removed;
  if (series_) removed = series_->Sweep(now_ns, idle_ns, dead);
  if (refused_.valid()) SweepRefused(dead);
  const uint64_t idle = removed.idle, gone = removed.exited;
  // Latency starts older than the timeout: taken out and counted (start_sweep.h); the end
  // program refuses them too, and whichever takes one counts it.
  StartSweepCounts swept;
  if (start_sweeper_) swept = start_sweeper_->Sweep(MonotonicNs());  // bpf_ktime_get_ns: CLOCK_MONOTONIC
  std::lock_guard<std::mutex> lock(mu_);
  removed_idle_ += idle;
  removed_exited_ += gone;
  // An inflight gauge's label sets at 0: gone once unseen for idle_ns (or their task exited).
  for (auto it = inflight_seen_.begin(); it != inflight_seen_.end();) {
    const bool idle_set = idle_ns != 0 && now_ns >= it->second && now_ns - it->second >= idle_ns;
    const bool dead_set = names_tasks && spec_.starts.front().labels.NamesExitedTask(it->first, exited);
    if (!idle_set && !dead_set) {
      ++it;
      continue;
    }
    ++(idle_set ? removed_idle_ : removed_exited_);
    it = inflight_seen_.erase(it);
  }
  swept_.expired += swept.expired;
  swept_.replaced += swept.replaced;
  swept_.table_full += swept.table_full;
  swept_.inflight = swept.inflight;
}

}  // namespace tpe::bpf
