#include "collectors/counter.h"

namespace tpe {

CounterCollector::CounterCollector(std::string name, std::string help, LabelSet labels, size_t max_series)
    : name_(std::move(name)), help_(std::move(help)), labels_(std::move(labels)), series_(max_series) {
  key_.reserve(256);
}

CounterCollector::CounterCollector(std::string name, std::string help, LabelSet labels, size_t max_series,
                                   FieldExtractor value, double scale)
    : CounterCollector(std::move(name), std::move(help), std::move(labels), max_series) {
  value_ = std::move(value);
  scale_ = scale;
}

CounterCollector::CounterCollector(std::string name, std::string help, std::function<uint64_t()> kernel_count)
    : name_(std::move(name)), help_(std::move(help)), kernel_count_(std::move(kernel_count)), series_(1) {}

void CounterCollector::OnSample(size_t /*event_index*/, const Sample& s, CommTable* comms) {
  uint64_t add = 1;
  if (value_) {
    int64_t raw = 0;
    if (!value_->ReadInteger(s.raw, &raw) || (value_->field().is_signed && raw < 0)) {
      decode_errors_.Add(1);  // outside the payload, or negative: never subtracted
      return;
    }
    add = static_cast<uint64_t>(raw);
  }
  if (!labels_.BuildKey(s, comms, &key_)) {
    decode_errors_.Add(1);
    return;
  }
  WideSum* c = series_.FindOrInsert(key_);
  if (c == nullptr && RoomSweepDue(s.time_ns)) {
    series_.Sweep(s.time_ns, 0, [&](std::string_view key) {
      return labels_.NamesExitedTask(key, [comms](uint32_t tid) { return comms->HasExited(tid); });
    });
    c = series_.FindOrInsert(key_);
  }
  if (c == nullptr) {
    series_dropped_.Add(1);
    return;
  }
  c->Add(add);
}

void CounterCollector::Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) {
  if (kernel_count_) return;  // counting mode: one series, the kernel's count
  series_.Sweep(now_ns, idle_ns, [&](std::string_view key) { return labels_.NamesExitedTask(key, exited); });
}

MetricSnapshot CounterCollector::Snapshot() const {
  MetricSnapshot m;
  m.name = name_;
  m.help = help_;
  m.kind = MetricKind::kCounter;
  if (kernel_count_) {
    SeriesSnapshot s;
    s.value = static_cast<double>(kernel_count_());
    m.series.push_back(std::move(s));
    return m;
  }
  series_.ForEach([&](std::string_view key, const WideSum& c) {
    SeriesSnapshot s;
    s.labels = labels_.Render(key);
    s.value = value_ ? ToDouble(c.Get()) * scale_ : ToDouble(c.Get());
    m.series.push_back(std::move(s));
  });
  return m;
}

}  // namespace tpe
