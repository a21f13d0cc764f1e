// Probe groups and their owners (probe_groups.h).
#include "tracefs/probe_groups.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <sstream>

#include "common/file_util.h"
#include "tracefs/probe_events.h"

namespace tpe {
namespace {

constexpr const char kGroupPrefix[] = "tpe_";  // every group this daemon names

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string ReadSmallFile(const std::string& path) {
  auto text = ReadFileToString(path);
  return text.ok() ? Trim(*text) : "";
}

}  // namespace

uint64_t CurrentPidNamespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return kInitPidNamespace;
  return static_cast<uint64_t>(st.st_ino);
}

namespace {
// The fields of /proc/<pid>/stat after "pid (comm)" (proc(5)): comm may hold ')' and spaces, so
// they start after the last ')'. tokens[0] is field 3 (state), tokens[19] field 22 (starttime).
std::vector<std::string> StatFields(const std::string& stat) {
  std::vector<std::string> out;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return out;
  size_t pos = paren + 1;
  while (pos < stat.size()) {
    while (pos < stat.size() && (stat[pos] == ' ' || stat[pos] == '\n')) ++pos;
    const size_t end = stat.find_first_of(" \n", pos);
    if (pos < stat.size()) out.push_back(stat.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    pos = end == std::string::npos ? stat.size() : end;
  }
  return out;
}

std::optional<uint64_t> StartTimeFromStat(const std::string& stat) {
  const std::vector<std::string> f = StatFields(stat);
  if (f.size() < 20 || f[19].empty() || f[19].find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(f[19]);
}

std::string ProcDir(int pid) { return pid == 0 ? "/proc/self" : "/proc/" + std::to_string(pid); }
}  // namespace

std::optional<uint64_t> ProcessStartTime(int pid) {
  if (pid < 0) return std::nullopt;
  auto stat = ReadFileToString(ProcDir(pid) + "/stat");
  if (!stat.ok()) return std::nullopt;
  return StartTimeFromStat(*stat);
}

std::string ProbeGroupName(int pid, std::optional<uint64_t> start_time, uint64_t pidns) {
  std::string g = kGroupPrefix + std::to_string(pid);
  if (start_time) g += "_s" + std::to_string(*start_time);
  if (pidns != kInitPidNamespace) g += "_" + std::to_string(pidns);
  return g;
}

std::string ProbeGroupForPid(int pid) {
  return ProbeGroupName(pid, ProcessStartTime(pid == ::getpid() ? 0 : pid), CurrentPidNamespace());
}

namespace {
// A canonical decimal number of at most `max_digits` digits (no leading zero), in [min, max].
std::optional<uint64_t> CanonicalNumber(std::string_view digits, size_t max_digits, uint64_t max, uint64_t min = 1) {
  if (digits.empty() || digits.size() > max_digits || (digits[0] == '0' && digits.size() > 1)) return std::nullopt;
  uint64_t v = 0;
  for (char c : digits) {
    if (!IsDigit(c)) return std::nullopt;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;  // would overflow
    v = v * 10 + d;
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}
}  // namespace

std::optional<ProbeGroupOwner> ParseProbeGroup(std::string_view group) {
  constexpr size_t kPrefix = sizeof(kGroupPrefix) - 1;
  if (group.size() <= kPrefix || group.substr(0, kPrefix) != kGroupPrefix) return std::nullopt;
  // "<pid>", "<pid>_<ns>", "<pid>_s<start>", "<pid>_s<start>_<ns>".
  std::vector<std::string_view> parts;
  std::string_view rest = group.substr(kPrefix);
  for (size_t sep; (sep = rest.find('_')) != std::string_view::npos; rest.remove_prefix(sep + 1)) {
    parts.push_back(rest.substr(0, sep));
  }
  parts.push_back(rest);
  if (parts.size() > 3) return std::nullopt;
  auto pid = CanonicalNumber(parts[0], 10, INT_MAX);
  if (!pid) return std::nullopt;
  ProbeGroupOwner owner;
  owner.pid = static_cast<int>(*pid);
  size_t next = 1;
  if (next < parts.size() && !parts[next].empty() && parts[next][0] == 's') {
    owner.start_time = CanonicalNumber(parts[next].substr(1), 20, UINT64_MAX, 0);
    if (!owner.start_time) return std::nullopt;
    ++next;
  }
  if (next < parts.size()) {
    auto ns = CanonicalNumber(parts[next], 20, UINT64_MAX);
    if (!ns || *ns == kInitPidNamespace) return std::nullopt;
    owner.pidns = *ns;
    ++next;
  }
  if (next != parts.size()) return std::nullopt;
  return owner;
}

std::optional<int> PidOfProbeGroup(std::string_view group) {
  auto owner = ParseProbeGroup(group);
  if (!owner) return std::nullopt;
  return owner->pid;
}

std::vector<EventName> SelectStaleProbeEvents(std::string_view events_text, const std::string& own_group,
                                              const ProcessTable& procs,
                                              const std::function<bool(int pid, const ProbeGroupOwner&)>& owner_alive) {
  std::vector<EventName> out;
  std::map<std::string, bool> judged;  // group -> stale, so each owner is judged once
  auto stale = [&](const ProbeGroupOwner& owner) {
    if (owner.pidns == procs.own_pidns) return !owner_alive(owner.pid, owner);
    // Another namespace: only the initial one sees them all.
    if (procs.own_pidns != kInitPidNamespace || !procs.complete) return false;
    if (procs.live_pidns.count(owner.pidns) == 0) return true;  // no process lives there any more
    if (procs.mapped_pidns.count(owner.pidns) == 0) return false;
    auto it = procs.ns_pids.find({owner.pidns, owner.pid});
    return it == procs.ns_pids.end() || !owner_alive(it->second, owner);
  };
  size_t pos = 0;
  while (pos < events_text.size()) {
    size_t nl = events_text.find('\n', pos);
    std::string_view line = events_text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? events_text.size() : nl + 1;
    auto event = ParseProbeEventsLine(line);
    if (!event.ok() || event->system == own_group) continue;
    std::optional<ProbeGroupOwner> owner = ParseProbeGroup(event->system);
    if (!owner) continue;
    auto it = judged.find(event->system);
    if (it == judged.end()) it = judged.emplace(event->system, stale(*owner)).first;
    if (it->second) out.push_back(std::move(*event));
  }
  return out;
}

namespace {
// The pids of the "NSpid:" line of a /proc/<pid>/status text (Linux 4.1): the process's pid in
// each pid namespace from /proc's down to its own. Empty when there is no such line.
std::vector<int> NsPids(const std::string& status) {
  std::vector<int> out;
  const size_t at = status.find("\nNSpid:");
  if (at == std::string::npos) return out;
  const size_t end = status.find('\n', at + 1);
  std::istringstream in(status.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7));
  std::string word;
  while (in >> word) {
    if (word.empty() || word.size() > 10 || word.find_first_not_of("0123456789") != std::string::npos) return {};
    out.push_back(std::stoi(word));
  }
  return out;
}
}  // namespace

ProcessTable ReadProcessTable(bool other_namespaces) {
  ProcessTable t;
  t.own_pidns = CurrentPidNamespace();
  if (!other_namespaces || t.own_pidns != kInitPidNamespace) return t;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return t;
  t.complete = true;
  while (struct dirent* d = ::readdir(dir)) {
    const std::string name = d->d_name;
    if (name.empty() || name.size() > 10 || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string proc = "/proc/" + name;
    struct stat st {};
    if (::stat((proc + "/ns/pid").c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ESRCH) continue;  // exited meanwhile
      // There but not ours to inspect (EACCES: ptrace_may_access, e.g. a non-dumpable process):
      // its NSpid (status is world-readable) still says whether it is in /proc's namespace, the
      // initial one (one pid). Deeper, its namespace is unknown, and so is which are dead.
      auto status = ReadFileToString(proc + "/status");
      if (!status.ok() && status.status().code() == StatusCode::kNotFound) continue;  // exited meanwhile
      if (!status.ok() || NsPids(*status).size() != 1) t.complete = false;
      continue;
    }
    const uint64_t ns = static_cast<uint64_t>(st.st_ino);
    t.live_pidns.insert(ns);
    if (ns == t.own_pidns) continue;
    auto status = ReadFileToString(proc + "/status");
    if (!status.ok()) {
      // Exited meanwhile, or unreadable: then its pid there is unknown.
      if (status.status().code() != StatusCode::kNotFound) t.complete = false;
      continue;
    }
    const std::vector<int> pids = NsPids(*status);
    if (pids.size() < 2) continue;  // no NSpid (before 4.1): its pids there are unknown
    t.ns_pids[{ns, pids.back()}] = std::stoi(name);
    t.mapped_pidns.insert(ns);
  }
  ::closedir(dir);
  return t;
}

bool ProbeOwnerAlive(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string proc = "/proc/" + std::to_string(pid);
  // proc(5): "pid (comm) state ..."; comm may hold ')' and spaces, so the state follows the last ')'.
  const std::string stat = ReadSmallFile(proc + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren != std::string::npos && paren + 2 < stat.size() && (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X')) {
    return false;  // dead, not reaped yet: its probe events are no one's
  }
  // TASK_COMM_LEN is 16: "tracepoint_exporter" reads back as "tracepoint_expo".
  const std::string comm = ReadSmallFile(proc + "/comm");
  if (comm == std::string("tracepoint_exporter").substr(0, 15)) return true;
  char buf[PATH_MAX];
  ssize_t n = ::readlink((proc + "/exe").c_str(), buf, sizeof(buf) - 1);
  if (n > 0) {
    std::string exe(buf, static_cast<size_t>(n));
    const std::string deleted = " (deleted)";
    if (exe.size() > deleted.size() && exe.compare(exe.size() - deleted.size(), deleted.size(), deleted) == 0) {
      exe.resize(exe.size() - deleted.size());
    }
    return exe.substr(exe.rfind('/') + 1) == "tracepoint_exporter";
  }
  // It exists but we cannot tell what it is (no comm either, e.g. /proc mounted with hidepid):
  // assume it is in use.
  return comm.empty();
}

bool ProbeOwnerAlive(int pid, const ProbeGroupOwner& owner) {
  if (!owner.start_time) return ProbeOwnerAlive(pid);
  if (pid <= 0) return false;
  const std::string proc = "/proc/" + std::to_string(pid);
  auto stat = ReadFileToString(proc + "/stat");
  if (!stat.ok()) {
    // Gone, or there but hidden from us (hidepid): then assume it is the owner, never remove what
    // may be in use.
    return !(::kill(pid, 0) != 0 && errno == ESRCH);
  }
  const std::vector<std::string> f = StatFields(*stat);
  if (!f.empty() && (f[0] == "Z" || f[0] == "X")) return false;  // dead, not reaped yet
  const std::optional<uint64_t> start = StartTimeFromStat(*stat);
  if (!start) return true;
  if (*start == *owner.start_time) return true;
  // A time namespace (Linux 5.6) shifts the start times its processes read by its boot-time
  // offset: a daemon there named its group with a time this process cannot compare.
  struct stat theirs {
  }, ours{};
  if (::stat((proc + "/ns/time").c_str(), &theirs) == 0 && ::stat("/proc/self/ns/time", &ours) == 0 &&
      theirs.st_ino != ours.st_ino) {
    return true;
  }
  return false;
}

}  // namespace tpe
