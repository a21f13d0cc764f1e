// The series of one bpf-engine metric as user space sees them: the live entries of the kernel's
// map of series, plus the final values of series the sweep took out of the map ("retired"),
// both keyed by the rendered label key, so a series keeps one value on the page whichever side
// holds it.
//
// Series lifetime (docs/ARCHITECTURE.md "Series have a lifetime"; the same policy as collectors/
// series_table.h for the perf engine):
//  * Sweep() takes out of the map, at once, every series whose pid/tid label names a task that
//    exited, and every series unchanged for idle_ns: the kernel map frees its slot for a new task
//    without waiting for a scrape, and the value moves to user space (BPF_MAP_LOOKUP_AND_DELETE_
//    ELEM where the kernel has it, 5.14+: read and unlinked under the bucket lock; else lookup
//    then delete).
//    A series whose final value a scrape already exported (nothing added since, and no other
//    series renders the same labels) is not kept: it leaves the page as on the perf engine.
//  * Read() (a scrape) adds retired values to the live entry of the same label key. A retired
//    value is dropped once a scrape has exported it and no live entry has its label key; while
//    one has (a pid reused, a series idle then active again), it stays and keeps being added,
//    so a counter never decreases.
// Read and Sweep exclude each other (one mutex, held across the map syscalls): a value is never
// seen both in the map and retired, nor in neither.
//
// What is still not exact: an increment a program makes into an element after the sweep copied
// it and before it is unlinked is lost — with lookup_and_delete only by a program that looked the
// element up before the unlink (a few instructions), with lookup + delete (kernels before 5.14)
// between the two syscalls. Series of exited tasks keyed by the task's own pid/tid get no more
// increments, so for them it is exact.
//
// Thread-safety: all methods from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/map_access.h"

namespace tpe::bpf {

class MapSeries {
 public:
  // `label_key`: the perf engine's label key (LabelSet::BuildKey form) of a program key.
  using LabelKeyFn = std::function<std::string(std::string_view program_key)>;
  MapSeries(std::unique_ptr<MapAccess> map, MapShape shape, LabelKeyFn label_key);

  // Several label keys of one series (a native histogram's cells, bpf/programs.h NativeShape):
  // `series_of(label key)` names the series. Sweep() then takes a series' keys out together (idle
  // when none changed for idle_ns; `dead` asked of the series), and a retired key stays while any
  // key of its series is live, so a series never loses part of its value. Default: each program
  // key is its own series (`dead` asked of its label key). Call before the first Read or Sweep.
  using SeriesOfFn = std::function<std::string(const std::string& label_key)>;
  void SetSeriesOf(SeriesOfFn series_of) { series_of_ = std::move(series_of); }

  // Gauges: a series goes idle (Sweep) only when `may_idle(its program key's value)` holds, and
  // what the sweep takes out is dropped, not retired (a gauge's page is its current value):
  //  * kStanding (an up/down gauge, `may_idle`: at 0): a value stands however long it is
  //    unchanged; a series of an exited task goes whatever its value (as on the perf engine).
  //  * kWindowed (a max/min/last gauge, `may_idle`: nothing a scrape has yet to read): a series
  //    of an exited task waits for `may_idle` too.
  // A value a program changed between the walk and the take, so that `may_idle` fails on the
  // value taken, is put back (BPF_NOEXIST); if a program re-created the key meanwhile, a
  // standing value is retired instead (added to the live one, kept while not idle, dropped when
  // its task exits) and a windowed one is lost (counted in lost()). Not exact: as for counters
  // (below), a program that looked the element up just before the take (lookup_and_delete: a
  // few instructions; lookup, then delete, before Linux 5.14: between the two syscalls) writes
  // into the taken element: for a standing gauge an offset its series keeps; a windowed value
  // lost. Both need an event on a series idle for idle_ns within that instant. A windowed
  // series of an exited task waits for a scrape to read it (no eviction when the map is full). Default (unset): any
  // unchanged series goes idle and taken-out values are retired. Call before the first Read or Sweep; not with
  // SetSeriesOf.
  using MayIdleFn = std::function<bool(const std::vector<uint64_t>& value)>;
  enum class Gauge { kStanding, kWindowed };
  void SetMayIdle(MayIdleFn may_idle, Gauge kind) {
    may_idle_ = std::move(may_idle);
    gauge_ = kind;
  }
  // Windowed values the sweep took out and could not put back (see SetMayIdle).
  uint64_t lost() const;

  // The live entries one by one (label key, value slots), entries that share a label key not
  // added up, retired values left out: for values that do not add (a windowed gauge's records).
  std::vector<std::pair<std::string, std::vector<uint64_t>>> ReadEach();

  // Label key → value slots (summed over CPUs; live + retired).
  std::map<std::string, std::vector<uint64_t>> Read();

  struct Removed {
    uint64_t idle = 0, exited = 0;
  };
  // `now_ns`: CLOCK_MONOTONIC. `idle_ns`: 0 = never idle. `dead(label_key)`: whether a pid/tid
  // label names an exited task (null: no label names a task). Nothing to do when both are off.
  Removed Sweep(uint64_t now_ns, uint64_t idle_ns, const std::function<bool(const std::string&)>& dead);

  size_t retired_size() const;
  // Whether BPF_MAP_LOOKUP_BATCH / LOOKUP_AND_DELETE are still tried (false once refused).
  bool uses_batch() const;
  bool uses_lookup_and_delete() const;

 private:
  struct State {
    std::vector<uint64_t> value;
    uint64_t changed_ns = 0;
    std::vector<uint64_t> exported;  // the value the last scrape put on a page
  };
  // Adds summed values as shape_ lays them out (wide sums as sums).
  void AddInto(std::vector<uint64_t>* to, const std::vector<uint64_t>& v) const;
  // The summed value of per-CPU words the sweep took out of the map.
  std::vector<uint64_t> Taken(const uint64_t* raw) const;

  std::unique_ptr<MapAccess> map_;
  const MapShape shape_;
  const LabelKeyFn label_key_;
  SeriesOfFn series_of_;  // unset: a series is one program key, as before SetSeriesOf existed
  MayIdleFn may_idle_;    // unset: any unchanged series may go idle
  Gauge gauge_ = Gauge::kStanding;
  uint64_t lost_ = 0;
  mutable std::mutex mu_;  // guards everything below, and orders Read against Sweep
  bool batch_ = true, lookup_and_delete_ = true;
  std::map<std::string, State> state_;                    // program key → last value seen by a sweep
  std::map<std::string, std::vector<uint64_t>> retired_;  // label key → folded final values
};

}  // namespace tpe::bpf
