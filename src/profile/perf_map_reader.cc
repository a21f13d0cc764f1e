#include "profile/perf_map_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <sstream>
#include <vector>

#include "common/scoped_fd.h"

namespace tpe {
namespace {

// /proc/PID/status is a few KiB; more is not a status file.
constexpr size_t kMaxStatusBytes = 1 << 20;

// Reads `name` below the directory `dir_fd` (procfs: files report size 0, so read to the end).
StatusOr<std::string> ReadAt(int dir_fd, const char* name, const std::string& display) {
  ScopedFd fd(::openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return ErrnoStatus(errno, "cannot open " + display);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read " + display);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxStatusBytes) return InvalidArgument(display + " is larger than a status file can be");
  }
  return out;
}

// The whitespace-separated unsigned numbers after "NAME:" on the line of `text` that starts so.
std::vector<uint64_t> Numbers(const std::string& text, const std::string& name) {
  std::vector<uint64_t> out;
  const std::string key = name + ":";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    if (text.compare(pos, key.size(), key) == 0) {
      std::istringstream fields(text.substr(pos + key.size(), eol - pos - key.size()));
      std::string field;
      while (fields >> field) {
        uint64_t v = 0;
        auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
        if (ec != std::errc() || end != field.data() + field.size()) return {};
        out.push_back(v);
      }
      return out;
    }
    pos = eol + 1;
  }
  return out;
}

}  // namespace

StatusOr<ProcessIdentity> ParseProcessIdentity(const std::string& status_text, const std::string& display) {
  ProcessIdentity id;
  bool have_pid = false;
  for (const char* line : {"NStgid", "NSpid", "Tgid"}) {
    std::vector<uint64_t> v = Numbers(status_text, line);
    if (!v.empty() && v.back() != 0 && v.back() <= UINT32_MAX) {
      id.ns_tgid = static_cast<uint32_t>(v.back());
      have_pid = true;
      break;
    }
  }
  if (!have_pid) return InvalidArgument(display + ": no NStgid, NSpid or Tgid line");
  std::vector<uint64_t> uids = Numbers(status_text, "Uid");
  if (uids.size() < 2 || uids[1] > UINT32_MAX) {
    return InvalidArgument(display + ": no Uid line with the effective uid (\"Uid: REAL EFFECTIVE SAVED FS\")");
  }
  id.euid = static_cast<uid_t>(uids[1]);
  return id;
}

PerfMapCache::PerfMapCache(std::string proc_root) : PerfMapCache(std::move(proc_root), Options()) {}

PerfMapCache::PerfMapCache(std::string proc_root, Options options)
    : proc_root_(std::move(proc_root)), options_(options) {}

std::shared_ptr<const PerfMap> PerfMapCache::Get(uint32_t pid, Status* why) {
  Status ignored;
  Status& reason = why != nullptr ? *why : ignored;
  const std::string base = proc_root_ + "/" + std::to_string(pid);
  // Everything through this directory fd: a pid reused after it was opened is ESRCH, never the
  // new process's files.
  ScopedFd dir(::open(base.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    reason = ErrnoStatus(errno, "no process " + std::to_string(pid) + " (" + base + ")");
    return nullptr;
  }
  auto status_text = ReadAt(dir.get(), "status", base + "/status");
  if (!status_text.ok()) {
    reason = status_text.status();
    return nullptr;
  }
  auto id = ParseProcessIdentity(*status_text, base + "/status");
  if (!id.ok()) {
    reason = id.status();
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.unreadable;
    return nullptr;
  }
  // The process's root directory: a magic link into its mount namespace (the daemon's own
  // choice to follow; below it nothing is followed).
  ScopedFd root(::openat(dir.get(), "root", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) {
    reason = ErrnoStatus(errno, "cannot open " + base + "/root");
    return nullptr;
  }
  const std::string relative = "tmp/perf-" + std::to_string(id->ns_tgid) + ".map";
  const std::string display = base + "/root/" + relative;
  UntrustedFileOptions open_options;
  open_options.max_bytes = options_.max_file_bytes;
  open_options.symlinks = UntrustedFileOptions::Symlinks::kRefuseAny;
  open_options.owners = {id->euid};
  if (id->euid != 0) open_options.owners.push_back(0);
  FileRefusal refusal = FileRefusal::kNone;
  auto file = OpenUntrustedInRoot(root.get(), relative, open_options, display, &refusal);
  if (!file.ok()) {
    reason = file.status();
    if (refusal != FileRefusal::kNone) {
      refusals_.Add(refusal, file.status());
    } else if (file.status().code() != StatusCode::kNotFound) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.unreadable;
    }
    return nullptr;
  }
  const Key key{file->st.st_dev, file->st.st_ino,
                int64_t{file->st.st_mtim.tv_sec} * 1'000'000'000 + file->st.st_mtim.tv_nsec, file->st.st_size};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = maps_.find(key);
    if (it != maps_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      reason = Status::Ok();
      return it->second.map;
    }
  }
  auto text = ReadUntrusted(*file, options_.max_file_bytes, display, &refusal);
  if (!text.ok()) {
    reason = text.status();
    if (refusal != FileRefusal::kNone) {
      refusals_.Add(refusal, text.status());
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.unreadable;
    }
    return nullptr;
  }
  auto map = std::make_shared<const PerfMap>(PerfMap::Parse(*text, options_.max_entries));
  reason = Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.reads;
  stats_.truncated_lines += map->truncated();
  // The file may have changed while it was read: its key is then stale, and the next Get,
  // seeing the new mtime or size, reads it again.
  PutLocked(key, map);
  return map;
}

void PerfMapCache::PutLocked(const Key& key, std::shared_ptr<const PerfMap> map) {
  const uint64_t bytes = map->memory_bytes();
  if (bytes > options_.max_cache_bytes || options_.max_files == 0) return;  // used once, not kept
  // Earlier versions of the same file (a runtime appends to its map: new mtime and size), and
  // this version when another thread read it meanwhile.
  for (auto it = maps_.lower_bound(Key{key.dev, key.ino, INT64_MIN, INT64_MIN});
       it != maps_.end() && it->first.dev == key.dev && it->first.ino == key.ino;) {
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    it = maps_.erase(it);
    ++stats_.replaced;
  }
  while (!lru_.empty() && (bytes_ + bytes > options_.max_cache_bytes || maps_.size() >= options_.max_files)) {
    auto oldest = maps_.find(lru_.back());
    bytes_ -= oldest->second.bytes;
    maps_.erase(oldest);
    lru_.pop_back();
    ++stats_.evictions;
  }
  lru_.push_front(key);
  maps_.emplace(key, Entry{std::move(map), bytes, lru_.begin()});
  bytes_ += bytes;
}

PerfMapCache::Stats PerfMapCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t PerfMapCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return maps_.size();
}

uint64_t PerfMapCache::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace tpe
