#include "tracefs/probe_events.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "common/file_util.h"
#include "common/log.h"
#include "common/scoped_fd.h"

namespace tpe {
namespace {

constexpr size_t kMaxEventNameLen = 63;  // MAX_EVENT_NAME_LEN (64) counts the NUL
constexpr size_t kMaxArgNameLen = 32;    // MAX_ARG_NAME_LEN
constexpr size_t kMaxArgs = 128;         // MAX_TRACE_ARGS

bool IsUprobe(ProbeKind k) { return k == ProbeKind::kUprobe || k == ProbeKind::kUretprobe; }
bool IsReturn(ProbeKind k) { return k == ProbeKind::kUretprobe || k == ProbeKind::kKretprobe; }
const char* EventsFile(ProbeKind k) { return IsUprobe(k) ? "uprobe_events" : "kprobe_events"; }

bool IsAlpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The kernel's is_good_name(): [A-Za-z_][A-Za-z0-9_]*.
bool IsGoodName(std::string_view s) {
  if (s.empty() || !(IsAlpha(s[0]) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(IsAlpha(c) || IsDigit(c) || c == '_')) return false;
  }
  return true;
}

// Shows a value in a message with control characters escaped, so a newline in it is visible.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

Status CheckName(std::string_view what, std::string_view name, size_t max_len) {
  if (!IsGoodName(name)) {
    return InvalidArgument(std::string(what) + " " + Quote(name) +
                           " is not a valid name: use letters, digits and '_', not starting with a digit "
                           "([A-Za-z_][A-Za-z0-9_]*)");
  }
  if (name.size() > max_len) {
    return InvalidArgument(std::string(what) + " " + Quote(name) + " has " + std::to_string(name.size()) +
                           " characters; the kernel allows at most " + std::to_string(max_len));
  }
  return Status::Ok();
}

// Fetch args: registers, $vars, @addr/@sym, +|-[u]off(...), :type, b<w>@<o>/<c>, [N] arrays.
bool IsFetchArgChar(char c) { return IsAlpha(c) || IsDigit(c) || std::strchr("_%$@+-().:[]/", c) != nullptr; }

// The kernel's isspace() (lib/ctype.c, _S): \t \n \v \f \r, ' ' and 0xa0 (Latin-1 NBSP). The
// kernel splits a definition into words with argv_split(), which cuts at each of them.
bool IsKernelSpace(unsigned char c) { return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0xa0; }

Status CheckPath(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return InvalidArgument("uprobe path " + Quote(path) + " is not an absolute path (e.g. \"/usr/bin/python3\")");
  }
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (IsKernelSpace(c)) {
      char byte[8];
      std::snprintf(byte, sizeof(byte), "0x%02x", c);
      return InvalidArgument("uprobe path " + Quote(path) + " holds byte " + byte + " at offset " + std::to_string(i) +
                             ", which the kernel takes for a space (isspace() of lib/ctype.c: 0x09-0x0d, 0x20, "
                             "0xa0, also the second byte of UTF-8 U+00A0): it would cut the definition there; use "
                             "a path without it (e.g. a symlink)");
    }
  }
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f || c == '#' || c == '"' || c == '\'' || c == '\\') {
      return InvalidArgument("uprobe path " + Quote(path) +
                             " holds a control character, '#', a quote or a backslash, which the "
                             "kernel's definition syntax cannot carry");
    }
  }
  return Status::Ok();
}

