#include "collectors/gauge.h"

#include <algorithm>
#include <thread>

namespace tpe {

GaugeCollector::GaugeCollector(std::string name, std::string help, Kind kind, std::vector<Side> sides,
                               size_t max_series, size_t max_inflight, uint64_t timeout_ns)
    : name_(std::move(name)),
      help_(std::move(help)),
      kind_(kind),
      sides_(std::move(sides)),
      series_(max_series),
      inflight_(kind == Kind::kInflight ? max_inflight : 0),
      timeout_ns_(timeout_ns),
      max_series_(max_series) {
  key_.reserve(InflightTable::kMaxKeyBytes);
  labels_.reserve(256);
}

bool GaugeCollector::NeedsComm() const {
  bool comm = false;
  for (const Side& s : sides_) comm |= s.labels.needs_comm();
  return comm;
}

void GaugeCollector::Add(std::string_view key, double delta, bool down) {
  GaugeSeries* g = series_.Find(key);
  if (g == nullptr) {  // a new series, unless refused
    auto kept = refused_.empty() ? refused_.end() : refused_.find(std::string(key));
    // A down of a label set with neither a series nor kept-aside changes, once a refused change
    // could not be kept: possibly that up's down, so refused rather than starting below 0.
    if (down && lost_ && kept == refused_.end()) {
      series_dropped_.Add(1);
      return;
    }
    const bool standing = kind_ == Kind::kInflight || kind_ == Kind::kUpDown;
    g = series_.FindOrInsert(key, [standing](GaugeSeries& s) { s.standing = standing; });
    if (g == nullptr) {
      series_dropped_.Add(1);
      // Kept aside: the label set's later series starts at it (the down of this up cancels it).
      if (kept == refused_.end()) {
        if (refused_.size() >= max_series_) {
          lost_ = true;
          return;
        }
        kept = refused_.emplace(std::string(key), 0.0).first;
      }
      kept->second += delta;
      if (kept->second == 0) refused_.erase(kept);
      return;
    }
    if (kept != refused_.end()) {  // the new series starts at its label set's refused changes
      delta += kept->second;
      refused_.erase(kept);
    }
  }
  g->value.store(g->value.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  g->updates.Add(1);
}

void GaugeCollector::Extreme(std::string_view key, double v) {
  GaugeSeries* g = series_.FindOrInsert(key);
  if (g == nullptr) {
    series_dropped_.Add(1);
    return;
  }
  const uint64_t w = window_.load(std::memory_order_acquire);
  GaugeSeries::Record& r = g->records[w & 1];
  const double old = r.value.load(std::memory_order_relaxed);
  double next = v;
  if (r.window.load(std::memory_order_relaxed) == w) {
    if (kind_ == Kind::kMax) next = std::max(old, v);
    if (kind_ == Kind::kMin) next = std::min(old, v);
  }
  // A seqlock: a scrape that sees `window` change around its read of `value` reads again.
  r.window.store(GaugeSeries::kWriting, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.value.store(next, std::memory_order_relaxed);
  r.window.store(w, std::memory_order_release);
  g->updates.Add(1);
}

// Label sets of starts in the table, by id: an id is freed when its last start leaves, so that
// label churn (a pid label) never exhausts them.
uint32_t GaugeCollector::Intern(std::string_view label_key) {
  auto it = label_ids_.find(label_key);
  uint32_t id;
  if (it != label_ids_.end()) {
    id = it->second;
  } else if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    label_keys_[id] = std::string(label_key);
    label_ids_.emplace(std::string_view(label_keys_[id]), id);
  } else {
    if (label_keys_.size() >= max_series_) return UINT32_MAX;
    label_keys_.emplace_back(label_key);
    label_refs_.push_back(0);
    id = static_cast<uint32_t>(label_keys_.size() - 1);
    label_ids_.emplace(std::string_view(label_keys_[id]), id);
  }
  ++label_refs_[id];
  return id;
}

void GaugeCollector::Release(uint32_t id) {
  if (--label_refs_[id] != 0) return;
  label_ids_.erase(std::string_view(label_keys_[id]));
  free_ids_.push_back(id);
}

namespace {

// The side's value: field × scale (the field read as its signedness says), or 1.
bool ReadValue(const GaugeCollector::Side& side, const Sample& s, double* out) {
  if (!side.value) {
    *out = 1;
    return true;
  }
  int64_t raw = 0;
  if (!side.value->ReadInteger(s.raw, &raw)) return false;
  *out = (side.value->field().is_signed ? static_cast<double>(raw) : static_cast<double>(static_cast<uint64_t>(raw))) *
         side.scale;
  return true;
}

}  // namespace

void GaugeCollector::OnSample(size_t event_index, const Sample& s, CommTable* comms) {
  if (event_index >= sides_.size()) return;
  const Side& side = sides_[event_index];
  if (s.time_ns > last_time_ns_) last_time_ns_ = s.time_ns;
  switch (kind_) {
    case Kind::kInflight: {
      if (!BuildMatchKey(side.key, s.raw, &key_)) {
        decode_errors_.Add(1);
        return;
      }
      if (event_index == 0) {
        if (!side.labels.BuildKey(s, comms, &labels_)) {
          decode_errors_.Add(1);
          return;
        }
        const uint32_t id = Intern(labels_);
        if (id == UINT32_MAX) {
          series_dropped_.Add(1);
          return;
        }
        InflightTable::Start replaced;
        switch (inflight_.Put(key_, {s.time_ns, id}, &replaced)) {
          case InflightTable::PutResult::kInserted:
            Add(label_keys_[id], 1, false);
            break;
          case InflightTable::PutResult::kReplaced:
            unmatched_[LatencyUnmatched::kReplaced].Add(1);
            Add(label_keys_[replaced.label_id], -1, true);
            Release(replaced.label_id);
            Add(label_keys_[id], 1, false);
            break;
          case InflightTable::PutResult::kFull:
            unmatched_[LatencyUnmatched::kTableFull].Add(1);
            Release(id);
            break;
        }
      } else {
        InflightTable::Start start;
        if (!inflight_.Take(key_, &start)) {
          unmatched_[LatencyUnmatched::kNoStart].Add(1);
          return;
        }
        Add(label_keys_[start.label_id], -1, true);
        Release(start.label_id);
      }
      inflight_gauge_.store(inflight_.size(), std::memory_order_relaxed);
      return;
    }
    case Kind::kUpDown:
    case Kind::kMax:
    case Kind::kMin:
    case Kind::kLast: {
      double v = 0;
      if (!ReadValue(side, s, &v) || !side.labels.BuildKey(s, comms, &labels_)) {
        decode_errors_.Add(1);
        return;
      }
      if (kind_ == Kind::kUpDown) {
        Add(labels_, event_index == 0 ? v : -v, event_index != 0);
      } else {
        Extreme(labels_, v);
      }
      return;
    }
  }
}

void GaugeCollector::OnRoundEnd() {
  // kInflight: starts older than the timeout leave their gauge, at most once a second of trace time.
  if (kind_ != Kind::kInflight || timeout_ns_ == 0) return;
  if (last_time_ns_ < last_expiry_ns_ + 1'000'000'000ULL || last_time_ns_ < timeout_ns_) return;
  last_expiry_ns_ = last_time_ns_;
  const size_t n = inflight_.ExpireBefore(
      last_time_ns_ - timeout_ns_, [this](const InflightTable::Start& st) { Add(label_keys_[st.label_id], -1, true); });
  unmatched_[LatencyUnmatched::kExpired].Add(n);
  inflight_gauge_.store(inflight_.size(), std::memory_order_relaxed);
}

void GaugeCollector::Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) {
  // An inflight or up/down series at a value other than 0 never goes idle (GaugeSeries::MayIdle).
  const LabelSet& labels = sides_[0].labels;
  series_.Sweep(now_ns, idle_ns, [&](std::string_view key) { return labels.NamesExitedTask(key, exited); });
  // Changes kept aside for a task that exited: no series of it will come.
  std::erase_if(refused_, [&](const auto& r) { return labels.NamesExitedTask(r.first, exited); });
}

MetricSnapshot GaugeCollector::Snapshot() const {
  MetricSnapshot m;
  m.name = name_;
  m.help = help_;
  m.kind = MetricKind::kGauge;
  m.combine = CombineOf(kind_);
  const bool extreme = kind_ != Kind::kInflight && kind_ != Kind::kUpDown;
  // Closes the window: writers from now on start a new one.
  const uint64_t w = extreme ? window_.fetch_add(1, std::memory_order_acq_rel) : 0;
  series_.ForEach([&](std::string_view key, const GaugeSeries& g) {
    double v = 0;
    if (extreme) {
      // The record of the window just closed: nothing in it (not on this page), or its value
      // (the writer is changing it only if it read the window number before this scrape closed
      // it: a few instructions, waited for).
      const GaugeSeries::Record& r = g.records[w & 1];
      for (int tries = 0;; ++tries) {
        const uint64_t seen = r.window.load(std::memory_order_acquire);
        if (seen != GaugeSeries::kWriting) {
          if (seen != w) return;
          v = r.value.load(std::memory_order_relaxed);
          std::atomic_thread_fence(std::memory_order_acquire);
          if (r.window.load(std::memory_order_relaxed) == w) break;
        }
        if (tries == 10000) return;  // the writer preempted mid-write for long: not on this page
        std::this_thread::yield();
      }
    } else {
      v = g.value.load(std::memory_order_relaxed);
    }
    SeriesSnapshot s;
    s.labels = sides_[0].labels.Render(key);
    s.value = v;
    m.series.push_back(std::move(s));
  });
  return m;
}

}  // namespace tpe
