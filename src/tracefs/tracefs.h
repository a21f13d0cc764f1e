// Access to the kernel's tracefs: which events exist, their ids and format files.
//
// Source: Documentation/trace/ftrace.rst ("The File System"), Documentation/trace/events.rst.
// The root is data (a constructor argument), so tests point it at tests/data/<kernel>/ copies.
//
// Thread-safety: all methods are const and read files only; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/edit_distance.h"
#include "common/status.h"

namespace tpe {

// "system:event", e.g. {"sched", "sched_switch"}.
struct EventName {
  std::string system;
  std::string name;
  std::string ToString() const { return system + ":" + name; }
  bool operator==(const EventName&) const = default;
  bool operator<(const EventName& o) const { return system != o.system ? system < o.system : name < o.name; }
};

// Parses "system:event"; InvalidArgument naming `text` otherwise.
StatusOr<EventName> ParseEventName(const std::string& text);

class Tracefs {
 public:
  // `root` is a directory holding `events/` (a tracefs mount, or a copy of one).
  explicit Tracefs(std::string root) : root_(std::move(root)) {}

  // Finds the tracefs mount: `path` when it is not "auto"; otherwise /sys/kernel/tracing, then
  // /sys/kernel/debug/tracing; when neither has events/ and we may, mounts tracefs on
  // /sys/kernel/tracing (mount(2), needs CAP_SYS_ADMIN). Errors name every path tried and why.
  static StatusOr<Tracefs> Discover(const std::string& path);

  const std::string& root() const { return root_; }

  // Every event under events/, sorted. Errors: NotFound / PermissionDenied on events/.
  StatusOr<std::vector<EventName>> ListEvents() const;

  // The event id (the perf_event_attr.config for PERF_TYPE_TRACEPOINT) from events/<s>/<e>/id.
  // Errors: NotFound (no such event), PermissionDenied, InvalidArgument (not a number).
  StatusOr<uint64_t> ReadId(const EventName& event) const;

  // The text of events/<s>/<e>/format.
  StatusOr<std::string> ReadFormat(const EventName& event) const;

  bool HasEvent(const EventName& event) const;

  // Asks the kernel whether `filter` is valid for `event`, without touching the global trace
  // state: writes it to events/<s>/<e>/filter of a private instance
  // (instances/tracepoint_exporter_check_<pid>_<n>, removed afterwards, so concurrent processes
  // never share one) and returns the kernel's parse error text (from reading the filter file
  // back) when it is not. Costs an instance (tens of ms): meant for explaining a rejection.
  // Thread-safe.
  // Errors: InvalidArgument with the kernel's message; PermissionDenied; Internal.
  Status CheckFilter(const EventName& event, const std::string& filter) const;

  // Up to `n` event names closest (edit distance) to `text`, for "did you mean" messages.
  std::vector<std::string> ClosestEvents(const std::string& text, size_t n) const;

 private:
  std::string EventDir(const EventName& e) const { return root_ + "/events/" + e.system + "/" + e.name; }
  std::string root_;
};

}  // namespace tpe
