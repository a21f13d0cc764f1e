#include "collectors/latency.h"

namespace tpe {

const char* LatencyUnmatched::Name(Reason r) {
  switch (r) {
    case kReplaced:
      return "replaced";
    case kNoStart:
      return "no_start";
    case kTableFull:
      return "table_full";
    case kExpired:
      return "expired";
    case kSeriesLimit:
      return "series_limit";
    case kReasonCount:
      break;
  }
  return "?";
}

LatencyCollector::LatencyCollector(std::string name, std::string help, std::vector<LatencyEndpoint> starts,
                                   LatencyEndpoint end, Buckets buckets, std::optional<NativeLayout> native,
                                   size_t max_series, size_t max_inflight, uint64_t timeout_ns)
    : name_(std::move(name)),
      help_(std::move(help)),
      starts_(std::move(starts)),
      end_(std::move(end)),
      table_(std::move(buckets), std::move(native), 1e-9, max_series),  // ns -> s
      inflight_(max_inflight),
      timeout_ns_(timeout_ns),
      max_series_(max_series) {
  key_.reserve(InflightTable::kMaxKeyBytes);
  labels_.reserve(256);
  series_key_.reserve(512);
}

bool LatencyCollector::NeedsComm() const {
  bool comm = end_.labels.needs_comm();
  for (const auto& s : starts_) comm |= s.labels.needs_comm();
  return comm;
}

uint32_t LatencyCollector::InternStartLabels(std::string_view key) {
  auto it = start_label_ids_.find(key);
  if (it != start_label_ids_.end()) return it->second;
  if (start_label_keys_.size() >= max_series_) return UINT32_MAX;
  const std::string& stored = start_label_keys_.emplace_back(key);
  const uint32_t id = static_cast<uint32_t>(start_label_keys_.size() - 1);
  start_label_ids_.emplace(std::string_view(stored), id);
  return id;
}

void LatencyCollector::OnSample(size_t event_index, const Sample& s, CommTable* comms) {
  if (s.time_ns > last_time_ns_) last_time_ns_ = s.time_ns;
  if (event_index < starts_.size()) {
    const LatencyEndpoint& start = starts_[event_index];
    if (!BuildMatchKey(start.key, s.raw, &key_) || !start.labels.BuildKey(s, comms, &labels_)) {
      decode_errors_.Add(1);
      return;
    }
    const uint32_t label_id = InternStartLabels(labels_);
    if (label_id == UINT32_MAX) {
      unmatched_[kSeriesLimit].Add(1);
      series_dropped_.Add(1);
      return;
    }
    switch (inflight_.Put(key_, {s.time_ns, label_id})) {
      case InflightTable::PutResult::kInserted:
        break;
      case InflightTable::PutResult::kReplaced:
        unmatched_[kReplaced].Add(1);
        break;
      case InflightTable::PutResult::kFull:
        unmatched_[kTableFull].Add(1);
        break;
    }
    inflight_gauge_.store(inflight_.size(), std::memory_order_relaxed);
    return;
  }
  if (!BuildMatchKey(end_.key, s.raw, &key_)) {
    decode_errors_.Add(1);
    return;
  }
  InflightTable::Start start;
  if (!inflight_.Take(key_, &start)) {
    unmatched_[kNoStart].Add(1);
    return;
  }
  inflight_gauge_.store(inflight_.size(), std::memory_order_relaxed);
  if (!end_.labels.BuildKey(s, comms, &labels_)) {
    decode_errors_.Add(1);
    return;
  }
  const uint64_t ns = s.time_ns >= start.time_ns ? s.time_ns - start.time_ns : 0;
  // A start older than the timeout is expired whether or not OnRoundEnd has swept it yet (it
  // runs at most once a second of trace time, and only when samples advance): the bpf engine's
  // end program refuses the same pairs (delta > timeout_ns), so both engines agree.
  if (timeout_ns_ > 0 && ns > timeout_ns_) {
    unmatched_[kExpired].Add(1);
    return;
  }
  series_key_.assign(start_label_keys_[start.label_id]);
  series_key_.append(labels_);
  const double seconds = static_cast<double>(ns) * 1e-9;
  const int64_t raw = static_cast<int64_t>(ns);
  if (table_.Observe(series_key_, seconds, raw, false)) return;
  if (RoomSweepDue(s.time_ns)) {
    Sweep(s.time_ns, 0, [comms](uint32_t tid) { return comms->HasExited(tid); });
    if (table_.Observe(series_key_, seconds, raw, false)) return;
  }
  {
    unmatched_[kSeriesLimit].Add(1);
    series_dropped_.Add(1);
  }
}

void LatencyCollector::OnRoundEnd() {
  // Expire starts that waited longer than the timeout, at most once a second of trace time.
  if (last_time_ns_ < last_expiry_ns_ + 1'000'000'000ULL || last_time_ns_ < timeout_ns_) return;
  last_expiry_ns_ = last_time_ns_;
  unmatched_[kExpired].Add(inflight_.ExpireBefore(last_time_ns_ - timeout_ns_));
  inflight_gauge_.store(inflight_.size(), std::memory_order_relaxed);
}

void LatencyCollector::Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) {
  table_.Sweep(now_ns, idle_ns, [&](std::string_view key) {
    if (starts_[0].labels.NamesExitedTask(key, exited)) return true;
    return end_.labels.NamesExitedTask(key.substr(starts_[0].labels.KeySize(key)), exited);
  });
}

MetricSnapshot LatencyCollector::Snapshot() const {
  return table_.Snapshot(name_, help_, [this](std::string_view key) {
    // The key is the start labels' segments then the end labels'.
    LabelPairs out = starts_[0].labels.Render(key);
    size_t used = starts_[0].labels.KeySize(key);
    LabelPairs end = end_.labels.Render(key.substr(used));
    out.insert(out.end(), end.begin(), end.end());
    return out;
  });
}

}  // namespace tpe
