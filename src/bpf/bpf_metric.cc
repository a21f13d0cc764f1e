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

// Whether a label of `set` names a task (pid or tid): its series go when the task exits.
bool NamesTasks(const LabelSet& set) {
  for (const LabelSpec& l : set.labels()) {
    if (l.source == LabelSource::kPid || l.source == LabelSource::kTid) return true;
  }
  return false;
}

// Whether /proc has no entry for thread `tid`: the reader knows exits from PERF_RECORD_EXIT only
// when some ring is open, and a bpf-only plan has none.
bool GoneFromProc(uint32_t tid) { return ::access(("/proc/" + std::to_string(tid)).c_str(), F_OK) != 0; }

std::string ProgramName(const std::string& metric, const std::string& role) {
  return "tpe_" + role.substr(0, 3) + "_" + metric;  // cut to 15 characters by the loader
}

}  // namespace

uint64_t PreallocatedBytes(uint32_t key_size, uint32_t value_size, uint32_t max_entries, bool per_cpu, uint32_t cpus) {
  auto align8 = [](uint64_t n) { return (n + 7) / 8 * 8; };
  constexpr uint64_t kElemHeader = 48;  // struct htab_elem before the key, x86-64
  const uint64_t value = per_cpu ? 8 + align8(value_size) * cpus : align8(value_size);
  return static_cast<uint64_t>(max_entries) * (kElemHeader + align8(key_size) + value);
}

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