Status CheckSymbol(const std::string& symbol) {
  bool ok = !symbol.empty() && !IsDigit(symbol[0]) && symbol[0] != ':';
  for (char c : symbol) ok = ok && (IsAlpha(c) || IsDigit(c) || c == '_' || c == '.' || c == ':');
  if (!ok) {
    return InvalidArgument("kprobe symbol " + Quote(symbol) +
                           " is not a kernel function name ([MODULE:]FUNCTION of letters, digits, '_' and '.', "
                           "e.g. \"do_nanosleep\")");
  }
  return Status::Ok();
}

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// The whole line a write of `command` to an events file fails with, as a Status.
Status WriteFailure(const std::string& root, const std::string& file, const std::string& command, int err) {
  std::string what = "the kernel refuses \"" + command + "\" in " + root + "/" + file;
  if (err == EACCES || err == EPERM) {
    return PermissionDenied(what + ": " + std::strerror(err) +
                            "; creating probe events needs root (CAP_SYS_ADMIN) and tracefs write access");
  }
  std::string reason;
  auto log = ReadFileToString(root + "/error_log");
  if (log.ok()) {
    if (auto e = KernelErrorFor(*log, command)) reason = *e;
  }
  if (reason.empty()) {
    reason = std::strerror(err);
    if (err == EINVAL && file == "uprobe_events" && command[0] != '-') {
      reason +=
          " (error_log has no reason; the kernel logs some refusals only to dmesg, e.g. \"Reference counter "
          "offset mismatch\" when another uprobe at the same file offset has another ref_ctr offset)";
    }
  }
  std::string msg = what + ": " + reason;
  switch (err) {
    case EINVAL:
    case EEXIST:
    case E2BIG:
      return InvalidArgument(msg);
    case ENOENT:
      return NotFound(msg);
    case EBUSY:
      return Unavailable(msg);
    default:
      return Internal(msg);
  }
}

// Appends `command` (one definition or "-:" removal) to <root>/<file>. O_APPEND, never O_TRUNC:
// opening an events file with O_TRUNC removes every probe event on the machine.
// Returns the write's errno through `err` (0 on success) for callers that treat some specially.
Status AppendCommand(const std::string& root, const std::string& file, const std::string& command, int* err) {
  *err = 0;
  std::string path = root + "/" + file;
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  if (!fd.valid()) {
    *err = errno;
    if (*err == ENOENT) {
      bool k = file == "kprobe_events";
      return Unavailable(std::string(k ? "kprobes" : "uprobes") + " are not available on this kernel (no " + path +
                         "; " + (k ? "CONFIG_KPROBE_EVENTS" : "CONFIG_UPROBE_EVENTS") + ")");
    }
    if (*err == EACCES || *err == EPERM) {
      return PermissionDenied("cannot open " + path + " for writing: " + std::strerror(*err) +
                              "; creating probe events needs root (CAP_SYS_ADMIN) and tracefs write access");
    }
    return ErrnoStatus(*err, "cannot open " + path + " for writing");
  }
  std::string data = command + "\n";
  ssize_t n;
  do {
    n = ::write(fd.get(), data.data(), data.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    *err = errno;
    return WriteFailure(root, file, command, *err);
  }
  if (static_cast<size_t>(n) != data.size()) return Internal("short write of \"" + command + "\" to " + path);
  return Status::Ok();
}

std::string RemoveCommand(const EventName& e) { return "-:" + e.system + "/" + e.name; }

}  // namespace

const char* ProbeKindName(ProbeKind kind) {
  switch (kind) {
    case ProbeKind::kUprobe:
      return "uprobe";
    case ProbeKind::kUretprobe:
      return "uretprobe";
    case ProbeKind::kKprobe:
      return "kprobe";
    case ProbeKind::kKretprobe:
      return "kretprobe";
  }
  return "?";
}

