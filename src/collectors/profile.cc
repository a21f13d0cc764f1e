#include "collectors/profile.h"

#include <atomic>
#include <cstring>
#include <map>
#include <tuple>

#include "common/clock.h"

namespace tpe {
namespace {

// The stack part of a series key, after the labels' key:
//   u32 pid; u16 kernel frames; u16 user frames; u64 kernel ips[]; u64 user ips[]
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

std::vector<StackCount> StacksSince(const std::vector<StackCount>& before, std::vector<StackCount> after) {
  using Key = const StackCount*;
  struct Less {
    bool operator()(Key a, Key b) const {
      return std::tie(a->labels, a->pid, a->kernel, a->user, a->kernel_lost, a->user_lost) <
             std::tie(b->labels, b->pid, b->kernel, b->user, b->kernel_lost, b->user_lost);
    }
  };
  std::map<Key, uint64_t, Less> was;
  for (const StackCount& sc : before) was[&sc] += sc.value;
  // Equal series of `after` (the bpf engine's keys can render the same: lost stacks under one
  // reason) are summed first, at the first one's place: each is compared with `before` once.
  std::map<Key, size_t, Less> first;  // keys point into `merged` (reserved: never reallocated)
  std::vector<StackCount> merged;
  merged.reserve(after.size());
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
}

void ProfileCollector::OnSample(size_t /*event_index*/, const Sample& s, CommTable* comms) {
  if (s.time_ns < active_since_ns_) return;
  const uint64_t started_ns = MonotonicNs();
  struct Timed {
    RelaxedCounter* into;
    uint64_t from;
    ~Timed() { into->Add(MonotonicNs() - from); }
  } timed{&sample_ns_, started_ns};
  uint64_t add = 1;
  if (value_) {
    int64_t raw = 0;
    if (!value_->ReadInteger(s.raw, &raw) || (value_->field().is_signed && raw < 0)) {
      decode_errors_.Add(1);
      return;
    }
    add = static_cast<uint64_t>(raw);
  } else if (clock_) {
    if (s.pid == 0 && !clock_->include_idle) return;
    add = s.period;
  }
  const size_t nr = s.callchain.size() / sizeof(uint64_t);
  // The callchain's bytes are not 8-byte aligned in every ring position: copied out.
  ips_.resize(nr);  // within the reserved capacity for chains up to the kernel's 127 frames
  if (nr != 0) std::memcpy(ips_.data(), s.callchain.data(), nr * sizeof(uint64_t));
  if (!SplitCallchain(ips_, &chain_).ok() || !labels_.BuildKey(s, comms, &key_)) {
    decode_errors_.Add(1);
    return;
  }
  other_frames_.Add(chain_.other);
  Append(&key_, s.pid);
  Append(&key_, static_cast<uint16_t>(chain_.kernel.size()));
  Append(&key_, static_cast<uint16_t>(chain_.user.size()));
  key_.append(reinterpret_cast<const char*>(chain_.kernel.data()), chain_.kernel.size() * sizeof(uint64_t));
  key_.append(reinterpret_cast<const char*>(chain_.user.data()), chain_.user.size() * sizeof(uint64_t));
  RelaxedCounter* c = series_.FindOrInsert(key_, [this](RelaxedCounter&) { stacks_.Add(1); });
  if (c == nullptr) {
    series_dropped_.Add(1);
    return;
  }
  samples_.Add(1);
  c->Add(add);
}

std::vector<StackCount> ProfileCollector::Stacks() const {
  std::vector<StackCount> out;
  series_.ForEach([&](std::string_view key, const RelaxedCounter& v) {
    StackCount sc;
    const size_t label_bytes = labels_.KeySize(key);
    sc.labels = labels_.Render(key.substr(0, label_bytes));
    size_t at = label_bytes;
    sc.pid = ReadAt<uint32_t>(key, &at);
    const auto nk = ReadAt<uint16_t>(key, &at);
    const auto nu = ReadAt<uint16_t>(key, &at);
    for (uint16_t i = 0; i < nk; ++i) sc.kernel.push_back(ReadAt<uint64_t>(key, &at));
    for (uint16_t i = 0; i < nu; ++i) sc.user.push_back(ReadAt<uint64_t>(key, &at));
    sc.value = v.Get();
    out.push_back(std::move(sc));
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
  return {
      {"tracepoint_exporter_profile_samples_total", {{"profile", name_}}, static_cast<double>(samples_.Get())},
      {"tracepoint_exporter_profile_stacks", {{"profile", name_}}, static_cast<double>(stacks_.Get())},
      {"tracepoint_exporter_profile_other_context_frames_total",
       {{"profile", name_}},
       static_cast<double>(other_frames_.Get())},
      {"tracepoint_exporter_profile_sample_seconds_total", {{"profile", name_}}, sample_ns_.Get() * 1e-9},
  };
}

}  // namespace tpe