Status BpfMetric::Build(bool create) {
  using Kind = BpfMetricSpec::Kind;
  // Starts paired with ends through the starts map: a latency metric, an inflight gauge.
  const bool pairs = latency() || inflight_gauge();
  start_names_tasks_ = inflight_gauge() && NamesTasks(spec_.starts.at(0).labels);
  const bool gauge_kind = spec_.kind == Kind::kGauge;
  // 1. Layouts and thresholds: everything that can say Unimplemented, before any map exists.
  auto key = LayoutKey(spec_.end.labels);
  if (!key.ok()) return key.status();
  key_ = *key;
  if (pairs) {
    for (size_t i = 0; i < spec_.starts.size(); ++i) {
      auto sk = LayoutKey(spec_.starts[i].labels);
      if (!sk.ok()) return sk.status();
      if (i == 0) start_key_ = *sk;
      if (sk->size != start_key_.size) return Unimplemented("start events whose labels differ in size");
    }
    if (start_key_.size + key_.size > kMaxKeyBytes) {
      return Unimplemented("labels of " + std::to_string(start_key_.size + key_.size) +
                           " key bytes (the bpf engine takes at most " + std::to_string(kMaxKeyBytes) + ")");
    }
    key_size_ = std::max<uint32_t>(8, start_key_.size + key_.size);
    if (spec_.native) {
      cell_off_ = (start_key_.size + key_.size + 7) & ~7u;
      key_size_ = cell_off_ + kNativeCellBytes;
    }
    if (latency()) {
      TPE_RETURN_IF_ERROR(CheckThresholds(*spec_.buckets, 1e-9, false));
      thresholds_ = Thresholds(*spec_.buckets, 1e-9, false);
      // No labels, classic buckets: a 1-entry per-CPU array (programs.h keyless_series).
      keyless_ = start_key_.size + key_.size == 0 && !spec_.native;
      if (keyless_) key_size_ = 4;
    }
  } else if (gauge_kind) {
    key_size_ = key_.MapKeySize();  // a hash even without labels: one series under a zero key
    if (gauge(BpfMetricSpec::Gauge::kUpDown)) {
      // One series is one label set whichever side built it: the same slots of the same kinds.
      auto up = LayoutKey(spec_.starts.at(0).labels);
      if (!up.ok()) return up.status();
      bool same = up->size == key_.size && up->segments.size() == key_.segments.size();
      for (size_t i = 0; same && i < key_.segments.size(); ++i) {
        same = up->segments[i].kind == key_.segments[i].kind &&
               up->segments[i].key_offset == key_.segments[i].key_offset &&
               up->segments[i].key_size == key_.segments[i].key_size;
      }
      if (!same) return Unimplemented("up and down labels laid out differently in the program's key");
    }
  } else if (spec_.kind == Kind::kProfile) {
    // The StackKey 8-byte aligned (its image_ns is stored as a u64: the verifier refuses a
    // misaligned stack access), the padding zero.
    cell_off_ = (key_.size + 7) & ~7u;
    key_size_ = cell_off_ + static_cast<uint32_t>(sizeof(StackKey));
    if (key_size_ > kMaxKeyBytes) {
      return Unimplemented("labels of " + std::to_string(key_.size) + " key bytes (a bpf profile takes at most " +
                           std::to_string(kMaxKeyBytes - sizeof(StackKey)) + ")");
    }
  } else {
    keyless_ = key_.size == 0 && !spec_.native;  // a 1-entry per-CPU array (programs.h)
    key_size_ = keyless_ ? 4 : key_.MapKeySize();
    if (spec_.native) {
      cell_off_ = (key_.size + 7) & ~7u;
      key_size_ = cell_off_ + kNativeCellBytes;
    }
    if (spec_.kind == Kind::kHistogram) {
      TPE_RETURN_IF_ERROR(CheckThresholds(*spec_.buckets, spec_.scale, spec_.value->is_signed));
      thresholds_ = Thresholds(*spec_.buckets, spec_.scale, spec_.value->is_signed);
    }
  }
  // Wide sums (programs.h): a value counter's, after a histogram's or latency's buckets, after
  // a native cell's count.
  const bool signed_sum = spec_.kind == Kind::kHistogram && spec_.value->is_signed;
  value_slots_ = spec_.kind == Kind::kCounter           ? CounterValueBytes(spec_.value.has_value()) / 8
                 : spec_.kind == Kind::kProfile         ? 1
                 : gauge(BpfMetricSpec::Gauge::kUpDown) ? kUpDownSlots
                 : extreme_gauge()                      ? kExtremeSlots * kExtremeRecords
                                                        : HistogramValueBytes(thresholds_.size(), signed_sum) / 8;
  if (spec_.kind == Kind::kCounter && spec_.value) wide_sums_ = 1;
  if (spec_.kind == Kind::kHistogram || latency()) {
    wide_at_ = static_cast<uint32_t>(thresholds_.size() + 1);
    wide_sums_ = signed_sum ? 2 : 1;
  }
  std::optional<NativeShape> native;
  if (spec_.native) {
    if (key_size_ > kMaxKeyBytes) {
      return Unimplemented("labels of " + std::to_string(cell_off_) + " key bytes with native buckets (at most " +
                           std::to_string(kMaxKeyBytes - kNativeCellBytes) + ")");
    }
    value_slots_ = NativeValueBytes(signed_sum) / 8;
    wide_at_ = 1;
    native = NativeShape{spec_.native->mantissa_thresholds(), spec_.native->zero_max(), spec_.native->options().schema,
                         spec_.native->scale() < 0};
  }
  const uint32_t match_bytes = pairs ? static_cast<uint32_t>(8 * spec_.end.match.size()) : 0;
  const uint32_t start_value_bytes = 8 + start_key_.MapKeySize();

  // Probe records guard with BPF_XCHG where the kernel has it (probe_record.h).
  for (BpfEndpoint* ep : Endpoints()) {
    if (ep->probe) ep->probe->atomic_guard = GetLoadOptions().atomic_xchg;
  }
  auto probe_of = [](const BpfEndpoint& ep) { return ep.probe ? &*ep.probe : nullptr; };

  // 2. Emit every program with placeholder map fds (shape errors surface here), then the maps.
  auto emit = [&](const MapFds& fds) -> Status {
    programs_.clear();
    auto add = [&](std::string role, const BpfEndpoint* ep, StatusOr<std::vector<bpf_insn>> insns) -> Status {
      if (!insns.ok()) return insns.status().WithContext(ep->event);
      Program p;
      p.role = std::move(role);
      p.endpoint = ep;
      p.insns = std::move(*insns);
      programs_.push_back(std::move(p));
      return Status::Ok();
    };
    const FilterExpr* end_filter = spec_.end.filter ? &*spec_.end.filter : nullptr;
    switch (spec_.kind) {
      case Kind::kCounter: {
        CounterShape s;
        s.filter = end_filter;
        s.probe = probe_of(spec_.end);
        s.key = key_;
        s.value = spec_.value;
        runs_in_value_ = !CountsRuns(s);
        return add("event", &spec_.end, EmitCounter(s, fds));
      }
      case Kind::kProfile: {
        CounterShape s;
        s.filter = end_filter;
        s.probe = probe_of(spec_.end);
        s.key = key_;
        s.key.size = key_size_;
        s.stacks = CounterShape::Stacks{spec_.kernel_stack, spec_.user_stack, cell_off_};
        s.perf_event = spec_.end.clock;
        if (spec_.off_cpu) {
          OffCpuShape o;
          o.key = s.key;
          o.stacks = *s.stacks;
          o.prev_pid = spec_.off_cpu->prev_pid;
          o.next_pid = spec_.off_cpu->next_pid;
          o.prev_state = spec_.off_cpu->prev_state;
          o.own_tgid = spec_.off_cpu->own_tgid;
          o.min_block_ns = spec_.off_cpu->min_block_ns;
          return add("event", &spec_.end, EmitOffCpu(o, fds));
        }
        return add("event", &spec_.end, EmitCounter(s, fds));
      }
      case Kind::kHistogram: {
        HistogramShape s;
        s.filter = end_filter;
        s.probe = probe_of(spec_.end);
        s.key = key_;
        s.value = *spec_.value;
        s.thresholds = thresholds_;
        s.native = native;
        runs_in_value_ = !CountsRuns(s);
        return add("event", &spec_.end, EmitHistogram(s, fds));
      }
      case Kind::kGauge:
        if (!inflight_gauge()) {
          GaugeShape g;
          g.key = key_;
          if (gauge(BpfMetricSpec::Gauge::kUpDown)) {
            for (uint32_t side = 0; side < kUpDownSlots; ++side) {
              const BpfEndpoint& ep = side == 0 ? spec_.starts.at(0) : spec_.end;
              g.key = side == 0 ? *LayoutKey(ep.labels) : key_;  // each side reads its own fields (checked alike)
              g.filter = ep.filter ? &*ep.filter : nullptr;
              g.probe = probe_of(ep);
              g.value = ep.value;
              g.slot = side;
              TPE_RETURN_IF_ERROR(add(side == 0 ? "up" : "down", &ep, EmitGauge(g, fds)));
            }
            return Status::Ok();
          }
          g.op = spec_.gauge == BpfMetricSpec::Gauge::kLast ? GaugeShape::Op::kLast
                 // A negative scale turns the raw value's order around.
                 : (spec_.gauge == BpfMetricSpec::Gauge::kMax) == (spec_.scale >= 0) ? GaugeShape::Op::kMax
                                                                                     : GaugeShape::Op::kMin;
          g.filter = end_filter;
          g.probe = probe_of(spec_.end);
          g.value = spec_.value;
          return add("event", &spec_.end, EmitGauge(g, fds));
        }
        [[fallthrough]];  // an inflight gauge: a latency metric's start and a bare end
      case Kind::kLatency: {
        for (size_t i = 0; i < spec_.starts.size(); ++i) {
          const BpfEndpoint& st = spec_.starts[i];
          LatencyStartShape s;
          s.filter = st.filter ? &*st.filter : nullptr;
          s.probe = probe_of(st);
          s.match = st.match;
          s.labels = i == 0 ? start_key_ : *LayoutKey(st.labels);
          TPE_RETURN_IF_ERROR(add(i == 0 ? "start" : "start" + std::to_string(i), &st, EmitLatencyStart(s, fds)));
        }
        LatencyEndShape e;
        e.filter = end_filter;
        e.probe = probe_of(spec_.end);
        e.match = spec_.end.match;
        e.start_label_bytes = start_key_.size;
        e.labels = key_;
        e.thresholds = thresholds_;
        e.timeout_ns = spec_.timeout_ns;
        e.native = native;
        e.observe = latency();
        e.keyless_series = keyless_;
        return add("end", &spec_.end, EmitLatencyEnd(e, fds));
      }
    }
    return Status::Ok();
  };
  MapFds placeholder{0, 0, 0, 0};
  placeholder.refused = placeholder.lost = 0;
  TPE_RETURN_IF_ERROR(emit(placeholder));
  if (!create) return Status::Ok();

  // 3. The maps (preallocated when small enough: "Preallocation" in the header), then the
  // programs that use them.
  const uint32_t value_bytes = 8 * value_slots_;
  // Native buckets: the map holds cells, up to max_buckets native and every classic bucket's per
  // series (their intersections: at most the sum of both), within 2^22 entries.
  // An inflight gauge's end observes nothing: its values map is never written.
  const uint32_t max_series =
      spec_.native       ? static_cast<uint32_t>(std::min<uint64_t>(
                         uint64_t{spec_.max_series} * (spec_.native->options().max_buckets + thresholds_.size() + 1),
                         uint64_t{1} << 22))
      : inflight_gauge() ? 1
                         : static_cast<uint32_t>(spec_.max_series);
  const uint32_t cpus = static_cast<uint32_t>(PossibleCpus());
  auto hash_flags = [&](uint32_t key, uint32_t value, uint32_t entries, bool per_cpu) -> uint32_t {
    return PreallocatedBytes(key, value, entries, per_cpu, cpus) <= spec_.preallocate_max_bytes ? 0 : BPF_F_NO_PREALLOC;
  };
  if (spec_.end.clock &&
      PreallocatedBytes(key_size_, value_bytes, max_series, true, cpus) > spec_.preallocate_max_bytes) {
    return InvalidArgument(spec_.name + ": its map of " + std::to_string(max_series) + " series (x " +
                           std::to_string(cpus) + " possible CPUs) would preallocate " +
                           std::to_string(PreallocatedBytes(key_size_, value_bytes, max_series, true, cpus) >> 20) +
                           " MiB, over settings.bpf_preallocate_max_bytes (" +
                           std::to_string(spec_.preallocate_max_bytes >> 20) +
                           " MiB); a CPU profile's program (perf_event) takes preallocated maps only: lower "
                           "settings.max_stacks_per_profile or raise it");
  }
  if (keyless_) {
    TPE_ASSIGN_OR_RETURN(values_, CreateMap(BPF_MAP_TYPE_PERCPU_ARRAY, "tpe_" + spec_.name, 4, value_bytes, 1));
  } else {
    // A perf_event program takes preallocated hash maps only before Linux 6.1 (the verifier's
    // check_map_prog_compatibility): a clock profile's map always is (bounded above).
    TPE_ASSIGN_OR_RETURN(values_,
                         CreateMap(BPF_MAP_TYPE_PERCPU_HASH, "tpe_" + spec_.name, key_size_, value_bytes, max_series,
                                   spec_.end.clock ? 0 : hash_flags(key_size_, value_bytes, max_series, true)));
  }
  MapFds fds;
  fds.values = values_.get();
  if (spec_.kind == Kind::kProfile) {
    // Preallocated whatever its size (a stack map always is: stack_map_alloc).
    TPE_ASSIGN_OR_RETURN(stacks_,
                         CreateMap(BPF_MAP_TYPE_STACK_TRACE, "tpe_stacks", 4, 8 * spec_.max_frames, spec_.max_stacks));
    fds.stacks = stacks_.get();
    fds.image_stamps = spec_.user_stack ? spec_.image_stamps_fd : -1;
    if (spec_.off_cpu) {  // the switched-out tasks: thread id -> {u64 time, key}
      const uint32_t blocked_value = 8 + key_size_;
      const uint32_t inflight = static_cast<uint32_t>(spec_.max_inflight);
      TPE_ASSIGN_OR_RETURN(starts_, CreateMap(BPF_MAP_TYPE_HASH, "tpe_blocked", 4, blocked_value, inflight,
                                              hash_flags(4, blocked_value, inflight, false)));
      fds.starts = starts_.get();
    }
  }
  if (spec_.kind != Kind::kCounter && spec_.kind != Kind::kProfile && !keyless_) {
    TPE_ASSIGN_OR_RETURN(zero_, CreateMap(BPF_MAP_TYPE_ARRAY, "tpe_zero", 4, value_bytes, 1));
    fds.zero = zero_.get();
  }
  if (gauge(BpfMetricSpec::Gauge::kUpDown)) {  // changes refused a series (programs.h GaugeShape)
    const uint32_t entries = static_cast<uint32_t>(spec_.max_series), refused_bytes = 8 * kUpDownSlots;
    TPE_ASSIGN_OR_RETURN(refused_, CreateMap(BPF_MAP_TYPE_HASH, "tpe_refused", key_size_, refused_bytes, entries,
                                             hash_flags(key_size_, refused_bytes, entries, false)));
    TPE_ASSIGN_OR_RETURN(lost_, CreateMap(BPF_MAP_TYPE_ARRAY, "tpe_lost", 4, 8, 1));
    fds.refused = refused_.get();
    fds.lost = lost_.get();
  }
  if (extreme_gauge()) {  // the open window's number, 1 at first (a new value is window 0)
    TPE_ASSIGN_OR_RETURN(epoch_map_, CreateMap(BPF_MAP_TYPE_ARRAY, "tpe_epoch", 4, 8, 1));
    const uint32_t index = 0;
    const uint64_t first = window_.load();
    FifoMapSyscall fifo;
    if (bpf_map_update_elem(epoch_map_.get(), &index, &first, BPF_ANY) != 0) {
      return Internal(spec_.name + ": cannot write its epoch map: " + std::string(strerror(errno)));
    }
    fds.epoch = epoch_map_.get();
  }
  if (pairs) {
    const uint32_t inflight = static_cast<uint32_t>(spec_.max_inflight);
    TPE_ASSIGN_OR_RETURN(starts_, CreateMap(BPF_MAP_TYPE_HASH, "tpe_starts", match_bytes, start_value_bytes, inflight,
                                            hash_flags(match_bytes, start_value_bytes, inflight, false)));
    fds.starts = starts_.get();
    starts_map_ = std::make_unique<KernelMap>(starts_.get());
    MapShape starts_shape;
    starts_shape.key_size = match_bytes;
    starts_shape.slots = start_value_bytes / 8;
    starts_shape.max_entries = static_cast<uint32_t>(spec_.max_inflight);
    const LoadOptions options = GetLoadOptions();
    const auto mode = options.map_lookup_and_delete ? StartSweeper::Mode::kLookupAndDelete
                      : options.map_batch_ops       ? StartSweeper::Mode::kBatch
                                                    : StartSweeper::Mode::kCheckThenDelete;
    start_sweeper_ = std::make_unique<StartSweeper>(starts_map_.get(), starts_shape, spec_.timeout_ns, mode);
  }
  std::vector<Program> loaded;
  const size_t count = programs_.size();
  for (size_t i = 0; i < count; ++i) {
    TPE_ASSIGN_OR_RETURN(ScopedFd stats, CreateMap(BPF_MAP_TYPE_PERCPU_ARRAY, "tpe_stats", 4, 8, kStatCount));
    fds.stats = stats.get();
    ScopedFd record;
    if (const BpfEndpoint* ep = programs_[i].endpoint; ep->probe) {
      TPE_ASSIGN_OR_RETURN(record, CreateMap(BPF_MAP_TYPE_PERCPU_ARRAY, "tpe_record", 4, ep->probe->size, 1));
    }
    fds.record = record.valid() ? record.get() : -1;
    TPE_RETURN_IF_ERROR(emit(fds));  // the same shapes, now with the real maps
    Program p = std::move(programs_[i]);
    p.stats = std::move(stats);
    p.record = std::move(record);
    const bpf_prog_type type = p.endpoint->clock   ? BPF_PROG_TYPE_PERF_EVENT
                               : p.endpoint->probe ? BPF_PROG_TYPE_KPROBE
                                                   : BPF_PROG_TYPE_TRACEPOINT;
    TPE_ASSIGN_OR_RETURN(p.fd, LoadTracepointProgram(ProgramName(spec_.name, p.role), p.insns, type));
    loaded.push_back(std::move(p));
  }
  programs_ = std::move(loaded);
  MapShape shape;
  shape.key_size = key_size_;
  shape.slots = value_slots_;
  shape.cpus = static_cast<uint32_t>(PossibleCpus());
  shape.max_entries = keyless_ ? 1 : max_series;
  shape.array = keyless_;
  shape.wide_at = wide_at_;
  shape.wide_sums = wide_sums_;
  if (extreme_gauge()) {  // each CPU's value as it is: the window decides which count (ExtremeSeries)
    shape.slots = value_slots_ * shape.cpus;
    shape.cpus = 1;
  }
  series_ = std::make_unique<MapSeries>(std::make_unique<KernelMap>(values_.get()), shape,
                                        [this](std::string_view k) { return LabelKey(k); });
  // A native series is all its cells (the label key's last 8 bytes are the cell): swept as one.
  if (spec_.native) series_->SetSeriesOf([](const std::string& k) { return k.substr(0, k.size() - kNativeCellBytes); });
  if (gauge(BpfMetricSpec::Gauge::kUpDown)) {  // idle only at 0 (collectors/gauge.h)
    series_->SetMayIdle([this](const std::vector<uint64_t>& v) { return UpDownValue(v) == 0; },
                        MapSeries::Gauge::kStanding);
  } else if (extreme_gauge()) {  // nothing a scrape has yet to read: no window after the last read
    series_->SetMayIdle(
        [this](const std::vector<uint64_t>& v) {
          const uint64_t read = read_through_.load();
          for (size_t i = kExtremeWindow; i < v.size(); i += kExtremeSlots) {
            if (v[i] > read) return false;
          }
          return true;
        },
        MapSeries::Gauge::kWindowed);
  }
  return Status::Ok();
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
      NamesTasks(spec_.end.labels) || (!spec_.starts.empty() && NamesTasks(spec_.starts.front().labels));
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
