#include "profile/kallsyms.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <functional>
#include <map>
#include <optional>
#include <string_view>

#include "common/file_util.h"
#include "common/scoped_fd.h"

namespace tpe {
namespace {

// A file HoldKallsymsOpen opened: kept for the process's life (never closed), read with pread
// from offset 0 (seq_file restarts its listing there), one reader at a time.
struct HeldFile {
  ScopedFd fd;
  std::mutex mu;
};
std::mutex held_mu;
std::map<std::string, HeldFile>& HeldFiles() {
  static auto* files = new std::map<std::string, HeldFile>();  // never destroyed: read until exit
  return *files;
}
HeldFile* FindHeld(const std::string& path) {
  std::lock_guard<std::mutex> lock(held_mu);
  auto it = HeldFiles().find(path);
  return it == HeldFiles().end() ? nullptr : &it->second;
}

// Reads `path` from its start, handing each chunk read to `take` until it returns false or the
// file ends: through the held file when there is one, else through a new open.
Status ReadChunks(const std::string& path, const std::function<bool(std::string_view)>& take) {
  HeldFile* held = FindHeld(path);
  std::unique_lock<std::mutex> lock;
  ScopedFd own;
  int fd = -1;
  if (held != nullptr) {
    lock = std::unique_lock<std::mutex>(held->mu);
    fd = held->fd.get();
  } else {
    own = ScopedFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!own.valid()) return ErrnoStatus(errno, "cannot open " + path);
    fd = own.get();
  }
  std::vector<char> buf(65536);  // renders run on the HTTP threads: not on their stacks
  for (off_t at = 0;;) {
    const ssize_t n = held != nullptr ? ::pread(fd, buf.data(), buf.size(), at) : ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read " + path);
    }
    if (n == 0 || !take(std::string_view(buf.data(), static_cast<size_t>(n)))) return Status::Ok();
    at += n;
  }
}

}  // namespace

Status HoldKallsymsOpen(const std::string& path) {
  std::lock_guard<std::mutex> lock(held_mu);
  if (HeldFiles().count(path) != 0) return Status::Ok();
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "cannot open " + path);
  HeldFiles()[path].fd = std::move(fd);
  return Status::Ok();
}

StatusOr<bool> KallsymsHidden(const std::string& path) {
  constexpr size_t kMaxBytes = 1 << 20;
  std::string text;  // the lines not yet looked at
  size_t seen = 0;
  std::optional<bool> hidden;
  TPE_RETURN_IF_ERROR(ReadChunks(path, [&](std::string_view chunk) {
    text.append(chunk);
    seen += chunk.size();
    size_t line_start = 0;
    for (size_t nl; !hidden && (nl = text.find('\n', line_start)) != std::string::npos; line_start = nl + 1) {
      // "<hex address> <type> <name>...": the first text symbol decides.
      std::string_view line(text.data() + line_start, nl - line_start);
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos || sp + 1 >= line.size()) continue;
      const char type = line[sp + 1];
      if (type != 't' && type != 'T' && type != 'w' && type != 'W') continue;
      hidden = line.find_first_not_of('0') == sp;  // every digit of the address is 0
    }
    text.erase(0, line_start);
    return !hidden && seen < kMaxBytes;
  }));
  if (!hidden) return NotFound(path + " lists no kernel text symbol (in its first MiB)");
  return *hidden;
}

