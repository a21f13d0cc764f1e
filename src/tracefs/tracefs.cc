#include "tracefs/tracefs.h"

#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "common/utf8.h"

namespace tpe {
namespace {

bool IsDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot list " + path);
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    out.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

StatusOr<EventName> ParseEventName(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
      text.find(':', colon + 1) != std::string::npos || text.find('/') != std::string::npos) {
    return InvalidArgument("event \"" + text + "\" is not of the form \"system:event\" (e.g. \"sched:sched_switch\")");
  }
  return EventName{text.substr(0, colon), text.substr(colon + 1)};
}

StatusOr<Tracefs> Tracefs::Discover(const std::string& path) {
  if (path != "auto") {
    if (!IsDir(path + "/events")) {
      return NotFound("--tracefs.path=" + path +
                      " has no events/ directory; give a tracefs "
                      "mount such as /sys/kernel/tracing, or auto");
    }
    return Tracefs(path);
  }
  const char* kCandidates[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};
  for (const char* c : kCandidates) {
    if (IsDir(std::string(c) + "/events")) return Tracefs(c);
  }
  // Mounted but not ours to read (tracefs is mode 0700, root's): say so, not "not mounted".
  for (const char* c : kCandidates) {
    struct stat st {};
    if (::stat((std::string(c) + "/events").c_str(), &st) != 0 && errno == EACCES) {
      return PermissionDenied(std::string("tracefs is mounted at ") + c +
                              " but this user may not read it (mode 0700, root's): run as root, or grant "
                              "read access to " +
                              c + " (and CAP_PERFMON for the perf events)");
    }
  }
  // Neither is mounted: mount tracefs ourselves (what `mount -t tracefs nodev
  // /sys/kernel/tracing` does).
  if (IsDir("/sys/kernel/tracing") && ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0 &&
      IsDir("/sys/kernel/tracing/events")) {
    return Tracefs("/sys/kernel/tracing");
  }
  int err = errno;
  return NotFound(std::string("tracefs is not mounted at /sys/kernel/tracing or "
                              "/sys/kernel/debug/tracing, and mounting it failed (") +
                  std::strerror(err) +
                  "); run as root (CAP_SYS_ADMIN) or mount it: mount -t tracefs nodev "
                  "/sys/kernel/tracing");
}

StatusOr<std::vector<EventName>> Tracefs::ListEvents() const {
  auto listed = ListDir(root_ + "/events");
  if (!listed.ok()) {
    if (listed.status().code() == StatusCode::kPermissionDenied) {
      return PermissionDenied(listed.status().message() +
                              "; tracefs is readable by root only (mode 0700): run as "
                              "root, or grant read access to " +
                              root_);
    }
    return listed.status();
  }
  auto systems = std::move(*listed);
  std::vector<EventName> out;
  for (const auto& sys : systems) {
    std::string sdir = root_ + "/events/" + sys;
    if (!IsDir(sdir)) continue;
    auto events = ListDir(sdir);
    if (!events.ok()) continue;
    for (const auto& ev : *events) {
      if (IsDir(sdir + "/" + ev)) out.push_back({sys, ev});
    }
  }
  return out;
}

bool Tracefs::HasEvent(const EventName& event) const { return IsDir(EventDir(event)); }

StatusOr<uint64_t> Tracefs::ReadId(const EventName& event) const {
  if (!HasEvent(event)) return NotFound("no tracepoint " + event.ToString() + " in " + root_ + "/events");
  TPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(EventDir(event) + "/id"));
  text = Trim(text);
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0') {
    return InvalidArgument(EventDir(event) + "/id holds \"" + text + "\", not an event id");
  }
  return static_cast<uint64_t>(v);
}

StatusOr<std::string> Tracefs::ReadFormat(const EventName& event) const {
  if (!HasEvent(event)) return NotFound("no tracepoint " + event.ToString() + " in " + root_ + "/events");
  return ReadFileToString(EventDir(event) + "/format");
}

Status Tracefs::CheckFilter(const EventName& event, const std::string& filter) const {
  // A name of this process's own (pid and a sequence number): two processes checking at once
  // (two --config.check runs, a reload beside a check) must not remove each other's instance.
  static std::atomic<uint64_t> seq{0};
  std::string inst = root_ + "/instances/tracepoint_exporter_check_" + std::to_string(::getpid()) + "_" +
                     std::to_string(seq.fetch_add(1));
  if (::mkdir(inst.c_str(), 0700) != 0) {
    return ErrnoStatus(errno, "cannot create tracefs instance " + inst + " to check a filter");
  }
  std::string file = inst + "/events/" + event.system + "/" + event.name + "/filter";
  Status st = WriteStringToFile(file, filter);
  Status result = Status::Ok();
  if (!st.ok()) {
    // The kernel rejects the write with EINVAL and leaves its parse error in the filter file.
    auto text = ReadFileToString(file);
    std::string reason = text.ok() ? Trim(*text) : st.message();
    // The file reads back "<filter>\n<caret at the column>\nparse_error: <why>".
    size_t caret = reason.find('^');
    size_t pe = reason.find("parse_error:");
    if (pe != std::string::npos) {
      std::string why = Trim(reason.substr(pe + 12));
      size_t line_start = caret == std::string::npos ? 0 : reason.rfind('\n', caret);
      size_t column = caret == std::string::npos ? 0 : caret - (line_start + 1);
      reason = why + (caret == std::string::npos ? "" : " (at column " + std::to_string(column) + ")");
    }
    for (auto& c : reason) {
      if (c == '\n') c = ' ';
    }
    result = InvalidArgument("the kernel rejects filter \"" + Abbreviate(filter) + "\" for " + event.ToString() + ": " +
                             reason);
  }
  ::rmdir(inst.c_str());
  return result;
}

std::vector<std::string> Tracefs::ClosestEvents(const std::string& text, size_t n) const {
  auto events = ListEvents();
  if (!events.ok()) return {};
  std::vector<std::pair<size_t, std::string>> scored;
  std::string needle = text.substr(text.find(':') == std::string::npos ? 0 : text.find(':') + 1);
  for (const auto& e : *events) {
    size_t d = std::min(EditDistance(text, e.ToString()), EditDistance(needle, e.name));
    scored.emplace_back(d, e.ToString());
  }
  std::partial_sort(scored.begin(), scored.begin() + std::min(n, scored.size()), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < std::min(n, scored.size()); ++i) out.push_back(scored[i].second);
  return out;
}

}  // namespace tpe
