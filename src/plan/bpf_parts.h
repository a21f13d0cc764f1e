// A bpf-engine metric on probe events, as one or more bpf::BpfMetric "parts" whose counts add
// up: a program runs on one tracepoint (BpfEndpoint::tracepoint_id), and a probe of a binary that
// was replaced under its path while processes still run the old file has an event per file
// (Plan::probe_replaced). Each part is the metric on one combination of those events (plan_bpf.cc
// says which); the metric's series are the sum of the parts' series with the same labels
// (MergeSeriesByLabels), so a process counts under its labels whichever file it runs.
//
// Across a reload (Pipeline::Reload) the next plan's metric takes over the running one's parts
// that it also has (their programs stay attached, their maps keep counting: nothing is counted
// twice or missed), attaches the parts it adds beforehand (AttachNew), and keeps the parts it no
// longer has (no process maps their file any more) detached: their counts stay in the sum.
//
// Thread-safety: as bpf::BpfMetric (Attach/Detach/AttachNew/TakeOver on the owning thread; Sweep
// on the sweeper thread; Snapshot and the counters from any thread). The part lists change only
// in TakeOver, which the pipeline calls with its reader and sweeper stopped and its mutex held.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bpf/bpf_metric.h"
#include "collectors/collector.h"

namespace tpe {

class BpfPartsMetric : public Collector {
 public:
  struct Part {
    // Which events the part's programs run on: the "group:event" names of its endpoints, in
    // order ("start:a,b;end:c"). Equal keys across plans are the same programs.
    std::string key;
    std::unique_ptr<bpf::BpfMetric> metric;  // loaded, or (a part the running plan has) unloaded
  };
  // `parts`: at least one, all for the metric `name`.
  BpfPartsMetric(std::string name, std::vector<Part> parts);

  // The keys of the parts that count (not the retired ones).
  std::vector<std::string> keys() const;
  // Reload: attaches the loaded parts whose key `running` has no part for. Errors: a part whose
  // programs were never loaded and that `running` does not have either (Internal); Attach's (the
  // parts attached here are detached again).
  Status AttachNew(const BpfPartsMetric& running);
  // Reload, after AttachNew: each part that `running` has too is replaced by running's (attached,
  // with its counts); running's other parts, and its retired ones, become retired parts of this
  // metric: detached, their final counts part of Snapshot.
  void TakeOver(std::unique_ptr<BpfPartsMetric> running);

  const std::string& name() const override { return name_; }
  void OnSample(size_t, const Sample&, CommTable*) override {}
  MetricSnapshot Snapshot() const override;
  bool NeedsComm() const override { return false; }
  bool NeedsOrdering() const override { return false; }
  // Live parts as their own Sweep; retired ones only for exited tasks (an idle sweep would take
  // a series' counts out of a sum that a live part may still add to).
  void Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) override;
  bool SweepsOffReader() const override { return true; }
  void OnCostWindow(bool open) override;
  std::pair<uint64_t, uint64_t> series_removed() const override;
  uint64_t series_dropped() const override;
  uint64_t decode_errors() const override;
  Status Attach() override;
  void Detach() override;
  bool attached() const override;
  bool is_latency() const override;
  uint64_t unmatched(LatencyUnmatched::Reason r) const override;
  size_t inflight() const override;
  // The parts' values, summed where the family and labels are the same (parts of one probe show
  // the same endpoints).
  std::vector<EngineStat> EngineStats() const override;

  // The parts (live first, then retired), for tests and --print.
  std::vector<const bpf::BpfMetric*> parts() const;

 private:
  template <typename F>
  void ForEach(F f) const {
    for (const Part& p : parts_) f(*p.metric);
    for (const auto& m : retired_) f(*m);
  }

  std::string name_;
  std::vector<Part> parts_;
  std::vector<std::unique_ptr<bpf::BpfMetric>> retired_;  // detached; counts kept
};

}  // namespace tpe