StatusOr<Kallsyms> Kallsyms::Parse(std::string_view text) {
  Kallsyms table;
  size_t line_no = 0, listed = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    // "<hex address> <type> <name>[\t[<module>]]"
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    uint64_t address = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + (sp1 == std::string_view::npos ? 0 : sp1), address, 16);
    if (sp2 == std::string_view::npos || sp2 != sp1 + 2 || ec != std::errc() || end != line.data() + sp1) {
      return InvalidArgument("kallsyms line " + std::to_string(line_no) +
                             " is not \"<hex address> <type> <name>\": \"" + std::string(line.substr(0, 120)) + "\"");
    }
    ++listed;
    const char type = line[sp1 + 1];
    if (type != 't' && type != 'T' && type != 'w' && type != 'W') continue;
    std::string_view rest = line.substr(sp2 + 1);
    Symbol s;
    s.address = address;
    const size_t tab = rest.find('\t');
    s.name = std::string(rest.substr(0, tab));
    if (tab != std::string_view::npos) {
      std::string_view mod = rest.substr(tab + 1);
      if (mod.size() >= 2 && mod.front() == '[' && mod.back() == ']') mod = mod.substr(1, mod.size() - 2);
      s.module = std::string(mod);
    }
    if (s.address == 0) continue;
    auto [base, fresh] = table.bases_.try_emplace(s.module, s.address);
    if (s.module.empty() && (s.name == "_text" || s.name == "_stext")) {
      if (s.name == "_text" || !table.text_found_) base->second = s.address;
      table.text_found_ |= s.name == "_text";
    } else if (!fresh && s.address < base->second && !(s.module.empty() && table.text_found_)) {
      base->second = s.address;
    }
    table.symbols_.push_back(std::move(s));
  }
  table.hidden_ = listed > 0 && table.symbols_.empty();
  std::stable_sort(table.symbols_.begin(), table.symbols_.end(),
                   [](const Symbol& a, const Symbol& b) { return a.address < b.address; });
  return table;
}

StatusOr<Kallsyms> Kallsyms::Read(const std::string& path) {
  std::string text;
  TPE_RETURN_IF_ERROR(ReadChunks(path, [&text](std::string_view chunk) {
    text.append(chunk);
    return true;
  }));
  auto table = Parse(text);
  if (!table.ok()) return table.status().WithContext(path);
  return table;
}

KallsymsCache::KallsymsCache(std::string path, uint64_t max_age_ns, uint64_t min_age_ns, std::string modules_path)
    : path_(std::move(path)),
      modules_path_(std::move(modules_path)),
      max_age_ns_(max_age_ns),
      min_age_ns_(min_age_ns) {}

std::shared_ptr<const Kallsyms> KallsymsCache::Get(uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  // now_ns was read before the lock: a render that took it earlier may come second.
  const uint64_t age = now_ns > read_at_ns_ ? now_ns - read_at_ns_ : 0;
  // A module loaded or removed since the read: its symbols moved (read again at once).
  auto modules = ReadFileToString(modules_path_);
  const std::string modules_text = modules.ok() ? std::move(modules).value() : "";
  const bool modules_changed = table_ && modules_text != modules_text_;
  modules_text_ = modules_text;
  const bool stale = !table_ || modules_changed || age >= max_age_ns_ || ((missed_ || failed_) && age >= min_age_ns_);
  if (stale) {
    auto read = Kallsyms::Read(path_);
    failed_ = !read.ok();
    table_ = std::make_shared<const Kallsyms>(read.ok() ? std::move(read).value() : Kallsyms());
    read_at_ns_ = now_ns;
    missed_ = false;
    // Misses that made this read and are still misses stay known until the next full refresh.
    if (age >= max_age_ns_) known_misses_.clear();
    ++reads_;
  }
  return table_;
}

void KallsymsCache::MarkMissed(const std::set<uint64_t>& addresses) {
  std::lock_guard<std::mutex> lock(mu_);
  if (table_ && table_->hidden()) return;  // kptr_restrict: a re-read would name nothing either
  for (uint64_t a : addresses) {
    if (known_misses_.size() >= 4096) break;
    if (known_misses_.insert(a).second) missed_ = true;
  }
}

uint64_t KallsymsCache::reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

uint64_t Kallsyms::base(const Symbol& s) const {
  auto it = bases_.find(s.module);
  return it == bases_.end() ? s.address : it->second;
}

Kallsyms::Hit Kallsyms::Lookup(uint64_t address) const {
  if (address == 0 || symbols_.empty()) return {};
  auto it = std::upper_bound(symbols_.begin(), symbols_.end(), address,
                             [](uint64_t a, const Symbol& s) { return a < s.address; });
  if (it == symbols_.begin() || it == symbols_.end()) return {};  // below the first, or past the last start
  const Symbol& s = *(it - 1);
  return {&s, address - s.address};
}

}  // namespace tpe
