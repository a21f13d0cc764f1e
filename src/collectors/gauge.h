// type: gauge — a value that goes up and down, per label set. Three kinds:
//  * kInflight: starts waiting for their end (a latency metric's pairing: a start's match key
//    waits in an InflightTable until an end with the same key takes it): the gauge of the
//    start's label set is +1 at the start and -1 at its end, at its replacement by a later start
//    of the same key (counted in unmatched(kReplaced)) and when it expires (older than
//    timeout_ns, e.g. a task that died inside the syscall). Labels come from the start.
//  * kUpDown: + value on the "up" event, - value on the "down" event (value: a field × scale,
//    or 1), each side with its own labels of the same names (TCP connections by state from
//    sock:inet_sock_set_state: up on newstate, down on oldstate).
//  * kMax, kMin, kLast: the largest, smallest or latest value (a field × scale) since the
//    previous scrape. Every Snapshot() (a scrape) closes the window; a series that saw no value
//    in a window is not on that page. With several scrapers, each sees the window since the
//    previous scrape of any. Window w is kept in record w & 1 of its series, so the writer
//    fills the next window while a scrape reads the one it closed; an observation that read the
//    window number just before a Snapshot closed it and is written just after that Snapshot read
//    the record (nanoseconds) lands in the closed window without being on its page.
//
// Series lifetime as for counters, except that an inflight or up/down series is idle only while
// its value is 0 (its value stands until events change it); it goes when a pid/tid label's task
// exits, whatever its value (once a scrape has exported its last value, as for counters).
//
// Changes refused by max_series (inflight, up/down): the change of a label set that gets no
// series is counted in series_dropped() and kept aside, per label set; when the label set later
// gets a series, the series starts at the changes kept aside. So a down whose up was refused
// cancels that up instead of taking a series below 0: a series reads what all its label set's
// changes add up to. At most max_series label sets are kept aside (those of a task that exited
// are dropped by Sweep; a sum back at 0 at once); a change that finds no room is lost, and from
// then on a down of a label set with neither a series nor kept-aside changes is refused too
// (counted), since it may be the down of a lost up. (The bpf engine does the same in its
// programs: bpf/programs.h GaugeShape.)
//
// Thread-safety: OnSample, OnRoundEnd and Sweep from the reader thread; Snapshot from any thread.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectors/collector.h"
#include "collectors/inflight_table.h"
#include "collectors/label_set.h"
#include "collectors/series_table.h"
#include "decode/field_extractor.h"

namespace tpe {

struct GaugeSeries {
  static constexpr uint64_t kWriting = UINT64_MAX;  // a record's `window` while the writer changes it
  std::atomic<double> value{0};                     // kInflight, kUpDown
  // kMax/kMin/kLast: window w's value is in record w & 1, so a scrape reads the window it closed
  // while the writer fills the next one in the other record; `window` is a seqlock's sequence.
  struct Record {
    std::atomic<double> value{0};
    std::atomic<uint64_t> window{0};
  };
  std::array<Record, 2> records;
  RelaxedCounter updates;
  bool standing = false;  // inflight, up/down
  // What SeriesTable's sweep watches (writer thread): Count() changes with every update (idle
  // and exported-final-value checks); a standing series at a value other than 0 never goes idle
  // (MayIdle), so only series at 0 (or max/min/last ones no value reached) can: removing those
  // changes nothing on the page's meaning.
  uint64_t Count() const { return updates.Get(); }
  bool MayIdle() const { return !standing || value.load(std::memory_order_relaxed) == 0; }
};

class GaugeCollector : public Collector {
 public:
  enum class Kind { kInflight, kUpDown, kMax, kMin, kLast };
  // How two series of one label set combine on a page (MetricSnapshot::combine): max keeps the
  // larger, min the smaller, last the first; inflight and up/down add. Both engines.
  static MetricSnapshot::Combine CombineOf(Kind kind) {
    return kind == Kind::kMax    ? MetricSnapshot::Combine::kMax
           : kind == Kind::kMin  ? MetricSnapshot::Combine::kMin
           : kind == Kind::kLast ? MetricSnapshot::Combine::kFirst
                                 : MetricSnapshot::Combine::kAdd;
  }

  // One event of the gauge. kInflight: sides[0] is the start, sides[1] the end (`key`: the match
  // fields, equal in size on both; `labels` of the start). kUpDown: sides[0] up, sides[1] down
  // (`value` optional: 1 without). kMax/kMin/kLast: sides[0], `value` required.
  struct Side {
    std::vector<FieldExtractor> key;
    LabelSet labels;
    std::optional<FieldExtractor> value;
    double scale = 1;
  };
  // `max_inflight`, `timeout_ns`: kInflight only (as for a latency metric).
  GaugeCollector(std::string name, std::string help, Kind kind, std::vector<Side> sides, size_t max_series,
                 size_t max_inflight = 0, uint64_t timeout_ns = 0);

  const std::string& name() const override { return name_; }
  void OnSample(size_t event_index, const Sample& s, CommTable* comms) override;
  MetricSnapshot Snapshot() const override;
  bool NeedsComm() const override;
  // kInflight reports its unmatched starts and ends and its starts in flight like a latency
  // metric (tracepoint_exporter_latency_unmatched_total, _latency_inflight).
  bool is_latency() const override { return kind_ == Kind::kInflight; }
  bool NeedsOrdering() const override { return kind_ == Kind::kInflight || kind_ == Kind::kUpDown || NeedsComm(); }
  void OnRoundEnd() override;
  void Sweep(uint64_t now_ns, uint64_t idle_ns, const TaskExited& exited) override;
  std::pair<uint64_t, uint64_t> series_removed() const override {
    return {series_.removed_idle(), series_.removed_exited()};
  }
  // kInflight: why a start or end changed no gauge (replaced, no_start, table_full, expired).
  uint64_t unmatched(LatencyUnmatched::Reason r) const override { return unmatched_[r].Get(); }
  size_t inflight() const override { return inflight_gauge_.load(std::memory_order_relaxed); }
  Kind kind() const { return kind_; }

 private:
  // kInflight, kUpDown: `delta` into the series of `key` (`down`: an end, or the down side);
  // refused by max_series, kept aside (refused_) until the label set gets a series.
  void Add(std::string_view key, double delta, bool down);
  void Extreme(std::string_view key, double v);
  uint32_t Intern(std::string_view label_key);
  void Release(uint32_t id);  // a start of label set `id` left the table

  std::string name_, help_;
  Kind kind_;
  std::vector<Side> sides_;
  SeriesTable<GaugeSeries> series_;
  mutable std::atomic<uint64_t> window_{1};
  // kInflight.
  InflightTable inflight_;
  uint64_t timeout_ns_;
  uint64_t last_time_ns_ = 0, last_expiry_ns_ = 0;
  std::deque<std::string> label_keys_;  // start label sets by id (stable: label_ids_ views them)
  std::unordered_map<std::string_view, uint32_t> label_ids_;
  std::vector<uint32_t> label_refs_;  // starts in the table per label set id; 0: free
  std::vector<uint32_t> free_ids_;
  size_t max_series_;
  // kInflight, kUpDown: label key -> the sum of its changes refused by max_series (never 0; at
  // most max_series_ keys). Reader thread only.
  std::unordered_map<std::string, double> refused_;
  bool lost_ = false;  // a refused change found refused_ full (reader thread)
  std::array<RelaxedCounter, LatencyUnmatched::kReasonCount> unmatched_;
  std::atomic<size_t> inflight_gauge_{0};
  std::string key_, labels_;  // scratch
};

}  // namespace tpe
