// BpfMetric's build (bpf_metric.h): from a spec to loaded programs and their maps, by steps —
// key layouts, program emission, maps, loading, the series reader. The run-time side (attach,
// snapshots, sweeps) is bpf_metric.cc.
#include <bpf/bpf.h>

#include <algorithm>
#include <cstring>

#include "bpf/bpf_metric.h"
#include "bpf/map_syscall_priority.h"

namespace tpe::bpf {
namespace {

std::string ProgramName(const std::string& metric, const std::string& role) {
  return "tpe_" + role.substr(0, 3) + "_" + metric;  // cut to 15 characters by the loader
}

const FilterExpr* FilterOf(const BpfEndpoint& ep) { return ep.filter ? &*ep.filter : nullptr; }
const ProbeRecord* ProbeOf(const BpfEndpoint& ep) { return ep.probe ? &*ep.probe : nullptr; }

}  // namespace

uint64_t PreallocatedBytes(uint32_t key_size, uint32_t value_size, uint32_t max_entries, bool per_cpu, uint32_t cpus) {
  auto align8 = [](uint64_t n) { return (n + 7) / 8 * 8; };
  constexpr uint64_t kElemHeader = 48;  // struct htab_elem before the key, x86-64
  const uint64_t value = per_cpu ? 8 + align8(value_size) * cpus : align8(value_size);
  return static_cast<uint64_t>(max_entries) * (kElemHeader + align8(key_size) + value);
}

Status BpfMetric::Build(bool create) {
  std::optional<NativeShape> native;
  TPE_RETURN_IF_ERROR(LayOut(&native));
  // Probe records guard with BPF_XCHG where the kernel has it (probe_record.h).
  for (BpfEndpoint* ep : Endpoints()) {
    if (ep->probe) ep->probe->atomic_guard = GetLoadOptions().atomic_xchg;
  }
  MapFds placeholder{0, 0, 0, 0};
  placeholder.refused = placeholder.lost = 0;
  TPE_RETURN_IF_ERROR(EmitPrograms(placeholder, native));
  if (!create) return Status::Ok();
  TPE_ASSIGN_OR_RETURN(MapFds fds, CreateMaps());
  TPE_RETURN_IF_ERROR(LoadPrograms(fds, native));
  OpenSeries();
  return Status::Ok();
}

Status BpfMetric::LayOut(std::optional<NativeShape>* native) {
  using Kind = BpfMetricSpec::Kind;
  start_names_tasks_ = inflight_gauge() && spec_.starts.at(0).labels.names_tasks();
  const bool gauge_kind = spec_.kind == Kind::kGauge;
  auto key = LayoutKey(spec_.end.labels);
  if (!key.ok()) return key.status();
  key_ = *key;
  if (pairs()) {
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
  if (spec_.native) {
    if (key_size_ > kMaxKeyBytes) {
      return Unimplemented("labels of " + std::to_string(cell_off_) + " key bytes with native buckets (at most " +
                           std::to_string(kMaxKeyBytes - kNativeCellBytes) + ")");
    }
    value_slots_ = NativeValueBytes(signed_sum) / 8;
    wide_at_ = 1;
    *native = NativeShape{spec_.native->mantissa_thresholds(), spec_.native->zero_max(), spec_.native->options().schema,
                          spec_.native->scale() < 0};
  }
  return Status::Ok();
}

Status BpfMetric::AddProgram(std::string role, const BpfEndpoint* ep, StatusOr<std::vector<bpf_insn>> insns) {
  if (!insns.ok()) return insns.status().WithContext(ep->event);
  Program p;
  p.role = std::move(role);
  p.endpoint = ep;
  p.insns = std::move(*insns);
  programs_.push_back(std::move(p));
  return Status::Ok();
}

Status BpfMetric::EmitPrograms(const MapFds& fds, const std::optional<NativeShape>& native) {
  using Kind = BpfMetricSpec::Kind;
  programs_.clear();
  switch (spec_.kind) {
    case Kind::kCounter: {
      CounterShape s;
      s.filter = FilterOf(spec_.end);
      s.probe = ProbeOf(spec_.end);
      s.key = key_;
      s.value = spec_.value;
      runs_in_value_ = !CountsRuns(s);
      return AddProgram("event", &spec_.end, EmitCounter(s, fds));
    }
    case Kind::kProfile: {
      CounterShape s;
      s.filter = FilterOf(spec_.end);
      s.probe = ProbeOf(spec_.end);
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
        return AddProgram("event", &spec_.end, EmitOffCpu(o, fds));
      }
      return AddProgram("event", &spec_.end, EmitCounter(s, fds));
    }
    case Kind::kHistogram: {
      HistogramShape s;
      s.filter = FilterOf(spec_.end);
      s.probe = ProbeOf(spec_.end);
      s.key = key_;
      s.value = *spec_.value;
      s.thresholds = thresholds_;
      s.native = native;
      runs_in_value_ = !CountsRuns(s);
      return AddProgram("event", &spec_.end, EmitHistogram(s, fds));
    }
    case Kind::kGauge:
      // An inflight gauge: a latency metric's starts and a bare end.
      return inflight_gauge() ? EmitPairPrograms(fds, native) : EmitGaugePrograms(fds);
    case Kind::kLatency:
      return EmitPairPrograms(fds, native);
  }
  return Status::Ok();
}

Status BpfMetric::EmitGaugePrograms(const MapFds& fds) {
  GaugeShape g;
  g.key = key_;
  if (gauge(BpfMetricSpec::Gauge::kUpDown)) {
    for (uint32_t side = 0; side < kUpDownSlots; ++side) {
      const BpfEndpoint& ep = side == 0 ? spec_.starts.at(0) : spec_.end;
      g.key = side == 0 ? *LayoutKey(ep.labels) : key_;  // each side reads its own fields (checked alike)
      g.filter = FilterOf(ep);
      g.probe = ProbeOf(ep);
      g.value = ep.value;
      g.slot = side;
      TPE_RETURN_IF_ERROR(AddProgram(side == 0 ? "up" : "down", &ep, EmitGauge(g, fds)));
    }
    return Status::Ok();
  }
  g.op = spec_.gauge == BpfMetricSpec::Gauge::kLast ? GaugeShape::Op::kLast
         // A negative scale turns the raw value's order around.
         : (spec_.gauge == BpfMetricSpec::Gauge::kMax) == (spec_.scale >= 0) ? GaugeShape::Op::kMax
                                                                             : GaugeShape::Op::kMin;
  g.filter = FilterOf(spec_.end);
  g.probe = ProbeOf(spec_.end);
  g.value = spec_.value;
  return AddProgram("event", &spec_.end, EmitGauge(g, fds));
}

Status BpfMetric::EmitPairPrograms(const MapFds& fds, const std::optional<NativeShape>& native) {
  for (size_t i = 0; i < spec_.starts.size(); ++i) {
    const BpfEndpoint& st = spec_.starts[i];
    LatencyStartShape s;
    s.filter = FilterOf(st);
    s.probe = ProbeOf(st);
    s.match = st.match;
    s.labels = i == 0 ? start_key_ : *LayoutKey(st.labels);
    TPE_RETURN_IF_ERROR(AddProgram(i == 0 ? "start" : "start" + std::to_string(i), &st, EmitLatencyStart(s, fds)));
  }
  LatencyEndShape e;
  e.filter = FilterOf(spec_.end);
  e.probe = ProbeOf(spec_.end);
  e.match = spec_.end.match;
  e.start_label_bytes = start_key_.size;
  e.labels = key_;
  e.thresholds = thresholds_;
  e.timeout_ns = spec_.timeout_ns;
  e.native = native;
  e.observe = latency();
  e.keyless_series = keyless_;
  return AddProgram("end", &spec_.end, EmitLatencyEnd(e, fds));
}

uint32_t BpfMetric::ValueEntries() const {
  // Native buckets: the map holds cells, up to max_buckets native and every classic bucket's per
  // series (their intersections: at most the sum of both), within 2^22 entries.
  if (spec_.native) {
    return static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t{spec_.max_series} * (spec_.native->options().max_buckets + thresholds_.size() + 1),
                           uint64_t{1} << 22));
  }
  return inflight_gauge() ? 1 : static_cast<uint32_t>(spec_.max_series);
}

StatusOr<MapFds> BpfMetric::CreateMaps() {
  using Kind = BpfMetricSpec::Kind;
  const uint32_t value_bytes = 8 * value_slots_;
  const uint32_t max_series = ValueEntries();
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
  if (pairs()) {
    const uint32_t match_bytes = static_cast<uint32_t>(8 * spec_.end.match.size());
    const uint32_t start_value_bytes = 8 + start_key_.MapKeySize();
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
  return fds;
}

Status BpfMetric::LoadPrograms(MapFds fds, const std::optional<NativeShape>& native) {
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
    TPE_RETURN_IF_ERROR(EmitPrograms(fds, native));  // the same shapes, now with the real maps
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
  return Status::Ok();
}

void BpfMetric::OpenSeries() {
  MapShape shape;
  shape.key_size = key_size_;
  shape.slots = value_slots_;
  shape.cpus = static_cast<uint32_t>(PossibleCpus());
  shape.max_entries = keyless_ ? 1 : ValueEntries();
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
}

}  // namespace tpe::bpf
