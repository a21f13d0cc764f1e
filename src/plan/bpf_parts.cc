#include "plan/bpf_parts.h"

#include <algorithm>

namespace tpe {

BpfPartsMetric::BpfPartsMetric(std::string name, std::vector<Part> parts)
    : name_(std::move(name)), parts_(std::move(parts)) {}

std::vector<std::string> BpfPartsMetric::keys() const {
  std::vector<std::string> out;
  for (const Part& p : parts_) out.push_back(p.key);
  return out;
}

Status BpfPartsMetric::AttachNew(const BpfPartsMetric& running) {
  const std::vector<std::string> theirs = running.keys();
  std::vector<bpf::BpfMetric*> attached;
  for (Part& p : parts_) {
    if (std::find(theirs.begin(), theirs.end(), p.key) != theirs.end()) continue;
    Status st = p.metric->loaded() ? p.metric->Attach()
                                   : Internal(name_ + ": the BPF programs on " + p.key + " were never loaded");
    if (!st.ok()) {
      for (bpf::BpfMetric* m : attached) m->Detach();
      return st;
    }
    attached.push_back(p.metric.get());
  }
  return Status::Ok();
}

void BpfPartsMetric::TakeOver(std::unique_ptr<BpfPartsMetric> running) {
  for (Part& theirs : running->parts_) {
    auto mine = std::find_if(parts_.begin(), parts_.end(), [&](const Part& p) { return p.key == theirs.key; });
    if (mine != parts_.end()) {
      mine->metric = std::move(theirs.metric);
      continue;
    }
    theirs.metric->Detach();
    retired_.push_back(std::move(theirs.metric));
  }
  for (auto& m : running->retired_) retired_.push_back(std::move(m));
}

MetricSnapshot BpfPartsMetric::Snapshot() const {
  MetricSnapshot out;
  bool first = true;
  ForEach([&](const bpf::BpfMetric& m) {
    MetricSnapshot s = m.Snapshot();
    if (first) {
      out.name = s.name;
      out.help = s.help;
      out.kind = s.kind;
      out.bucket_bounds = s.bucket_bounds;
      out.classic = s.classic;
      out.native_max_buckets = s.native_max_buckets;
      out.combine = s.combine;
      first = false;
    }
    for (auto& series : s.series) out.series.push_back(std::move(series));
  });
  MergeSeriesByLabels(&out);
  return out;
}

void BpfPartsMetric::Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) {
  for (Part& p : parts_) p.metric->Sweep(now_ns, idle_ns, exited);
  for (auto& m : retired_) m->Sweep(now_ns, 0, exited);
}

void BpfPartsMetric::OnCostWindow(bool open) {
  for (Part& p : parts_) p.metric->OnCostWindow(open);
}

std::pair<uint64_t, uint64_t> BpfPartsMetric::series_removed() const {
  std::pair<uint64_t, uint64_t> out{0, 0};
  ForEach([&](const bpf::BpfMetric& m) {
    auto [idle, exited] = m.series_removed();
    out.first += idle;
    out.second += exited;
  });
  return out;
}

uint64_t BpfPartsMetric::series_dropped() const {
  uint64_t n = 0;
  ForEach([&](const bpf::BpfMetric& m) { n += m.series_dropped(); });
  return n;
}

uint64_t BpfPartsMetric::decode_errors() const {
  uint64_t n = 0;
  ForEach([&](const bpf::BpfMetric& m) { n += m.decode_errors(); });
  return n;
}

Status BpfPartsMetric::Attach() {
  std::vector<bpf::BpfMetric*> attached;
  for (Part& p : parts_) {
    Status st = p.metric->Attach();
    if (!st.ok()) {
      for (bpf::BpfMetric* m : attached) m->Detach();
      return st;
    }
    attached.push_back(p.metric.get());
  }
  return Status::Ok();
}

void BpfPartsMetric::Detach() {
  for (Part& p : parts_) p.metric->Detach();
}

bool BpfPartsMetric::attached() const {
  return std::any_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.metric->attached(); });
}

bool BpfPartsMetric::is_latency() const { return parts_.front().metric->is_latency(); }

uint64_t BpfPartsMetric::unmatched(LatencyUnmatched::Reason r) const {
  uint64_t n = 0;
  ForEach([&](const bpf::BpfMetric& m) { n += m.unmatched(r); });
  return n;
}

size_t BpfPartsMetric::inflight() const {
  size_t n = 0;
  for (const Part& p : parts_) n += p.metric->inflight();
  return n;
}

std::vector<EngineStat> BpfPartsMetric::EngineStats() const {
  std::vector<EngineStat> out;
  ForEach([&](const bpf::BpfMetric& m) {
    for (EngineStat& st : m.EngineStats()) {
      auto same = std::find_if(out.begin(), out.end(),
                               [&](const EngineStat& o) { return o.desc == st.desc && o.labels == st.labels; });
      if (same != out.end()) {
        same->value += st.value;
      } else {
        out.push_back(std::move(st));
      }
    }
  });
  return out;
}

std::vector<const bpf::BpfMetric*> BpfPartsMetric::parts() const {
  std::vector<const bpf::BpfMetric*> out;
  ForEach([&](const bpf::BpfMetric& m) { out.push_back(&m); });
  return out;
}

}  // namespace tpe
