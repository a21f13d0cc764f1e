#include "profile/symbolizer.h"

#include <sys/stat.h>

#include <algorithm>

#include "common/file_util.h"

namespace tpe {
namespace {

// A mapping that is no file: "[unknown]", "[kernel.kallsyms]"; it spans every address.
ProfileMapping Pseudo(const std::string& name) { return ProfileMapping{0, ~0ull, 0, name, ""}; }

}  // namespace

Symbolizer::Symbolizer(std::string proc_root, Kallsyms kallsyms)
    : Symbolizer(std::move(proc_root), std::make_shared<const Kallsyms>(std::move(kallsyms))) {}

Symbolizer::Symbolizer(std::string proc_root, std::shared_ptr<const Kallsyms> kallsyms, ElfCache* elf_cache)
    : proc_root_(std::move(proc_root)),
      kallsyms_(kallsyms ? std::move(kallsyms) : std::make_shared<const Kallsyms>()),
      elf_cache_(elf_cache) {}

std::shared_ptr<const elf::ElfFile> ElfCache::Find(const std::string& identity) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(identity);
  if (it == files_.end()) return nullptr;
  it->second.used = ++clock_;
  return it->second.file;
}

void ElfCache::Put(const std::string& identity, std::shared_ptr<const elf::ElfFile> file) {
  if (file == nullptr || max_files_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.size() >= max_files_ && files_.count(identity) == 0) {
    auto oldest = std::min_element(files_.begin(), files_.end(),
                                   [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    files_.erase(oldest);
  }
  files_[identity] = Entry{std::move(file), ++clock_};
}

size_t ElfCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.size();
}

bool Symbolizer::LoadProcessMaps(uint32_t pid) {
  auto text = ReadFileToString(proc_root_ + "/" + std::to_string(pid) + "/maps");
  if (!text.ok()) return Knows(pid);
  auto maps = ParseProcMaps(*text);
  if (!maps.ok()) return Knows(pid);
  processes_[pid].mappings = std::move(maps).value();
  MappingsChanged();
  return true;
}

void Symbolizer::AddMapping(uint32_t pid, const ProcMapping& m) {
  MappingsChanged();
  auto& maps = processes_[pid].mappings;
  // Drop what the new mapping overlaps (mmap over an old range replaces it), then insert.
  std::erase_if(maps, [&](const ProcMapping& old) { return old.start < m.end && m.start < old.end; });
  maps.insert(
      std::upper_bound(maps.begin(), maps.end(), m.start, [](uint64_t a, const ProcMapping& x) { return a < x.start; }),
      m);
}

void Symbolizer::SetMappings(uint32_t pid, std::vector<ProcMapping> mappings) {
  MappingsChanged();
  processes_[pid].mappings = std::move(mappings);
}

void Symbolizer::ForgetProcess(uint32_t pid) {
  MappingsChanged();
  processes_.erase(pid);
}

const elf::ElfFile* Symbolizer::ElfFor(uint32_t pid, const ProcMapping& m) {
  if (m.inode == 0 || m.path.empty() || m.path[0] != '/') return nullptr;
  const std::string identity = m.Identity();
  auto it = elf_by_identity_.find(identity);
  if (it == elf_by_identity_.end()) {
    // Through the process's root: a container's /usr/bin/app is not the host's. A file deleted
    // or replaced since ("PATH (deleted)") is still reachable as long as the process maps it,
    // through /proc/PID/map_files/START-END.
    char range[64];
    std::snprintf(range, sizeof(range), "%lx-%lx", static_cast<unsigned long>(m.start),
                  static_cast<unsigned long>(m.end));
    const std::string base = proc_root_ + "/" + std::to_string(pid);
    // The shared cache's key: the identity plus the file's size and modification time, so that
    // an inode number reused by another file (tmpfs, overlay, a redeployed container) is not
    // taken for the old one. No stat, no sharing.
    std::string shared_key;
    if (elf_cache_ != nullptr) {
      struct stat fst {};
      const std::string mapped = base + "/map_files/" + range;
      if (::stat(mapped.c_str(), &fst) == 0 || ::stat((base + "/root" + m.path).c_str(), &fst) == 0 ||
          (::stat(m.path.c_str(), &fst) == 0 && fst.st_ino == m.inode)) {
        shared_key = identity + ":" + std::to_string(fst.st_size) + ":" + std::to_string(fst.st_mtim.tv_sec) + "." +
                     std::to_string(fst.st_mtim.tv_nsec);
      }
    }
    std::shared_ptr<const elf::ElfFile> file = shared_key.empty() ? nullptr : elf_cache_->Find(shared_key);
    if (file != nullptr) return elf_by_identity_.emplace(identity, std::move(file)).first->second.get();
    for (const std::string& path : {base + "/map_files/" + range, base + "/root" + m.path}) {
      auto opened = elf::ElfFile::Open(path);
      if (opened.ok()) {
        file = std::make_shared<const elf::ElfFile>(std::move(opened).value());
        break;
      }
    }
    // The process is gone (its mappings learnt from records): the path in our own root, if it
    // is still that file (a file replaced since is another inode). Only the inode is compared:
    // through overlayfs (container roots, the matrix guests' root) stat reports an overlay or
    // per-layer device while the mapping names the underlying file system's.
    struct stat st {};
    if (file == nullptr && ::stat(m.path.c_str(), &st) == 0 && st.st_ino == m.inode) {
      auto opened = elf::ElfFile::Open(m.path);
      if (opened.ok()) file = std::make_shared<const elf::ElfFile>(std::move(opened).value());
    }
    if (!shared_key.empty()) elf_cache_->Put(shared_key, file);
    it = elf_by_identity_.emplace(identity, std::move(file)).first;
  }
  return it->second.get();
}

void Symbolizer::UseBuilder(PprofBuilder* builder) {
  if (builder->instance() == builder_) return;
  builder_ = builder->instance();
  mapping_ids_.clear();
  pseudo_ids_.clear();
}

uint64_t Symbolizer::PseudoMappingId(const std::string& name, PprofBuilder* builder) {
  auto it = pseudo_ids_.find(name);
  if (it == pseudo_ids_.end()) it = pseudo_ids_.emplace(name, builder->AddMapping(Pseudo(name))).first;
  return it->second;
}

const Symbolizer::MappingIds& Symbolizer::MappingFor(uint32_t pid, const ProcMapping& m, PprofBuilder* builder) {
  auto [it, inserted] = mapping_ids_.emplace(&m, MappingIds{});
  if (inserted) {
    // Anonymous executable memory (JIT code) has no file to read.
    it->second.elf = m.inode == 0 ? nullptr : ElfFor(pid, m);
    it->second.id = builder->AddMapping(
        ProfileMapping{m.start, m.end, m.offset, m.path, it->second.elf != nullptr ? it->second.elf->build_id() : ""});
  }
  return it->second;
}

void Symbolizer::AppendUser(uint32_t pid, std::span<const uint64_t> ips, PprofBuilder* builder,
                            std::vector<ProfileFrame>* out) {
  UseBuilder(builder);
  if (!Knows(pid)) LoadProcessMaps(pid);
  auto proc = processes_.find(pid);
  for (size_t i = 0; i < ips.size(); ++i) {
    const uint64_t ip = ips[i];
    const uint64_t lookup = i == 0 ? ip : ip - 1;  // a return address: name the call before it
    ++stats_.frames;
    const ProcMapping* m = proc != processes_.end() ? MappingAt(proc->second.mappings, lookup) : nullptr;
    if (m == nullptr) {
      ++stats_.unknown_mapping;
      out->push_back(ProfileFrame{ip, PseudoMappingId("[unknown]", builder), ""});
      continue;
    }
    const MappingIds& ids = MappingFor(pid, *m, builder);
    // Named once per (mapping, address): a frame the builder has is that location.
    if (auto known = builder->FindLocation(ids.id, ip)) {
      if (!known->named) ++stats_.unsymbolized;
      out->push_back(ProfileFrame{ip, ids.id, "", known->id});
      continue;
    }
    ProfileFrame frame{ip, ids.id, ""};
    if (m->inode == 0) {  // anonymous executable memory: JIT code, named by the perf map if any
      Process& p = proc->second;
      if (!p.perf_map) {
        auto text =
            ReadFileToString(proc_root_ + "/" + std::to_string(pid) + "/root/tmp/perf-" + std::to_string(pid) + ".map");
        p.perf_map = PerfMap::Parse(text.ok() ? *text : "");
      }
      if (const PerfMap::Entry* e = p.perf_map->Lookup(lookup)) frame.function = e->name;
    } else if (ids.elf != nullptr) {
      auto address = elf::AddressForFileOffset(ids.elf->segments(), m->FileOffset(lookup));
      if (address.ok()) {
        if (const elf::Symbol* s = ids.elf->SymbolAt(*address)) frame.function = s->name;
      }
    }
    if (frame.function.empty()) ++stats_.unsymbolized;
    out->push_back(std::move(frame));
  }
}

void Symbolizer::AppendKernel(std::span<const uint64_t> ips, PprofBuilder* builder, std::vector<ProfileFrame>* out) {
  UseBuilder(builder);
  const uint64_t kernel = PseudoMappingId("[kernel.kallsyms]", builder);
  for (size_t i = 0; i < ips.size(); ++i) {
    ++stats_.frames;
    if (auto known = builder->FindLocation(kernel, ips[i])) {
      if (!known->named) {
        ++stats_.unsymbolized;
        ++stats_.kernel_unsymbolized;
      }
      out->push_back(ProfileFrame{ips[i], kernel, "", known->id});
      continue;
    }
    const Kallsyms::Hit hit = kallsyms_->Lookup(i == 0 ? ips[i] : ips[i] - 1);
    ProfileFrame frame{ips[i], kernel, ""};
    if (hit.symbol != nullptr) {
      frame.function =
          hit.symbol->module.empty() ? hit.symbol->name : hit.symbol->name + " [" + hit.symbol->module + "]";
    } else {
      ++stats_.unsymbolized;
      ++stats_.kernel_unsymbolized;
      if (kernel_misses_.size() < 1024) kernel_misses_.insert(ips[i]);
    }
    out->push_back(std::move(frame));
  }
}

}  // namespace tpe
