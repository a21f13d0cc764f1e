#include "unwind/cfi_cache.h"

#include "common/log.h"
#include "process/mapped_file_open.h"

namespace tpe::unwind {

CfiCache::CfiCache(const MappedFiles* files, Options options) : files_(files), options_(std::move(options)) {}

std::shared_ptr<const CfiTable> CfiCache::Get(FileId file, uint64_t now_ns) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(file);
  if (it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    if (it->second.table != nullptr || now_ns < it->second.failed_at_ns + options_.retry_ns) return it->second.table;
  }
  lock.unlock();
  // Read outside the lock: a file is a few ms at most (its CFI sections).
  std::shared_ptr<const CfiTable> table;
  Status why = NotFound("not a file");
  auto mapped = files_ != nullptr ? files_->Get(file) : std::nullopt;
  if (mapped && mapped->kind == MappedFile::Kind::kFile) {
    std::string display;
    CfiTable::Limits limits;
    auto opened = OpenMappedFile(*mapped, options_.proc_root, uint64_t{4} << 30, &refusals_, &display);
    if (opened.ok()) {
      auto read = CfiTable::Read(opened->fd.get(), display, limits);
      if (read.ok()) {
        table = std::move(read).value();
      } else {
        why = read.status();
      }
    } else {
      why = opened.status();
    }
  }
  lock.lock();
  ++(table != nullptr ? stats_.reads : stats_.unreadable);
  it = entries_.find(file);
  if (it == entries_.end()) {
    lru_.push_front(file);
    it = entries_.emplace(file, Entry{nullptr, 0, lru_.begin()}).first;
  } else if (it->second.table != nullptr) {
    stats_.bytes -= it->second.table->memory_bytes();
  }
  // Once per file while it is cached: why its frames are walked by frame pointer.
  if (table == nullptr && !it->second.logged && mapped && mapped->kind == MappedFile::Kind::kFile) {
    it->second.logged = true;
    TPE_LOG_INFO("unwind tables of {} not read ({}): its frames are walked by frame pointer", mapped->path,
                 why.message());
  }
  it->second.table = table;
  it->second.failed_at_ns = table == nullptr ? now_ns : 0;
  if (table != nullptr) stats_.bytes += table->memory_bytes();
  EvictLocked();
  return table;
}

void CfiCache::EvictLocked() {
  while ((stats_.bytes > options_.max_bytes || entries_.size() > options_.max_files) && lru_.size() > 1) {
    const FileId victim = lru_.back();
    lru_.pop_back();
    auto it = entries_.find(victim);
    if (it == entries_.end()) continue;
    if (it->second.table != nullptr) stats_.bytes -= it->second.table->memory_bytes();
    entries_.erase(it);
    ++stats_.evictions;
  }
}

CfiCache::Stats CfiCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.files = entries_.size();
  return s;
}

std::vector<HeldSpan>* SpanMemo::For(uint32_t pid, uint64_t generation, uint64_t now_ns) {
  Process* slot = &processes_[0];
  for (Process& p : processes_) {
    if (p.pid == pid && !p.held.empty()) {
      slot = &p;
      break;
    }
    if (p.used < slot->used) slot = &p;  // the least recently used (or never)
  }
  if (slot->pid != pid || slot->generation != generation || now_ns < slot->since_ns ||
      now_ns - slot->since_ns >= max_age_ns_) {
    slot->held.clear();
    slot->pid = pid;
    slot->generation = generation;
    slot->since_ns = now_ns;
  }
  slot->used = ++uses_;
  return &slot->held;
}

CodeAt ProcessCodeLookup::At(uint64_t address) {
  CodeAt code;
  for (const HeldSpan& h : *held_) {
    if (address >= h.span.start && address < h.span.end) {
      const UserFrame f = h.span.At(address);
      code.file = f.file;
      code.offset = f.offset;
      code.anonymous = h.span.anonymous;
      code.cfi = h.table.get();
      return code;
    }
  }
  ProcessImages::CodeSpan span;
  const UserFrame f = images_->CodeAt(pid_, address, now_ns_, &code.anonymous, &span);
  code.file = f.file;
  code.offset = f.offset;
  if (code.file == kNoFile) return code;
  std::shared_ptr<const CfiTable> table;
  if (!code.anonymous && tables_ != nullptr) {
    for (const HeldSpan& h : *held_) {  // another mapping of a file already asked for
      if (h.span.file == code.file) {
        table = h.table;
        break;
      }
    }
    if (table == nullptr) table = tables_->Get(code.file, now_ns_);
  }
  code.cfi = table.get();
  // Held whether or not the span is known (an empty span matches no address; the table is kept).
  if (span.file != code.file) span = ProcessImages::CodeSpan{0, 0, 0, code.file, code.anonymous};
  held_->push_back(HeldSpan{span, std::move(table)});
  return code;
}

}  // namespace tpe::unwind
