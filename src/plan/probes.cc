#include "plan/probes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "common/file_util.h"
#include "common/log.h"
#include "elf/elf_file.h"

namespace tpe {
namespace {

// The x86-64 calling convention's argument registers, as the kernel's fetch args name them.
constexpr const char* kArgRegs[] = {"di", "si", "dx", "cx", "r8", "r9"};

std::string TypeFor(int size, bool is_signed) { return std::string(is_signed ? "s" : "u") + std::to_string(8 * size); }

bool IsStringType(const std::string& t) { return t == "ustring" || t == "string"; }

}  // namespace

StatusOr<std::vector<std::pair<std::string, std::string>>> FetchArgs(const ProbeRef& probe,
                                                                     const std::vector<ProbeArg>& args,
                                                                     const std::vector<elf::UsdtArgument>& usdt_args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ProbeArg& a : args) {
    std::string place, type = a.type;
    if (a.retval) {
      place = "$retval";
      if (type.empty()) type = "u64";
    } else if (!probe.usdt) {
      place = std::string("%") + kArgRegs[a.index];
      if (type.empty()) type = "u64";
    } else {
      if (static_cast<size_t>(a.index) >= usdt_args.size()) {
        return InvalidArgument("args." + a.field + ": " + probe.provider + ":" + probe.name + " has " +
                               std::to_string(usdt_args.size()) + " arguments (arg0 to arg" +
                               std::to_string(static_cast<int>(usdt_args.size()) - 1) + ")");
      }
      const elf::UsdtArgument& u = usdt_args[static_cast<size_t>(a.index)];
      switch (u.kind) {
        case elf::UsdtArgKind::kRegister:
          place = "%" + u.reg;
          break;
        case elf::UsdtArgKind::kMemory:
          place = (u.value < 0 ? "" : "+") + std::to_string(u.value) + "(%" + u.reg + ")";
          break;
        case elf::UsdtArgKind::kConstant:
          return InvalidArgument("args." + a.field + ": arg" + std::to_string(a.index) + " of " + probe.provider + ":" +
                                 probe.name + " is the constant " + std::to_string(u.value) + " (\"" + u.spec +
                                 "\"), which is not fetched");
      }
      if (type.empty()) type = TypeFor(u.size, u.is_signed);
      if (IsStringType(type) && u.size != 8) {
        return InvalidArgument("args." + a.field + ": arg" + std::to_string(a.index) + " of " + probe.provider + ":" +
                               probe.name + " is " + std::to_string(u.size) + " bytes (\"" + u.spec +
                               "\"), not a pointer to a string");
      }
    }
    if (IsStringType(type)) place = "+0(" + place + ")";
    // A uprobe reads the probed program's memory whichever string type it is given
    // (kernel/trace/trace_uprobe.c: its string fetch is strncpy_from_user), and kernels older
    // than the ustring type (commit 88903c464321) refuse that name: write "string". A kprobe
    // keeps ustring (user memory; its "string" reads kernel memory).
    if (type == "ustring" && (probe.kind == ProbeKind::kUprobe || probe.kind == ProbeKind::kUretprobe)) {
      type = "string";
    }
    out.emplace_back(a.field, place + ":" + type);
  }
  return out;
}