StatusOr<std::string> ProbeEventLine(const ProbeEventSpec& spec) {
  const std::string kind = ProbeKindName(spec.kind);
  TPE_RETURN_IF_ERROR(CheckName(kind + " group", spec.group, kMaxEventNameLen));
  TPE_RETURN_IF_ERROR(CheckName(kind + " event", spec.event, kMaxEventNameLen));
  if (spec.maxactive != 0 && (spec.kind != ProbeKind::kKretprobe || spec.maxactive > kMaxActiveLimit)) {
    return InvalidArgument(kind + " " + spec.event + " has maxactive " + std::to_string(spec.maxactive) +
                           ": only a kretprobe takes one, from 1 to " + std::to_string(kMaxActiveLimit));
  }
  std::string line = std::string(IsReturn(spec.kind) ? "r" : "p") +
                     (spec.maxactive != 0 ? std::to_string(spec.maxactive) : "") + ":" + spec.group + "/" + spec.event +
                     " ";
  if (IsUprobe(spec.kind)) {
    if (!spec.symbol.empty()) {
      return InvalidArgument(kind + " " + spec.event + " has symbol " + Quote(spec.symbol) +
                             ": a uprobe is placed by path and file offset; symbols are for kprobes");
    }
    TPE_RETURN_IF_ERROR(CheckPath(spec.path));
    line += spec.path + ":" + Hex(spec.offset);
    if (spec.ref_ctr_offset != 0) line += "(" + Hex(spec.ref_ctr_offset) + ")";
  } else {
    if (!spec.path.empty()) {
      return InvalidArgument(kind + " " + spec.event + " has path " + Quote(spec.path) +
                             ": a kprobe is placed by kernel symbol; paths are for uprobes");
    }
    if (spec.ref_ctr_offset != 0) {
      return InvalidArgument(kind + " " + spec.event + " has a ref_ctr offset: USDT semaphores are for uprobes");
    }
    TPE_RETURN_IF_ERROR(CheckSymbol(spec.symbol));
    if (spec.kind == ProbeKind::kKretprobe && spec.offset != 0) {
      return InvalidArgument(kind + " " + spec.event + " has offset " + std::to_string(spec.offset) + " into " +
                             spec.symbol + ": a return probe attaches to a function's entry (offset 0)");
    }
    line += spec.symbol;
    if (spec.offset != 0) line += "+" + std::to_string(spec.offset);
  }
  if (spec.args.size() > kMaxArgs) {
    return InvalidArgument(kind + " " + spec.event + " has " + std::to_string(spec.args.size()) +
                           " arguments; the kernel allows at most " + std::to_string(kMaxArgs));
  }
  std::set<std::string> seen;
  for (const auto& [name, fetch] : spec.args) {
    TPE_RETURN_IF_ERROR(CheckName(kind + " " + spec.event + " argument name", name, kMaxArgNameLen));
    if (name.rfind("common_", 0) == 0 || name.rfind("__probe_", 0) == 0) {
      return InvalidArgument(kind + " " + spec.event + " argument name " + Quote(name) +
                             " is reserved: common_* and __probe_* are the event's own fields");
    }
    if (!seen.insert(name).second) {
      return InvalidArgument(kind + " " + spec.event + " has two arguments named " + Quote(name));
    }
    bool ok = !fetch.empty();
    for (char c : fetch) ok = ok && IsFetchArgChar(c);
    if (!ok) {
      return InvalidArgument(kind + " " + spec.event + " argument " + name + " has fetch arg " + Quote(fetch) +
                             ": expected e.g. \"%di:u64\", \"+0(%si):ustring\", \"$retval:s32\", \"$stack1\" "
                             "(letters, digits and _%$@+-().:[]/ only; no spaces, quotes, '=' or '\\')");
    }
    if (!IsReturn(spec.kind) && fetch.find("$retval") != std::string::npos) {
      return InvalidArgument(kind + " " + spec.event + " argument " + name +
                             " uses $retval, which only return probes (uretprobe, kretprobe) have");
    }
    line += " " + name + "=" + fetch;
  }
  if (line.back() == ' ') line.pop_back();
  return line;
}

StatusOr<EventName> ParseProbeEventsLine(std::string_view line) {
  auto bad = [&] {
    return InvalidArgument("probe events line \"" + std::string(line) +
                           "\" is not \"p|r[N]:GROUP/EVENT PLACE [ARGS]\"");
  };
  // p:GROUP/EVENT, r:GROUP/EVENT, r<maxactive>:GROUP/EVENT (kretprobes).
  if (line.empty() || (line[0] != 'p' && line[0] != 'r')) return bad();
  size_t i = 1;
  while (i < line.size() && IsDigit(line[i])) ++i;
  if (i >= line.size() || line[i] != ':') return bad();
  size_t end = line.find(' ', i);
  std::string_view name = line.substr(i + 1, end == std::string_view::npos ? std::string_view::npos : end - i - 1);
  size_t slash = name.find('/');
  if (slash == std::string_view::npos) return bad();
  std::string_view group = name.substr(0, slash), event = name.substr(slash + 1);
  if (!IsGoodName(group) || !IsGoodName(event)) return bad();
  return EventName{std::string(group), std::string(event)};
}

