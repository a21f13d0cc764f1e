#include "process/process_images.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "common/file_util.h"
#include "process/process_maps.h"

namespace tpe {
namespace {

// Eviction tiers (ProcessImages' header): ended and never sampled, ended and sampled, current.
constexpr int kEndedUnsampled = 0, kEndedSampled = 1, kCurrent = 2;
constexpr uint64_t kProcRetryNs = 1'000'000'000;
constexpr size_t kProcessBytes = sizeof(void*) * 12;  // a procs_ node, beside its images
constexpr size_t kMaxPaths = size_t{1} << 20;

}  // namespace

ProcessImages::ProcessImages(MappedFiles* files, Options options) : files_(files), options_(std::move(options)) {
  paths_.push_back(nullptr);  // id 0: anonymous memory
}

uint32_t ProcessImages::PathId(std::string_view path) {
  if (path.empty() || path == "//anon") return 0;
  auto it = path_ids_.find(std::string(path));
  if (it != path_ids_.end()) return it->second;
  // A user can map files of any name: past the bound a path is not kept (its frames are
  // anonymous-looking, named by no file).
  if (paths_.size() >= kMaxPaths) return 0;
  it = path_ids_.emplace(std::string(path), static_cast<uint32_t>(paths_.size())).first;
  paths_.push_back(&it->first);
  bytes_ += path.size() + 64;
  return it->second;
}

ProcessImages::Image* ProcessImages::NewImage(uint32_t pid, Process* p, uint64_t start_ns) {
  if (Image* old = CurrentOf(p); old != nullptr && !old->ended) {
    old->ended = true;
    Refile(pid, old);
  }
  auto img = std::make_unique<Image>();
  img->id = next_id_++;
  img->start_ns = start_ns;
  // Kept in start order: a record older than the current image's start (cannot happen in time
  // order) goes before it.
  auto at = std::upper_bound(p->images.begin(), p->images.end(), start_ns,
                             [](uint64_t t, const std::unique_ptr<Image>& i) { return t < i->start_ns; });
  Image* raw = p->images.insert(at, std::move(img))->get();
  Refile(pid, raw);
  return raw;
}

void ProcessImages::Refile(uint32_t pid, Image* img) {
  generation_.fetch_add(1, std::memory_order_release);
  if (std::get<0>(img->evict_key) >= 0) {
    evict_order_.erase(std::tuple_cat(img->evict_key, std::make_tuple(pid, img->id)));
  }
  bytes_ -= img->bytes;
  img->bytes = img->evicted ? sizeof(Image) : sizeof(Image) + img->mappings.capacity() * sizeof(Mapping);
  bytes_ += img->bytes;
  if (img->evicted) {
    img->evict_key = {-1, 0};
    return;
  }
  const int tier = !img->ended ? kCurrent : img->sampled ? kEndedSampled : kEndedUnsampled;
  // A tier change starts the image's turn anew; the same tier keeps its place.
  const uint64_t seq = std::get<0>(img->evict_key) == tier ? std::get<1>(img->evict_key) : next_seq_++;
  img->evict_key = {tier, seq};
  evict_order_.emplace(tier, seq, pid, img->id);
}

void ProcessImages::EnforceBound() {
  while (bytes_ > options_.max_bytes && !evict_order_.empty()) {
    const auto [tier, seq, pid, id] = *evict_order_.begin();
    evict_order_.erase(evict_order_.begin());
    auto pit = procs_.find(pid);
    if (pit == procs_.end()) continue;
    Process& p = pit->second;
    auto iit = std::find_if(p.images.begin(), p.images.end(), [id = id](const auto& i) { return i->id == id; });
    if (iit == p.images.end()) continue;
    Image* img = iit->get();
    img->evict_key = {-1, 0};
    ++counts_.evicted;
    if (!img->ended) {
      // A live process's current image: dropped, read again from /proc when a sample needs it.
      img->mappings = {};
      img->complete = false;
      p.proc_tried_ns = 0;
      Refile(pid, img);
      continue;
    }
    // Kept as a stub, so a lookup of its time finds no older image; stubs before every live
    // image go.
    img->mappings = {};
    img->evicted = true;
    Refile(pid, img);
    while (!p.images.empty() && p.images.front()->evicted) {
      bytes_ -= p.images.front()->bytes;
      p.images.erase(p.images.begin());
    }
    if (p.images.empty()) {
      bytes_ -= kProcessBytes;
      procs_.erase(pit);
    }
  }
}

void ProcessImages::Insert(std::vector<Mapping>* maps, Mapping m) {
  std::erase_if(*maps, [&](const Mapping& old) { return old.start < m.end && m.start < old.end; });
  maps->insert(
      std::upper_bound(maps->begin(), maps->end(), m.start, [](uint64_t a, const Mapping& x) { return a < x.start; }),
      m);
}

void ProcessImages::OnMmap(uint64_t time_ns, uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, uint32_t maj,
                           uint32_t min, uint64_t ino, uint32_t prot, std::string_view filename) {
  if (pid == 0 || len == 0 || addr + len < addr || (prot & PROT_EXEC) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto [pit, fresh] = procs_.try_emplace(pid);
  if (fresh) bytes_ += kProcessBytes;
  Process& p = pit->second;
  Image* img = CurrentOf(&p);
  // A process first seen mapping something predates what was learnt of it: an image at 0,
  // incomplete (read from /proc when a sample needs it).
  if (img == nullptr || img->ended || img->evicted) img = NewImage(pid, &p, img == nullptr ? 0 : time_ns);
  Mapping m;
  m.start = addr;
  m.end = addr + len;
  m.pgoff = pgoff;
  m.dev_major = maj;
  m.dev_minor = min;
  m.inode = ino;
  m.path = PathId(filename);
  Insert(&img->mappings, m);
  Refile(pid, img);
  EnforceBound();
}

void ProcessImages::OnExec(uint64_t time_ns, uint32_t pid) {
  if (pid == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto [pit, fresh] = procs_.try_emplace(pid);
  if (fresh) bytes_ += kProcessBytes;
  pit->second.exited = false;
  NewImage(pid, &pit->second, time_ns)->complete = true;
  EnforceBound();
}

void ProcessImages::OnFork(uint64_t time_ns, uint32_t ppid, uint32_t pid) {
  if (pid == ppid || pid == 0) return;  // a new thread: the same mappings
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Mapping> copy;
  bool complete = false;
  auto parent = procs_.find(ppid);
  if (ppid != 0) {
    if (parent == procs_.end()) {
      parent = procs_.try_emplace(ppid).first;
      bytes_ += kProcessBytes;
    }
    Image* pimg = CurrentOf(&parent->second);
    // A parent that predates what was learnt: its maps now (it is forking, so alive).
    if (pimg == nullptr || !pimg->complete) {
      ReadProc(ppid, &parent->second, time_ns == 0 ? 1 : time_ns);
      pimg = CurrentOf(&parent->second);
    }
    if (pimg != nullptr && !pimg->evicted) {
      copy = pimg->mappings;
      complete = pimg->complete;
    }
  }
  auto [pit, fresh] = procs_.try_emplace(pid);
  if (fresh) bytes_ += kProcessBytes;
  pit->second.exited = false;
  Image* img = NewImage(pid, &pit->second, time_ns);
  img->mappings = std::move(copy);
  img->complete = complete;
  Refile(pid, img);
  EnforceBound();
}

void ProcessImages::OnExit(uint64_t /*time_ns*/, uint32_t pid, uint32_t tid) {
  if (pid != tid || pid == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) return;
  it->second.exited = true;
  Image* img = CurrentOf(&it->second);
  if (img != nullptr && !img->ended) {
    img->ended = true;
    Refile(pid, img);
  }
}

void ProcessImages::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  generation_.fetch_add(1, std::memory_order_release);
  size_t path_bytes = 0;
  for (const std::string* p : paths_) path_bytes += p == nullptr ? 0 : p->size() + 64;
  procs_.clear();
  failed_.clear();
  evict_order_.clear();
  bytes_ = path_bytes;
}

void ProcessImages::OnLost() {
  std::lock_guard<std::mutex> lock(mu_);
  generation_.fetch_add(1, std::memory_order_release);
  for (auto& [pid, p] : procs_) {
    Image* img = CurrentOf(&p);
    if (p.exited || img == nullptr || img->ended) continue;
    img->doubted = true;
    img->complete = false;
    p.proc_tried_ns = 0;  // read at the next sample that needs it, however recent the last read
  }
}

bool ProcessImages::ReadProc(uint32_t pid, Process* p, uint64_t now_ns) {
  if (p->exited) return false;
  if (p->proc_tried_ns != 0 && now_ns < p->proc_tried_ns + kProcRetryNs) return false;
  p->proc_tried_ns = now_ns;
  ++counts_.proc_reads;
  auto text = ReadFileToString(options_.proc_root + "/" + std::to_string(pid) + "/maps");
  if (!text.ok()) return false;
  auto maps = ParseProcMaps(*text);
  if (!maps.ok()) return false;
  Image* img = CurrentOf(p);
  if (img == nullptr || img->ended) img = NewImage(pid, p, img == nullptr ? 0 : img->start_ns);
  img->evicted = false;
  std::vector<Mapping> mappings;
  for (const ProcMapping& pm : *maps) {
    if (!pm.executable) continue;
    Mapping m;
    m.start = pm.start;
    m.end = pm.end;
    m.pgoff = pm.offset;
    m.dev_major = pm.dev_major;
    m.dev_minor = pm.dev_minor;
    m.inode = pm.inode;
    m.path = PathId(pm.path);
    // What was resolved before for the same range and file stays resolved.
    for (const Mapping& old : img->mappings) {
      if (old.start == m.start && old.end == m.end && old.inode == m.inode && old.path == m.path &&
          old.pgoff == m.pgoff) {
        m.file = old.file;
        m.resolved = old.resolved;
      }
    }
    mappings.push_back(m);
  }
  img->mappings = std::move(mappings);
  img->complete = true;
  img->doubted = false;
  Refile(pid, img);
  return true;
}

FileId ProcessImages::Resolve(uint32_t pid, const Image& img, bool current, Mapping* m) {
  if (m->resolved) return m->file;
  MappedFile f;
  f.pid = pid;
  f.map_start = m->start;
  f.map_end = m->end;
  f.image_ns = img.start_ns;
  f.dev_major = m->dev_major;
  f.dev_minor = m->dev_minor;
  f.inode = m->inode;
  const std::string* path = m->path == 0 ? nullptr : paths_[m->path];
  if (path == nullptr) {
    f.kind = MappedFile::Kind::kAnonymous;
  } else if (!path->empty() && (*path)[0] == '[') {
    f.kind = MappedFile::Kind::kPseudo;
    f.path = *path;
    f.pid = 0;
    f.map_start = f.map_end = f.image_ns = 0;
    f.inode = f.dev_major = f.dev_minor = 0;
  } else {
    f.kind = MappedFile::Kind::kFile;
    f.path = *path;
    // The file's content identity: through the mapping itself while the process maps it, else
    // through its root, else by path here; only a file with the mapping's inode (the device is
    // not compared: through overlayfs stat reports another).
    std::vector<std::string> candidates;
    const std::string base = options_.proc_root + "/" + std::to_string(pid);
    if (current) {
      char range[64];
      std::snprintf(range, sizeof(range), "/map_files/%lx-%lx", static_cast<unsigned long>(m->start),
                    static_cast<unsigned long>(m->end));
      candidates.push_back(base + range);
      candidates.push_back(base + "/root" + *path);
    }
    if ((*path)[0] == '/') candidates.push_back(*path);
    for (const std::string& c : candidates) {
      struct stat st {};
      if (::stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_ino == m->inode) {
        f.stat_known = true;
        f.size = static_cast<uint64_t>(st.st_size);
        f.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
        break;
      }
    }
  }
  m->file = files_->Intern(f);
  m->resolved = true;
  return m->file;
}

void ProcessImages::Frames(uint32_t pid, Process* p, Image* img, bool current, std::span<const uint64_t> ips,
                           uint64_t now_ns, std::vector<UserFrame>* out) {
  bool reread = false;
  for (size_t i = 0; i < ips.size(); ++i) {
    const uint64_t lookup = i == 0 ? ips[i] : ips[i] - 1;  // a return address: the call before it
    Mapping* m = nullptr;
    for (int attempt = 0; attempt < 2 && m == nullptr; ++attempt) {
      if (img != nullptr && !img->evicted && !img->doubted) {
        auto it = std::upper_bound(img->mappings.begin(), img->mappings.end(), lookup,
                                   [](uint64_t a, const Mapping& x) { return a < x.start; });
        if (it != img->mappings.begin() && lookup < std::prev(it)->end) m = &*std::prev(it);
      }
      // In no mapping of the current image: records lost in a full ring? /proc again, at most
      // once a second (a frame-pointer walk through code without frame pointers makes up
      // addresses in no mapping at every sample).
      if (m == nullptr && current && !reread && attempt == 0) {
        reread = true;
        if (!ReadProc(pid, p, now_ns)) break;
        img = CurrentOf(p);
        continue;
      }
      break;
    }
    if (m == nullptr) {
      out->push_back(UserFrame{kNoFile, 0});
      continue;
    }
    const FileId file = Resolve(pid, *img, current, m);
    const bool anonymous = m->path == 0;
    out->push_back(UserFrame{file, file == kNoFile ? 0 : anonymous ? ips[i] : ips[i] - m->start + m->pgoff});
  }
}

void ProcessImages::Normalize(uint32_t pid, std::span<const uint64_t> ips, uint64_t now_ns,
                              std::vector<UserFrame>* out) {
  if (ips.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (pid == 0) {  // a task outside the daemon's pid namespace: no process to look in
    out->insert(out->end(), ips.size(), UserFrame{});
    return;
  }
  Process& p = Learn(pid, now_ns);
  Frames(pid, &p, CurrentOf(&p), !p.exited, ips, now_ns, out);
  AfterSample(pid, &p);
  EnforceBound();
}

ProcessImages::Process& ProcessImages::Learn(uint32_t pid, uint64_t now_ns) {
  auto [pit, fresh] = procs_.try_emplace(pid);
  if (fresh) {
    bytes_ += kProcessBytes;
    if (auto f = failed_.find(pid); f != failed_.end()) pit->second.proc_tried_ns = f->second;
  }
  Process& p = pit->second;
  Image* img = CurrentOf(&p);
  if (img == nullptr || !img->complete || img->evicted) ReadProc(pid, &p, now_ns);
  return p;
}

bool ProcessImages::AfterSample(uint32_t pid, Process* p) {
  Image* img = CurrentOf(p);
  if (img != nullptr && !img->sampled) {
    img->sampled = true;
    Refile(pid, img);
  }
  if (!p->images.empty()) return true;
  // Nothing could be read (the process is gone, or not readable): not kept, but its last
  // attempt is, so the next samples do not read /proc again within the second.
  RememberFailure(pid, p->proc_tried_ns);
  bytes_ -= kProcessBytes;
  procs_.erase(pid);
  return false;
}

void ProcessImages::RememberFailure(uint32_t pid, uint64_t tried_ns) {
  if (tried_ns == 0) return;
  if (failed_.size() >= 4096) {
    std::erase_if(failed_, [&](const auto& f) { return f.second + kProcRetryNs <= tried_ns; });
    if (failed_.size() >= 4096) failed_.clear();
  }
  failed_[pid] = tried_ns;
}

UserFrame ProcessImages::CodeAt(uint32_t pid, uint64_t address, uint64_t now_ns, bool* anonymous, CodeSpan* span) {
  *anonymous = false;
  if (span != nullptr) *span = CodeSpan{};
  if (pid == 0) return UserFrame{};
  std::lock_guard<std::mutex> lock(mu_);
  Process& p = Learn(pid, now_ns);
  Image* img = CurrentOf(&p);
  std::vector<UserFrame>& one = scratch_;
  one.clear();
  const uint64_t ips[] = {address};
  Frames(pid, &p, img, !p.exited, ips, now_ns, &one);
  if (!AfterSample(pid, &p)) return UserFrame{};
  img = CurrentOf(&p);
  if (!one.empty() && one[0].file != kNoFile) {
    // Anonymous memory keeps the address (Frames): tell the unwinder it is JIT code.
    auto it = std::upper_bound(img->mappings.begin(), img->mappings.end(), address,
                               [](uint64_t a, const Mapping& x) { return a < x.start; });
    if (it != img->mappings.begin() && address < std::prev(it)->end) {
      const Mapping& m = *std::prev(it);
      *anonymous = m.path == 0;
      if (span != nullptr) *span = CodeSpan{m.start, m.end, m.pgoff, one[0].file, *anonymous};
    }
  }
  EnforceBound();
  return one.empty() ? UserFrame{} : one[0];
}

void ProcessImages::NormalizeAt(uint32_t pid, uint64_t image_ns, std::span<const uint64_t> ips, uint64_t now_ns,
                                std::vector<UserFrame>* out) {
  if (ips.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto pit = pid == 0 ? procs_.end() : procs_.find(pid);
  if (pit == procs_.end() && pid != 0) {
    // A process nothing was learnt of (it predates the daemon, or began before the records were
    // traced): its maps now, if it lives.
    pit = procs_.try_emplace(pid).first;
    bytes_ += kProcessBytes;
    if (auto f = failed_.find(pid); f != failed_.end()) pit->second.proc_tried_ns = f->second;
    ReadProc(pid, &pit->second, now_ns);
    if (pit->second.images.empty()) {
      RememberFailure(pid, pit->second.proc_tried_ns);
      bytes_ -= kProcessBytes;
      procs_.erase(pit);
      pit = procs_.end();
    }
  }
  if (pit == procs_.end()) {
    out->insert(out->end(), ips.size(), UserFrame{});
    return;
  }
  Process& p = pit->second;
  auto it = std::upper_bound(p.images.begin(), p.images.end(), image_ns,
                             [](uint64_t t, const std::unique_ptr<Image>& i) { return t < i->start_ns; });
  if (it == p.images.begin()) {
    out->insert(out->end(), ips.size(), UserFrame{});
    return;
  }
  Image* img = std::prev(it)->get();
  const bool current = img == CurrentOf(&p) && !p.exited;
  if (current && (!img->complete || img->evicted)) {
    ReadProc(pid, &p, now_ns);
    img = CurrentOf(&p);
  }
  Frames(pid, &p, img, current, ips, now_ns, out);
  if (!img->sampled) {
    img->sampled = true;
    Refile(pid, img);
  }
  EnforceBound();
}

std::optional<ProcessImages::ImageInfo> ProcessImages::Current(uint32_t pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end() || it->second.images.empty()) return std::nullopt;
  const Image& img = *it->second.images.back();
  return ImageInfo{img.start_ns, img.complete, img.ended, img.mappings.size()};
}

ProcessImages::Stats ProcessImages::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = counts_;
  s.processes = procs_.size();
  for (const auto& [pid, p] : procs_) s.images += p.images.size();
  s.bytes = bytes_;
  return s;
}

}  // namespace tpe