StatusOr<ProbeEventSpec> ResolveProbe(const ProbeRef& probe, const std::vector<ProbeArg>& args) {
  ProbeEventSpec spec;
  spec.kind = probe.kind;
  std::vector<elf::UsdtArgument> usdt_args;
  if (probe.kind == ProbeKind::kKprobe || probe.kind == ProbeKind::kKretprobe) {
    spec.symbol = probe.symbol;
    spec.offset = probe.offset;
  } else {
    TPE_ASSIGN_OR_RETURN(elf::ElfFile file, elf::ElfFile::Open(probe.path));
    spec.path = probe.path;
    if (probe.usdt) {
      TPE_ASSIGN_OR_RETURN(std::vector<elf::UsdtProbe> sites, file.FindUsdt(probe.provider, probe.name));
      if (sites.size() != 1) {
        return InvalidArgument("usdt:" + probe.path + ":" + probe.provider + ":" + probe.name + " has " +
                               std::to_string(sites.size()) + " sites (the macro is inlined in several places); " +
                               "probes with more than one site are not supported yet");
      }
      spec.offset = sites[0].file_offset;
      spec.ref_ctr_offset = sites[0].semaphore_file_offset;
      if (!sites[0].args_status.ok() && !args.empty()) {
        return sites[0].args_status.WithContext("usdt:" + probe.path + ":" + probe.provider + ":" + probe.name);
      }
      usdt_args = sites[0].args;
    } else {
      // An offset into a function must land on an instruction boundary, which nothing here can
      // check (no disassembler; the kernel decodes whatever bytes are there): a probe inside an
      // instruction would change what the traced program executes.
      if (probe.offset != 0) {
        return InvalidArgument("uprobe:" + probe.path + ":" + probe.symbol + "+" + std::to_string(probe.offset) +
                               ": an offset into a function is refused: it must be an instruction boundary, and the "
                               "exporter has no disassembler to check that (a probe inside an instruction changes "
                               "what the program executes); probe the function's entry, or a USDT probe");
      }
      // A versioned name (NAME@VERSION, NAME@@VERSION) or a plain one (its default version).
      TPE_ASSIGN_OR_RETURN(elf::Symbol sym, file.FindFunction(probe.symbol));
      if (sym.is_ifunc) {
        return InvalidArgument(probe.path + ": " + probe.symbol +
                               " is an IFUNC: a probe on it fires when the dynamic loader resolves it (once per "
                               "process), not on calls; probe the implementation it resolves to "
                               "(--list-events='uprobe:" +
                               probe.path + ":*" + sym.name + "*')");
      }
      spec.offset = sym.file_offset;
    }
  }
  TPE_ASSIGN_OR_RETURN(spec.args, FetchArgs(probe, args, usdt_args));
  return spec;
}

std::string FileIdentity(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

std::vector<std::string> ParseMapsIdentities(std::string_view maps) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < maps.size()) {
    size_t nl = maps.find('\n', pos);
    if (nl == std::string_view::npos) nl = maps.size();
    const std::string line(maps.substr(pos, nl - pos));
    pos = nl + 1;
    unsigned major = 0, minor = 0;
    unsigned long long ino = 0;
    // "start-end perms offset MAJOR:MINOR inode [path]" (fs/proc/task_mmu.c show_map_vma).
    if (std::sscanf(line.c_str(), "%*s %*s %*s %x:%x %llu", &major, &minor, &ino) != 3 || ino == 0) continue;
    out.push_back(std::to_string(major) + ":" + std::to_string(minor) + ":" + std::to_string(ino));
  }
  return out;
}

std::string MappedIdentity(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  void* addr = ::mmap(nullptr, static_cast<size_t>(::sysconf(_SC_PAGESIZE)), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED) return "";
  std::string identity;
  auto maps = ReadFileToString("/proc/self/maps");
  if (maps.ok()) {
    char start[32];
    std::snprintf(start, sizeof(start), "%" PRIxPTR "-", reinterpret_cast<uintptr_t>(addr));
    size_t pos = 0;
    while (pos < maps->size()) {
      size_t nl = maps->find('\n', pos);
      if (nl == std::string::npos) nl = maps->size();
      std::string_view line(maps->data() + pos, nl - pos);
      pos = nl + 1;
      if (!line.starts_with(start)) continue;
      auto ids = ParseMapsIdentities(line);
      if (!ids.empty()) identity = ids[0];
      break;
    }
  }
  ::munmap(addr, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
  return identity;
}

std::set<std::string> MappedFilesNow() {
  std::set<std::string> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* d = ::readdir(proc)) {
    if (d->d_name[0] < '1' || d->d_name[0] > '9') continue;
    auto maps = ReadFileToString(std::string("/proc/") + d->d_name + "/maps");
    if (!maps.ok()) continue;  // exited, or a kernel thread's empty maps
    for (auto& id : ParseMapsIdentities(*maps)) out.insert(std::move(id));
  }
  ::closedir(proc);
  return out;
}