std::optional<std::string> KernelErrorFor(std::string_view error_log, std::string_view command) {
  // Entries look like (tracing_log_err(), kernel/trace/trace.c):
  //   [ 1512.687795] trace_uprobe: error: Invalid register name
  //     Command: p:tpe_scratch/e3 /bin/true:0x1139 a0=%zz:u64
  //                                                   ^
  constexpr std::string_view kError = ": error: ";
  constexpr std::string_view kCommand = "  Command: ";
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < error_log.size();) {
    size_t nl = error_log.find('\n', pos);
    lines.push_back(error_log.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    pos = nl == std::string_view::npos ? error_log.size() : nl + 1;
  }
  std::optional<std::string> found;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    size_t e = lines[i].find(kError);
    if (lines[i].empty() || lines[i][0] != '[' || e == std::string_view::npos) continue;
    if (lines[i + 1].substr(0, kCommand.size()) != kCommand) continue;
    std::string_view cmd = lines[i + 1].substr(kCommand.size());
    while (!cmd.empty() && (cmd.back() == ' ' || cmd.back() == '\r')) cmd.remove_suffix(1);
    if (cmd != command) continue;
    std::string msg(lines[i].substr(e + kError.size()));
    if (i + 2 < lines.size()) {
      size_t caret = lines[i + 2].find('^');
      if (caret != std::string_view::npos && caret >= kCommand.size() && caret - kCommand.size() < cmd.size()) {
        std::string_view at = cmd.substr(caret - kCommand.size());
        at = at.substr(0, at.find(' '));
        msg += " (at \"" + std::string(at) + "\")";
      }
    }
    found = std::move(msg);  // keep going: the last matching entry is the newest
  }
  return found;
}

bool ProbeReadme::HasType(std::string_view type) const {
  return std::find(types.begin(), types.end(), type) != types.end();
}

ProbeReadme ParseProbeReadme(std::string_view readme) {
  ProbeReadme r;
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < readme.size();) {
    size_t nl = readme.find('\n', pos);
    lines.push_back(readme.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    pos = nl == std::string_view::npos ? readme.size() : nl + 1;
  }
  auto trimmed = [](std::string_view l) {
    while (!l.empty() && (l.front() == ' ' || l.front() == '\t')) l.remove_prefix(1);
    while (!l.empty() && (l.back() == ' ' || l.back() == '\t' || l.back() == '\r')) l.remove_suffix(1);
    return l;
  };
  // A line naming what follows ("type:", "efield:", "field:"): its first word ends with ':'.
  auto is_label = [&](std::string_view l) {
    l = trimmed(l);
    const size_t word = l.find_first_of(" \t");
    return l.substr(0, word).ends_with(":");
  };
  auto add_types = [&](std::string_view text) {
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = text.find_first_of(", \t", pos);
      std::string_view t = text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
      if (!t.empty()) r.types.emplace_back(t);
      pos = end == std::string_view::npos ? text.size() : end + 1;
    }
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view l = trimmed(lines[i]);
    // 4.20+: "   place (uprobe): <path>:<offset>[%return][(ref_ctr_offset)]"; before:
    // "\t    place: <path>:<offset>" (the kprobe place line starts "[<module>:]<symbol>").
    if (l.starts_with("place (uprobe):") || (l.starts_with("place:") && l.find("<path>") != std::string_view::npos)) {
      r.uprobe_ref_ctr |= l.find("(ref_ctr_offset)") != std::string_view::npos;
    }
    if (!l.starts_with("type:") || r.probe_synopsis) continue;
    r.probe_synopsis = true;
    add_types(l.substr(5));
    // Continuation lines are indented with a tab ("\t           b<bit-width>@..., ustring,");
    // the list ends at the next label or at a line of another section ("  events/ ...").
    for (size_t j = i + 1; j < lines.size() && lines[j].starts_with("\t") && !is_label(lines[j]); ++j) {
      add_types(trimmed(lines[j]));
    }
  }
  return r;
}

namespace {
// The type of a fetch arg ("+0(%si):ustring" -> "ustring", "+0(%si):u8[4]" -> "u8"; "" for none).
std::string_view FetchType(std::string_view fetch) {
  const size_t colon = fetch.rfind(':');
  if (colon == std::string_view::npos) return {};
  std::string_view t = fetch.substr(colon + 1);
  return t.substr(0, t.find('['));
}
}  // namespace

