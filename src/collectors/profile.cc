#include "collectors/profile.h"

#include <atomic>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include "common/clock.h"
#include "unwind/cfi_cache.h"

namespace tpe {
namespace {

// The stack part of a series key, after the labels' key:
//   u32 pid; u16 kernel frames; u16 user frames; u64 kernel ips[]; {u32 file; u64 offset} user[]
template <typename T>
void Append(std::string* key, const T& v) {
  key->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T ReadAt(std::string_view key, size_t* at) {
  T v{};
  if (*at + sizeof(T) <= key.size()) std::memcpy(&v, key.data() + *at, sizeof(T));
  *at += sizeof(T);
  return v;
}

std::atomic<uint64_t> g_instances{0};

}  // namespace

uint64_t NextProfileInstance() { return g_instances.fetch_add(1) + 1; }

namespace {

// The identity of a series as Stacks() gives it: everything but its value.
auto SeriesOf(const StackCount& sc) {
  return std::tie(sc.labels, sc.pid, sc.kernel, sc.user_frames, sc.user, sc.image_ns, sc.kernel_lost, sc.user_lost);
}

struct SeriesHash {
  size_t operator()(const StackCount* sc) const {
    uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
    for (const auto& [k, v] : sc->labels) {
      mix(std::hash<std::string>()(k));
      mix(std::hash<std::string>()(v));
    }
    mix(sc->pid);
    for (uint64_t ip : sc->kernel) mix(ip);
    for (const UserFrame& f : sc->user_frames) mix(f.offset * 31 + f.file);
    for (uint64_t ip : sc->user) mix(ip);
    mix(sc->image_ns);
    mix(std::hash<std::string>()(sc->kernel_lost));
    mix(std::hash<std::string>()(sc->user_lost));
    return static_cast<size_t>(h);
  }
};

struct SeriesEqual {
  bool operator()(const StackCount* a, const StackCount* b) const { return SeriesOf(*a) == SeriesOf(*b); }
};

}  // namespace

std::vector<StackCount> StacksSince(const std::vector<StackCount>& before, std::vector<StackCount> after) {
  // Hashed, not ordered: a window's two reads of a profile of thousands of stacks are compared
  // in one pass each (bench/unwind_cost.sh's off-CPU profile: ~4,000 stacks of ~30 frames).
  std::unordered_map<const StackCount*, uint64_t, SeriesHash, SeriesEqual> was;
  was.reserve(before.size());
  for (const StackCount& sc : before) was[&sc] += sc.value;
  // Equal series of `after` (the bpf engine's keys can render the same: lost stacks under one
  // reason) are summed first, at the first one's place: each is compared with `before` once.
  std::unordered_map<const StackCount*, size_t, SeriesHash, SeriesEqual> first;  // keys point into `merged`
  first.reserve(after.size());
  std::vector<StackCount> merged;
  merged.reserve(after.size());  // never reallocated: `first` points into it
  for (StackCount& sc : after) {
    merged.push_back(std::move(sc));
    auto [it, fresh] = first.emplace(&merged.back(), merged.size() - 1);
    if (!fresh) {
      merged[it->second].value += merged.back().value;
      merged.pop_back();
    }
  }
  std::vector<StackCount> out;
  out.reserve(merged.size());
  for (StackCount& sc : merged) {
    auto it = was.find(&sc);
    if (it != was.end()) {
      if (sc.value == it->second) continue;
      if (sc.value > it->second) sc.value -= it->second;
    }
    out.push_back(std::move(sc));
  }
  return out;
}

ProfileCollector::ProfileCollector(std::string name, std::string help, LabelSet labels, size_t max_stacks,
                                   std::optional<FieldExtractor> value, double scale, std::optional<ClockWeight> clock)
    : name_(std::move(name)),
      help_(std::move(help)),
      labels_(std::move(labels)),
      value_(std::move(value)),
      scale_(scale),
      clock_(clock),
      instance_(NextProfileInstance()),
      series_(max_stacks) {
  key_.reserve(2048);
  ips_.reserve(256);
  chain_.kernel.reserve(128);
  chain_.user.reserve(128);
  user_frames_.reserve(128);
}

ProfileCollector::ProfileCollector(std::string name, std::string help, LabelSet labels, size_t max_stacks,
                                   OffCpuPairing off_cpu)
    : ProfileCollector(std::move(name), std::move(help), std::move(labels), max_stacks) {
  off_cpu_ = std::move(off_cpu);
}

bool ProfileCollector::BuildKey(const Sample& s, CommTable* comms) {
  const size_t nr = s.callchain.size() / sizeof(uint64_t);
  // The callchain's bytes are not 8-byte aligned in every ring position: copied out.
  ips_.resize(nr);  // within the reserved capacity for chains up to the kernel's 127 frames
  if (nr != 0) std::memcpy(ips_.data(), s.callchain.data(), nr * sizeof(uint64_t));
  if (!SplitCallchain(ips_, &chain_).ok() || !labels_.BuildKey(s, comms, &key_)) {
    decode_errors_.Add(1);
    return false;
  }
  other_frames_.Add(chain_.other);
  user_frames_.clear();
  if (!s.regs_user.empty() && images_ != nullptr) {
    // A "dwarf" profile: unwound from the sample's registers and stack copy, as it is read.
    regs_.resize(s.regs_user.size() / sizeof(uint64_t));
    std::memcpy(regs_.data(), s.regs_user.data(), regs_.size() * sizeof(uint64_t));
    unwind::ProcessCodeLookup lookup(images_, tables_, s.pid, s.time_ns, &span_memo_);
    const unwind::UnwindEnd end =
        unwind::Unwind(unwind::FromSampleRegs(regs_), s.stack_user, max_unwind_frames_, &lookup, &user_frames_);
    unwind_ends_[static_cast<size_t>(end)].Add(1);
  } else if (images_ != nullptr) {
    images_->Normalize(s.pid, chain_.user, s.time_ns, &user_frames_);
  } else {
    user_frames_.resize(chain_.user.size());
  }
  Append(&key_, s.pid);
  Append(&key_, static_cast<uint16_t>(chain_.kernel.size()));
  Append(&key_, static_cast<uint16_t>(user_frames_.size()));
  key_.append(reinterpret_cast<const char*>(chain_.kernel.data()), chain_.kernel.size() * sizeof(uint64_t));
  for (const UserFrame& f : user_frames_) {
    Append(&key_, f.file);
    Append(&key_, f.offset);
  }
  return true;
}

void ProfileCollector::OnSample(size_t /*event_index*/, const Sample& s, CommTable* comms) {
  if (s.time_ns < active_since_ns_) return;
  // One sample in kTimeEvery is timed and counts for kTimeEvery: two clock reads per sample
  // would be a syscall each where the clocksource has no vDSO (some VMs).
  constexpr uint64_t kTimeEvery = 16;
  struct Timed {
    RelaxedCounter* into;
    uint64_t from;
    ~Timed() {
      if (from != 0) into->Add((MonotonicNs() - from) * kTimeEvery);
    }
  } timed{&sample_ns_, ++timed_calls_ % kTimeEvery == 0 ? MonotonicNs() : 0};
  if (off_cpu_) {
    OnSwitch(s, comms);
    return;
  }
  uint64_t add = 1;
  if (value_) {
    int64_t raw = 0;
    if (!value_->ReadInteger(s.raw, &raw) || (value_->field().is_signed && raw < 0)) {
      decode_errors_.Add(1);
      return;
    }
    add = static_cast<uint64_t>(raw);
  } else if (clock_) {
    add = s.period;
  }
  if (!BuildKey(s, comms)) return;
  WideSum* c = series_.FindOrInsert(key_, [this](WideSum&) { stacks_.Add(1); });
  if (c == nullptr) {
    series_dropped_.Add(1);
    return;
  }
  samples_.Add(1);
  c->Add(add);
}

void ProfileCollector::OnSwitch(const Sample& s, CommTable* comms) {
  const OffCpuPairing& p = *off_cpu_;
  int64_t prev = 0, next = 0, state = 0;
  if (!p.prev_pid.ReadInteger(s.raw, &prev) || !p.next_pid.ReadInteger(s.raw, &next) ||
      !p.prev_state.ReadInteger(s.raw, &state)) {
    decode_errors_.Add(1);
    return;
  }
  // The task switched in: its time off CPU ends now, under the stack it left with.
  if (next > 0) {
    auto it = blocked_.find(static_cast<uint32_t>(next));
    if (it != blocked_.end()) {
      const uint64_t ns = s.time_ns > it->second.since_ns ? s.time_ns - it->second.since_ns : 0;
      if (ns < p.min_block_ns) {
        short_blocks_.Add(1);
      } else if (WideSum* c = series_.FindOrInsert(it->second.key, [this](WideSum&) { stacks_.Add(1); });
                 c == nullptr) {
        series_dropped_.Add(1);
      } else {
        samples_.Add(1);
        c->Add(ns);
      }
      blocked_.erase(it);
      blocked_gauge_.v.store(blocked_.size(), std::memory_order_relaxed);
    }
  }
  // The task switched out (the sample is its: its pid, comm and stack): off CPU from now on.
  // EXIT_DEAD (0x10) and EXIT_ZOMBIE (0x20) in the TASK_REPORT bits: it will not come back.
  constexpr int64_t kExiting = 0x10 | 0x20;
  if (prev > 0 && (state & kExiting) != 0 && blocked_.erase(static_cast<uint32_t>(prev)) > 0) {
    // Its switch-in was never seen; a thread that gets its id later must not find it.
    blocked_gauge_.v.store(blocked_.size(), std::memory_order_relaxed);
  }
  if (prev <= 0 || s.pid == p.own_pid || (state & kExiting) != 0) return;
  if (!BuildKey(s, comms)) return;
  auto [it, fresh] = blocked_.try_emplace(static_cast<uint32_t>(prev));
  // Switched out again with no switch-in seen since: the kernel did not deliver it (on some
  // kernels a CPU's switches out of its idle task are not traced). That block is lost, counted.
  if (!fresh) unpaired_.Add(1);
  if (fresh && blocked_.size() > p.max_blocked) {
    blocked_.erase(it);
    dropped_blocks_.Add(1);
    return;
  }
  it->second.since_ns = s.time_ns;
  it->second.key = key_;
  blocked_gauge_.v.store(blocked_.size(), std::memory_order_relaxed);
}

namespace {

uint64_t Saturated(const WideSum& v) {
  const uint128 sum = v.Get();
  return sum > ~uint64_t{0} ? ~uint64_t{0} : static_cast<uint64_t>(sum);
}

// StackProfile's default baseline: the stacks themselves.
struct StacksBaseline : StackBaseline {
  std::vector<StackCount> stacks;
};

// ProfileCollector's: each series' value by its id (SeriesTable::ForEachWithId), in id order. A
// baseline is only used with the collector that made it (Pipeline::ProfileOf checks instance()).
struct SeriesBaseline : StackBaseline {
  std::vector<std::pair<uint64_t, uint64_t>> values;  // (id, value), increasing ids
};

}  // namespace

std::shared_ptr<const StackBaseline> StackProfile::Baseline() const {
  auto b = std::make_shared<StacksBaseline>();
  b->stacks = Stacks();
  return b;
}

std::vector<StackCount> StackProfile::StacksSince(const StackBaseline& baseline) const {
  const auto* b = dynamic_cast<const StacksBaseline*>(&baseline);
  return tpe::StacksSince(b != nullptr ? b->stacks : std::vector<StackCount>{}, Stacks());
}

StackCount ProfileCollector::Decode(std::string_view key, uint64_t value,
                                    std::unordered_map<std::string_view, LabelPairs>* rendered) const {
  StackCount sc;
  const size_t label_bytes = labels_.KeySize(key);
  auto [labels, fresh] = rendered->try_emplace(key.substr(0, label_bytes));
  if (fresh) labels->second = labels_.Render(labels->first);
  sc.labels = labels->second;
  size_t at = label_bytes;
  sc.pid = ReadAt<uint32_t>(key, &at);
  const auto nk = ReadAt<uint16_t>(key, &at);
  const auto nu = ReadAt<uint16_t>(key, &at);
  sc.kernel.reserve(nk);
  sc.user_frames.reserve(nu);
  for (uint16_t i = 0; i < nk; ++i) sc.kernel.push_back(ReadAt<uint64_t>(key, &at));
  for (uint16_t i = 0; i < nu; ++i) {
    UserFrame f;
    f.file = ReadAt<FileId>(key, &at);
    f.offset = ReadAt<uint64_t>(key, &at);
    sc.user_frames.push_back(f);
  }
  sc.value = value;
  return sc;
}

std::vector<StackCount> ProfileCollector::Stacks() const {
  std::vector<StackCount> out;
  out.reserve(stacks_.Get());
  // A profile's stacks share a few label sets (one per comm): each rendered once per read.
  std::unordered_map<std::string_view, LabelPairs> rendered;
  series_.ForEach([&](std::string_view key, const WideSum& v) { out.push_back(Decode(key, Saturated(v), &rendered)); });
  return out;
}

std::shared_ptr<const StackBaseline> ProfileCollector::Baseline() const {
  auto b = std::make_shared<SeriesBaseline>();
  b->values.reserve(stacks_.Get());
  series_.ForEachWithId(
      [&](uint64_t id, std::string_view, const WideSum& v) { b->values.emplace_back(id, Saturated(v)); });
  return b;
}

std::vector<StackCount> ProfileCollector::StacksSince(const StackBaseline& baseline) const {
  const auto* b = dynamic_cast<const SeriesBaseline*>(&baseline);
  if (b == nullptr) return StackProfile::StacksSince(baseline);
  std::vector<StackCount> out;
  std::unordered_map<std::string_view, LabelPairs> rendered;
  // Both walks are in increasing id order: merged, no key looked up.
  size_t at = 0;
  series_.ForEachWithId([&](uint64_t id, std::string_view key, const WideSum& v) {
    uint64_t value = Saturated(v);
    while (at < b->values.size() && b->values[at].first < id) ++at;  // series removed since
    if (at < b->values.size() && b->values[at].first == id) {
      const uint64_t before = b->values[at].second;
      if (value == before) return;          // did not grow: not decoded
      if (value > before) value -= before;  // (a series never shrinks; else taken whole)
    }
    out.push_back(Decode(key, value, &rendered));
  });
  return out;
}

MetricSnapshot ProfileCollector::Snapshot() const {
  MetricSnapshot m;
  m.name = name_;
  m.help = help_;
  return m;
}

std::vector<EngineStat> ProfileCollector::EngineStats() const {
  std::vector<EngineStat> out = {
      {&kProfileSamplesTotalDesc, {{"profile", name_}}, static_cast<double>(samples_.Get())},
      {&kProfileStacksDesc, {{"profile", name_}}, static_cast<double>(stacks_.Get())},
      {&kProfileOtherContextFramesTotalDesc, {{"profile", name_}}, static_cast<double>(other_frames_.Get())},
      {&kProfileSampleSecondsTotalDesc, {{"profile", name_}}, sample_ns_.Get() * 1e-9},
  };
  for (int e = 0; e < unwind::kUnwindEnds; ++e) {
    const uint64_t n = unwind_ends_[static_cast<size_t>(e)].Get();
    if (n == 0) continue;
    out.push_back({&kProfileUnwindEndsTotalDesc,
                   {{"profile", name_}, {"reason", unwind::UnwindEndName(static_cast<unwind::UnwindEnd>(e))}},
                   static_cast<double>(n)});
  }
  if (off_cpu_) {
    out.push_back(
        {&kProfileOffCpuShortBlocksTotalDesc, {{"profile", name_}}, static_cast<double>(short_blocks_.Get())});
    out.push_back({&kProfileOffCpuDroppedTotalDesc, {{"profile", name_}}, static_cast<double>(dropped_blocks_.Get())});
    out.push_back({&kProfileOffCpuUnpairedTotalDesc, {{"profile", name_}}, static_cast<double>(unpaired_.Get())});
    out.push_back({&kProfileOffCpuTasksDesc, {{"profile", name_}}, static_cast<double>(blocked_gauge_.Get())});
  }
  return out;
}

}  // namespace tpe