std::vector<KprobeProfileRow> ParseKprobeProfile(std::string_view text) {
  std::vector<KprobeProfileRow> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string line(text.substr(pos, nl - pos));
    pos = nl + 1;
    char name[256];
    unsigned long long hits = 0, misses = 0;
    char extra = 0;
    // "  %-44s %15lu %15lu" (kernel/trace/trace_kprobe.c probes_profile_seq_show).
    if (std::sscanf(line.c_str(), " %255s %llu %llu %c", name, &hits, &misses, &extra) != 3) continue;
    out.push_back(KprobeProfileRow{name, hits, misses});
  }
  return out;
}

std::string ProbeEventName(const ProbeRef& probe, const ProbeEventSpec& spec, const std::string& file_identity) {
  std::string prefix;
  switch (probe.kind) {
    case ProbeKind::kUprobe:
      prefix = probe.usdt ? "usdt_" : "u_";
      break;
    case ProbeKind::kUretprobe:
      prefix = "ur_";
      break;
    case ProbeKind::kKprobe:
      prefix = "k_";
      break;
    case ProbeKind::kKretprobe:
      prefix = "kr_";
      break;
  }
  std::string what = probe.usdt ? probe.provider + "_" + probe.name : probe.symbol;
  for (char& c : what) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
  }
  what = what.substr(0, 40);
  // FNV-1a over the definition (every field that reaches the kernel).
  std::string def = std::to_string(static_cast<int>(spec.kind)) + "\n" + spec.path + "\n" + spec.symbol + "\n" +
                    std::to_string(spec.offset) + "\n" + std::to_string(spec.ref_ctr_offset);
  if (spec.maxactive != 0) def += "\nmaxactive=" + std::to_string(spec.maxactive);
  for (const auto& [n, f] : spec.args) def += "\n" + n + "=" + f;
  def += "\n" + file_identity;
  uint32_t h = 2166136261u;
  for (unsigned char c : def) h = (h ^ c) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", h);
  return prefix + what + "_" + hex;
}

ProbeRegistry::ProbeRegistry(const Tracefs& tracefs, std::function<std::set<std::string>()> mapped)
    : tracefs_(tracefs), events_(tracefs_, ProbeGroupForPid(::getpid())), mapped_fn_(std::move(mapped)) {
  // A process with this pid (in this pid namespace) that died left these: none can be ours yet.
  auto leftovers = RemoveProbeGroup(tracefs_, events_.group());
  if (!leftovers.ok()) {
    TPE_LOG_WARN("probe events of an earlier process with this pid were not removed: {}", leftovers.status().message());
  } else if (*leftovers > 0) {
    TPE_LOG_INFO("removed {} probe events an earlier process with this pid left in {}", *leftovers, events_.group());
  }
  auto stale = RemoveStaleProbeEvents(tracefs_, events_.group());
  if (!stale.ok()) {
    TPE_LOG_WARN("probe events of crashed runs were not removed: {}", stale.status().message());
  } else if (*stale > 0) {
    TPE_LOG_INFO("removed {} probe events left by crashed runs", *stale);
  }
}

namespace {
std::atomic<ProbeRegistry*> g_registry{nullptr};
}  // namespace

ProbeRegistry& ProbeRegistry::Get(const Tracefs& tracefs) {
  static ProbeRegistry registry(tracefs);
  g_registry.store(&registry);
  return registry;
}

ProbeRegistry* ProbeRegistry::IfCreated() { return g_registry.load(); }

const std::set<std::string>& ProbeRegistry::Mapped() {
  if (!mapped_read_) {
    mapped_ = mapped_fn_();
    mapped_read_ = true;
  }
  return mapped_;
}