Status CheckProbeSupport(const ProbeEventSpec& spec, const ProbeReadme& readme, const std::string& readme_path) {
  if (!readme.probe_synopsis) return Status::Ok();
  const std::string kind = ProbeKindName(spec.kind);
  if (spec.ref_ctr_offset != 0 && IsUprobe(spec.kind) && !readme.uprobe_ref_ctr) {
    return Unavailable(kind + " " + spec.event + " on " + spec.path + " needs a USDT semaphore (ref_ctr_offset " +
                       Hex(spec.ref_ctr_offset) +
                       "), which this kernel's uprobe_events does not take (Linux 4.20 added it; " + readme_path +
                       " shows no \"(ref_ctr_offset)\" in the uprobe place): without it the program never sees "
                       "its semaphore set and skips the probe");
  }
  if (!readme.HasType("ustring")) {
    for (const auto& [name, fetch] : spec.args) {
      if (FetchType(fetch) != "ustring") continue;
      return Unavailable(kind + " " + spec.event + " argument " + name + " (" + fetch +
                         ") reads a user-space string (ustring), a fetch-arg type this kernel does not have (" +
                         readme_path + " lists no ustring among its types)" +
                         (IsUprobe(spec.kind)
                              ? std::string("; a uprobe reads the program's memory with \"string\"")
                              : std::string("; a kprobe has no other way to read user memory as a string")));
    }
  }
  return Status::Ok();
}

ProbeEvents::ProbeEvents(const Tracefs& tracefs, std::string group) : tracefs_(&tracefs), group_(std::move(group)) {}

ProbeEvents::~ProbeEvents() {
  Status st = RemoveAll();
  if (!st.ok()) TPE_LOG_WARN("probe events left behind: {}", st.message());
}

ProbeEvents::ProbeEvents(ProbeEvents&& o) noexcept
    : tracefs_(o.tracefs_), group_(std::move(o.group_)), owned_(std::exchange(o.owned_, {})) {}

ProbeEvents& ProbeEvents::operator=(ProbeEvents&& o) noexcept {
  if (this != &o) {
    Status st = RemoveAll();
    if (!st.ok()) TPE_LOG_WARN("probe events left behind: {}", st.message());
    tracefs_ = o.tracefs_;
    group_ = std::move(o.group_);
    owned_ = std::exchange(o.owned_, {});
  }
  return *this;
}

StatusOr<EventName> ProbeEvents::Create(const ProbeEventSpec& spec) {
  ProbeEventSpec s = spec;
  if (s.group.empty()) s.group = group_;
  if (s.group != group_) {
    return InvalidArgument(std::string(ProbeKindName(s.kind)) + " " + s.event + " is in group \"" + s.group +
                           "\", but these probe events are group \"" + group_ + "\"");
  }
  TPE_ASSIGN_OR_RETURN(std::string line, ProbeEventLine(s));
  bool ustring = false;
  for (const auto& a : s.args) ustring |= FetchType(a.second) == "ustring";
  if (s.ref_ctr_offset != 0 || ustring) {
    // What the running kernel takes, from its README (a kernel without the feature would refuse
    // with a misleading reason, or none).
    const std::string readme_path = tracefs_->root() + "/README";
    auto readme = ReadFileToString(readme_path);
    if (readme.ok()) TPE_RETURN_IF_ERROR(CheckProbeSupport(s, ParseProbeReadme(*readme), readme_path));
  }
  EventName name{s.group, s.event};
  const std::string file = EventsFile(s.kind);
  // Checked first so that a missing interface says so rather than "no such event".
  struct stat st {};
  if (::stat((tracefs_->root() + "/" + file).c_str(), &st) != 0 && errno == ENOENT) {
    int err = 0;
    return AppendCommand(tracefs_->root(), file, line, &err);  // Unavailable, naming the file
  }
  if (tracefs_->HasEvent(name)) {
    return InvalidArgument("probe event " + s.group + "/" + s.event + " already exists in " + tracefs_->root() +
                           "/events; writing it again would add a probe location to it");
  }
  int err = 0;
  TPE_RETURN_IF_ERROR(AppendCommand(tracefs_->root(), file, line, &err));
  owned_.push_back({name, file});
  return name;
}

