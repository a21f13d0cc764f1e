// Planning: turns a parsed Config into the perf events to open and the collectors that consume
// their samples, validating every name against the running kernel's tracefs.
//
// Metrics on the same (event, filter) share one perf event per CPU. An event is opened in
// counting mode (no ring, no samples: the kernel counts and we read() at scrape) when every
// metric on it is a counter without labels; otherwise it is sampled.
//
// Errors name the config file, the JSON path and what would be valid: unknown event (with the
// closest event names), unknown field (with the event's fields), a decode that does not fit the
// field, a filter the kernel rejects (with the kernel's reason).
//
// Thread-safety: a Plan is built once on the main thread; afterwards the reader thread owns the
// sampled side and scrapes read the atomics and fds.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectors/collector.h"
#include "common/scoped_fd.h"
#include "daemon/config.h"
#include "format/event_format.h"
#include "format/print_symbols.h"
#include "perf/perf_event.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe {

struct EventPlan {
  EventName event;
  uint64_t tracepoint_id = 0;
  std::string filter;
  EventFormat format;
  std::map<std::string, SymbolTable> symbols;  // extractors point into this: EventPlan never moves
  bool sampled = false;
  std::vector<std::pair<Collector*, size_t>> consumers;  // (collector, its event index)

  // Runtime state, filled when the perf events are opened.
  std::vector<ScopedFd> fds;  // one per online CPU
  std::vector<uint64_t> ids;  // PERF_EVENT_IOC_ID per fd
  RelaxedCounter samples;     // samples decoded
  RelaxedCounter ring_lost;   // samples reported lost by PERF_RECORD_LOST for this id
  EventCount base;            // counts carried over from before a reload

  // Sum over CPUs of the kernel's count and lost-sample count (PERF_FORMAT_LOST) of these fds.
  EventCount ReadKernelCounts() const;
  // The same plus `base`: what the self-metrics report.
  EventCount ReadCounts() const;
};

struct Plan {
  std::string config_path;
  Settings settings;
  std::vector<std::unique_ptr<EventPlan>> events;
  std::vector<std::unique_ptr<Collector>> collectors;  // one per metric, config order
  std::vector<std::string> identities;                 // MetricConfig::canonical, per collector
  std::vector<EventPlan*> counting_events;             // per collector: its event if counting mode
  bool needs_comm = false;                             // some label uses source "comm"
  bool needs_ordering = false;                         // comm labels or latency pairing
  std::vector<std::string> warnings;                   // degraded but working, e.g. no BTF
};

// Builds and validates the plan. With `check_filters`, each filter is also test-applied in a
// private tracefs instance (Tracefs::CheckFilter) so --config.check reports the kernel's reason.
StatusOr<std::unique_ptr<Plan>> BuildPlan(const Config& config, const Tracefs& tracefs, const KernelEnums& enums,
                                          bool check_filters);

}  // namespace tpe