void ProbeRegistry::ForgetMappedFiles() {
  std::lock_guard<std::mutex> lock(mu_);
  mapped_read_ = false;
}

StatusOr<ProbeVariants> ProbeRegistry::Acquire(const std::string& key, ProbeEventSpec spec, const ProbeRef& probe,
                                               const std::string& identity) {
  spec.group = events_.group();
  spec.event = ProbeEventName(probe, spec, identity);
  TPE_ASSIGN_OR_RETURN(std::string line, ProbeEventLine(spec));
  line += "\n" + identity;  // the same line on a replaced file is another event
  std::lock_guard<std::mutex> lock(mu_);
  ProbeVariants out;
  auto it = by_line_.find(line);
  if (it != by_line_.end()) {
    out.current = it->second.handle.lock();
    if (!out.current) {  // not removed yet: reuse it
      out.current = std::make_shared<const ProbeHandle>(it->second.event, spec, identity);
      it->second.handle = out.current;
    }
    it->second.key = key;
  } else {
    TPE_ASSIGN_OR_RETURN(EventName name, events_.Create(spec));
    // The kernel resolved the path when the definition was written: it must still be the file
    // whose ELF gave the offset.
    if (!identity.empty() && FileIdentity(spec.path) != identity) {
      (void)events_.Remove(name);
      return Unavailable(spec.path +
                         " was replaced while it was being probed (its symbols were read from the "
                         "earlier file); reload again");
    }
    out.current = std::make_shared<const ProbeHandle>(name, spec, identity);
    Entry e;
    e.event = name;
    e.handle = out.current;
    e.key = key;
    e.path = spec.path;
    e.identity = identity;
    e.mapped_identity = identity.empty() ? "" : MappedIdentity(spec.path);
    e.spec = spec;
    by_line_[line] = std::move(e);
  }
  current_identity_[key] = identity;
  if (identity.empty()) return out;  // a kprobe, or a file that cannot be stat'ed
  // Events of this probe on the files its path named before, while a process maps them.
  for (auto& [other_line, e] : by_line_) {
    if (e.key != key || e.identity.empty() || e.identity == identity) continue;
    if (e.mapped_identity.empty() || Mapped().count(e.mapped_identity) == 0) continue;
    auto held = e.handle.lock();
    if (!held) {
      held = std::make_shared<const ProbeHandle>(e.event, e.spec, e.identity);
      e.handle = held;
    }
    out.replaced.push_back(std::move(held));
  }
  return out;
}

std::string ProbeRegistry::RefreshReason() {
  std::lock_guard<std::mutex> lock(mu_);
  mapped_read_ = false;
  for (auto& [line, e] : by_line_) {
    if (e.identity.empty() || e.handle.expired()) continue;
    auto cur = current_identity_.find(e.key);
    if (cur == current_identity_.end()) continue;
    if (e.identity != cur->second) {
      // An event of a replaced file: needed while a process maps that file.
      if (e.mapped_identity.empty() || Mapped().count(e.mapped_identity) == 0) {
        return "no process runs the replaced " + e.path + " (" + e.identity + ") any more";
      }
      continue;
    }
    const std::string now = FileIdentity(e.path);
    if (!now.empty() && now != e.identity) return e.path + " was replaced (" + e.identity + " -> " + now + ")";
  }
  return "";
}

int ProbeRegistry::RemoveUnreferenced() {
  std::lock_guard<std::mutex> lock(mu_);
  int removed = 0;
  for (auto it = by_line_.begin(); it != by_line_.end();) {
    if (!it->second.handle.expired()) {
      ++it;
      continue;
    }
    Status st = events_.Remove(it->second.event);
    if (st.ok() || st.code() == StatusCode::kNotFound) {
      removed += st.ok();
      it = by_line_.erase(it);
      continue;
    }
    TPE_LOG_WARN("probe event {} not removed yet: {}", it->second.event.ToString(), st.message());
    ++it;
  }
  return removed;
}

}  // namespace tpe