Status ProbeEvents::Remove(const EventName& event) {
  auto it = owned_.begin();
  while (it != owned_.end() && !(it->name == event)) ++it;
  if (it == owned_.end()) {
    return InvalidArgument("probe event " + event.system + "/" + event.name + " was not created by these (group " +
                           group_ + ") probe events");
  }
  int err = 0;
  Status st = AppendCommand(tracefs_->root(), it->file, RemoveCommand(event), &err);
  if (err == EBUSY) {
    return Unavailable("cannot remove probe event " + event.system + "/" + event.name +
                       ": it is in use (EBUSY): a perf event or BPF program is still open on it; close them first");
  }
  if (st.ok() || err == ENOENT) owned_.erase(it);
  return st;
}

Status ProbeEvents::RemoveAll() {
  Status first = Status::Ok();
  for (size_t i = owned_.size(); i-- > 0;) {
    Status st = Remove(EventName(owned_[i].name));
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

std::vector<EventName> ProbeEvents::events() const {
  std::vector<EventName> out;
  for (const auto& o : owned_) out.push_back(o.name);
  return out;
}

StatusOr<int> RemoveStaleProbeEvents(const Tracefs& tracefs, const std::string& own_group) {
  std::vector<std::pair<const char*, std::string>> texts;
  bool other_namespaces = false;  // any group of another pid namespace to judge
  const uint64_t own_ns = CurrentPidNamespace();
  for (const char* file : {"uprobe_events", "kprobe_events"}) {
    auto text = ReadFileToString(tracefs.root() + "/" + file);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;  // no such probes on this kernel
      return text.status();
    }
    for (size_t pos = 0; pos < text->size();) {
      size_t nl = text->find('\n', pos);
      if (nl == std::string::npos) nl = text->size();
      auto event = ParseProbeEventsLine(std::string_view(*text).substr(pos, nl - pos));
      pos = nl + 1;
      if (!event.ok()) continue;
      auto owner = ParseProbeGroup(event->system);
      other_namespaces |= owner && owner->pidns != own_ns;
    }
    texts.emplace_back(file, std::move(*text));
  }
  const ProcessTable procs = ReadProcessTable(other_namespaces);
  int removed = 0;
  for (const auto& [file, text] : texts) {
    for (const EventName& e : SelectStaleProbeEvents(text, own_group, procs, [](int pid, const ProbeGroupOwner&owner) {
           return ProbeOwnerAlive(pid, owner);
         })) {
      int err = 0;
      Status st = AppendCommand(tracefs.root(), file, RemoveCommand(e), &err);
      if (st.ok()) {
        const ProbeGroupOwner owner = *ParseProbeGroup(e.system);
        TPE_LOG_INFO(
            "removed stale probe event {}/{} ({})", e.system, e.name,
            owner.pidns != procs.own_pidns && procs.live_pidns.count(owner.pidns) == 0
                ? "no process lives in pid namespace " + std::to_string(owner.pidns) + " any more"
            : owner.start_time
                ? "pid " + std::to_string(owner.pid) + " started at " + std::to_string(*owner.start_time) + " is gone"
                : "pid " + std::to_string(owner.pid) + " is gone or is not a tracepoint_exporter");
        ++removed;
      } else if (err != ENOENT) {  // ENOENT: another daemon removed it first
        TPE_LOG_WARN("cannot remove stale probe event {}/{}: {}", e.system, e.name, st.message());
      }
    }
  }
  return removed;
}

StatusOr<int> RemoveProbeGroup(const Tracefs& tracefs, const std::string& group) {
  int removed = 0;
  for (const char* file : {"uprobe_events", "kprobe_events"}) {
    auto text = ReadFileToString(tracefs.root() + "/" + file);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;
      return text.status();
    }
    size_t pos = 0;
    while (pos < text->size()) {
      size_t nl = text->find('\n', pos);
      if (nl == std::string::npos) nl = text->size();
      auto event = ParseProbeEventsLine(std::string_view(*text).substr(pos, nl - pos));
      pos = nl + 1;
      if (!event.ok() || event->system != group) continue;
      int err = 0;
      Status st = AppendCommand(tracefs.root(), file, RemoveCommand(*event), &err);
      if (st.ok()) {
        ++removed;
      } else if (err != ENOENT) {
        return st.WithContext("probe event " + event->ToString() + " left by an earlier process with this pid");
      }
    }
  }
  return removed;
}

}  // namespace tpe
