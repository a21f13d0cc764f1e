#include "collectors/histogram.h"

namespace tpe {

bool HistogramTable::Observe(std::string_view key, double v, int64_t raw, bool is_signed) {
  const size_t n = buckets_.bounds().size() + 1;
  const NativeLayout* layout = native_ ? &*native_ : nullptr;
  HistogramSeries* h = series_.FindOrInsert(key, [n, layout](HistogramSeries& s) { s.Init(n, layout); });
  if (h == nullptr) return false;
  h->Observe(buckets_.Index(v), raw, is_signed);
  if (layout != nullptr) h->native->Observe(layout->Position(raw, is_signed));
  return true;
}

HistogramCollector::HistogramCollector(std::string name, std::string help, LabelSet labels, FieldExtractor value,
                                       double scale, Buckets buckets, std::optional<NativeLayout> native,
                                       size_t max_series)
    : name_(std::move(name)),
      help_(std::move(help)),
      labels_(std::move(labels)),
      value_(std::move(value)),
      scale_(scale),
      table_(std::move(buckets), std::move(native), scale, max_series) {
  key_.reserve(256);
}

void HistogramCollector::OnSample(size_t /*event_index*/, const Sample& s, CommTable* comms) {
  int64_t raw = 0;
  if (!value_.ReadInteger(s.raw, &raw) || !labels_.BuildKey(s, comms, &key_)) {
    decode_errors_.Add(1);
    return;
  }
  const double v =
      (value_.field().is_signed ? static_cast<double>(raw) : static_cast<double>(static_cast<uint64_t>(raw))) * scale_;
  const bool is_signed = value_.field().is_signed;
  if (table_.Observe(key_, v, raw, is_signed)) return;
  if (RoomSweepDue(s.time_ns)) {
    Sweep(s.time_ns, 0, [comms](uint32_t tid) { return comms->HasExited(tid); });
    if (table_.Observe(key_, v, raw, is_signed)) return;
  }
  series_dropped_.Add(1);
}

MetricSnapshot HistogramCollector::Snapshot() const {
  return table_.Snapshot(name_, help_, [this](std::string_view key) { return labels_.Render(key); });
}

}  // namespace tpe
