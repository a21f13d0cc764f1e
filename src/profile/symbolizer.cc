#include "profile/symbolizer.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "process/mapped_file_open.h"

namespace tpe {
namespace {

// The end of a mapping whose size is not known: the top of the user address space (so no
// mapping bound looks like a kernel address either).
constexpr uint64_t kNoLimit = 0x800000000000;

const symbols::DebugLookupOptions& DefaultDebugOptions() {
  static const symbols::DebugLookupOptions options;
  return options;
}

}  // namespace

Symbolizer::Symbolizer(const MappedFiles* files, std::shared_ptr<const Kallsyms> kallsyms, Caches caches,
                       std::string proc_root)
    : files_(files),
      kallsyms_(kallsyms ? std::move(kallsyms) : std::make_shared<const Kallsyms>()),
      caches_(caches),
      proc_root_(std::move(proc_root)) {}

uint32_t Symbolizer::AddMapping(SymbolMapping m) {
  mappings_.push_back(std::move(m));
  return static_cast<uint32_t>(mappings_.size() - 1);
}

uint32_t Symbolizer::PseudoMapping(const std::string& name) {
  auto it = pseudo_.find(name);
  if (it == pseudo_.end()) it = pseudo_.emplace(name, AddMapping(SymbolMapping{name, "", kNoLimit, 0})).first;
  return it->second;
}

void Symbolizer::FindDebug(FileId id, FileState* state, int fd) {
  if (caches_.debug == nullptr || state->elf == nullptr) return;
  const elf::ElfFile& elf = *state->elf;
  // A build id names the file's contents, whichever process or path maps it (and a debug file is
  // accepted only with that build id); a file without one is its own.
  const std::string key = elf.build_id().empty() ? "file:" + std::to_string(id) : "build_id:" + elf.build_id();
  if (auto cached = caches_.debug->Find(key)) {
    state->debug = std::move(cached);
    return;
  }
  // A file with its own .symtab and DWARF needs nothing else.
  if (elf.has_symtab() && !elf.has_debug_info() && elf.build_id().empty() && elf.debuglink().name.empty() &&
      elf.debugdata().size == 0) {
    return;
  }
  UntrustedFile opened;
  if (fd < 0) {
    std::string display;
    auto file =
        OpenMappedFile(*state->file, proc_root_, elf::ElfLimits().max_file_bytes, caches_.elf_refusals, &display);
    if (!file.ok()) return;
    opened = std::move(file).value();
    fd = opened.fd.get();
  }
  auto entry = std::make_shared<symbols::DebugEntry>();
  if (elf.has_debug_info()) {
    auto dwarf = symbols::DwarfInfo::Open(fd, elf.path());
    if (dwarf.ok()) {
      entry->dwarf = std::move(dwarf).value();
    } else if (dwarf.status().code() == StatusCode::kInvalidArgument) {
      spdlog::info("profile: {}", dwarf.status().message());  // over the bound: symbols only
    }
  }
  if (!elf.has_symtab() || entry->dwarf == nullptr) {
    const MappedFile& f = *state->file;
    symbols::BinaryRef binary{&elf, fd, f.path, f.pid != 0 ? proc_root_ + "/" + std::to_string(f.pid) + "/root" : ""};
    const symbols::DebugLookup found = symbols::FindDebugFile(
        binary, caches_.debug_options != nullptr ? *caches_.debug_options : DefaultDebugOptions(), caches_.debuginfod,
        caches_.debug_counts);
    if (found.file) {
      entry->source = found.file->source;
      entry->display = found.file->display;
      entry->names = found.file->elf;
      if (entry->dwarf == nullptr) entry->dwarf = found.file->dwarf;
    } else if (found.pending) {
      state->debug_pending = true;
      state->debug = std::move(entry);  // this render names without it; a later one looks again
      return;
    }
  }
  state->debug_pending = false;
  state->debug = entry;
  caches_.debug->Put(key, std::move(entry));
}

Symbolizer::FileState& Symbolizer::StateFor(FileId id) {
  auto [it, inserted] = states_.try_emplace(id);
  FileState& st = it->second;
  if (!inserted) return st;
  st.file = files_ != nullptr && id != kNoFile ? files_->Get(id) : std::nullopt;
  if (!st.file) {
    st.mapping = PseudoMapping("[unknown]");
    return st;
  }
  const MappedFile& f = *st.file;
  SymbolMapping m{f.path, "", kNoLimit, id};
  switch (f.kind) {
    case MappedFile::Kind::kFile: {
      const std::string key = std::to_string(id);
      if (caches_.elf != nullptr) st.elf = caches_.elf->Find(key);
      UntrustedFile opened;
      if (st.elf == nullptr) {
        std::string display;
        auto file = OpenMappedFile(f, proc_root_, elf::ElfLimits().max_file_bytes, caches_.elf_refusals, &display);
        if (file.ok()) {
          opened = std::move(file).value();
          auto elf = elf::ElfFile::OpenFd(opened.fd.get(), display);
          if (elf.ok()) {
            st.elf = std::make_shared<const elf::ElfFile>(std::move(elf).value());
            if (caches_.elf != nullptr) caches_.elf->Put(key, st.elf);
          }
        }
      }
      if (st.elf == nullptr) ++stats_.file_changed;
      if (f.stat_known && f.size != 0) m.limit = f.size;
      if (st.elf != nullptr) {
        m.build_id = st.elf->build_id();
        FindDebug(id, &st, opened.fd.valid() ? opened.fd.get() : -1);
      }
      break;
    }
    case MappedFile::Kind::kAnonymous:
      m.file = "[jit pid " + std::to_string(f.pid) + "]";
      break;
    case MappedFile::Kind::kPseudo:
      break;
  }
  auto known = file_mappings_.find(id);  // names kept came first: one mapping for the file
  st.mapping = known != file_mappings_.end() ? known->second : AddMapping(std::move(m));
  file_mappings_.emplace(id, st.mapping);
  return st;
}

uint32_t Symbolizer::MappingOfKept(FileId id, const SymbolMapping& m) {
  auto [it, inserted] = file_mappings_.try_emplace(id, 0);
  if (inserted) it->second = AddMapping(m);
  return it->second;
}

void Symbolizer::Keep(FileId id, FileState& st, const UserAddress& ua, const SymbolizedAddress& a) {
  if (caches_.names == nullptr || a.miss == SymbolizedAddress::Miss::kUnknownMapping || !st.file ||
      st.file->kind != MappedFile::Kind::kFile || st.elf == nullptr || st.debug_pending) {
    return;
  }
  if (st.kept_mapping == nullptr) st.kept_mapping = std::make_shared<const SymbolMapping>(mappings_[st.mapping]);
  caches_.names->Put(NameCache::Key{id, ua.offset, ua.return_address},
                     NameCache::Name{st.kept_mapping, std::make_shared<const std::vector<SymbolFrame>>(a.frames),
                                     a.miss == SymbolizedAddress::Miss::kNoSymbol});
}

std::vector<NameCache::Key> Symbolizer::KeysOf(FileId id, std::span<const UserAddress> addresses) {
  std::vector<NameCache::Key> keys;
  keys.reserve(addresses.size());
  for (const UserAddress& a : addresses) keys.push_back(NameCache::Key{id, a.offset, a.return_address});
  return keys;
}

void Symbolizer::Prepare(const std::map<FileId, std::vector<UserAddress>>& batches) {
  std::vector<FileId> files;
  for (const auto& [id, addresses] : batches) {
    if (caches_.names != nullptr && id != kNoFile &&
        caches_.names->CountKept(KeysOf(id, addresses)) == addresses.size()) {
      continue;  // every address named before: the file need not be read
    }
    files.push_back(id);
  }
  std::vector<std::string> pending;
  for (FileId id : files) {
    FileState& st = StateFor(id);
    if (st.debug_pending) pending.push_back(st.elf->build_id());
  }
  if (pending.empty() || caches_.debuginfod == nullptr || caches_.debuginfod_wait.count() <= 0) return;
  caches_.debuginfod->WaitFor(pending, std::chrono::steady_clock::now() + caches_.debuginfod_wait);
  for (FileId id : files) {
    FileState& st = StateFor(id);
    if (st.debug_pending) FindDebug(id, &st, -1);
  }
}

SymbolizedAddress Symbolizer::NameUser(FileState& st, const UserAddress& a) {
  SymbolizedAddress out{a.offset, st.mapping, {}, SymbolizedAddress::Miss::kNone};
  const uint64_t lookup = a.return_address && a.offset != 0 ? a.offset - 1 : a.offset;
  if (st.file->kind == MappedFile::Kind::kAnonymous) {  // JIT code, named by the perf map if any
    if (!st.perf_map_read) {
      st.perf_map_read = true;
      if (caches_.perf_maps != nullptr) st.perf_map = caches_.perf_maps->Get(st.file->pid);
    }
    if (st.perf_map != nullptr) {
      if (const PerfMap::Entry* e = st.perf_map->Lookup(lookup))
        out.frames.push_back(SymbolFrame{e->name, "", 0, false});
    }
  } else if (st.elf != nullptr) {
    auto address = elf::AddressForFileOffset(st.elf->segments(), lookup);
    if (address.ok()) {
      const symbols::DebugEntry* debug = st.debug.get();
      const elf::Symbol* s = nullptr;
      // The file's own .symtab first; a debug file's symbols where it has none.
      if (!st.elf->has_symtab() && debug != nullptr && debug->names != nullptr) s = debug->names->SymbolAt(*address);
      if (s == nullptr) s = st.elf->SymbolAt(*address);
      std::vector<symbols::DwarfInfo::Line> lines;
      if (debug != nullptr && debug->dwarf != nullptr) lines = debug->dwarf->Lookup(*address);
      for (size_t i = 0; i + 1 < lines.size(); ++i) {
        out.frames.push_back(SymbolFrame{lines[i].function, lines[i].file, lines[i].line, true});
      }
      if (s != nullptr || !lines.empty()) {
        SymbolFrame holder{s != nullptr ? s->name : lines.back().function, "", 0, false};
        if (!lines.empty()) {
          holder.file = lines.back().file;
          holder.line = lines.back().line;
        }
        if (holder.function.empty())
          out.frames.clear();
        else
          out.frames.push_back(std::move(holder));
      }
    }
  }
  if (out.frames.empty()) out.miss = SymbolizedAddress::Miss::kNoSymbol;
  return out;
}

std::vector<SymbolizedAddress> Symbolizer::SymbolizeUser(FileId file, std::span<const UserAddress> addresses) {
  std::vector<SymbolizedAddress> out;
  out.reserve(addresses.size());
  std::vector<NameCache::Name> kept;
  if (caches_.names != nullptr && file != kNoFile) caches_.names->Find(KeysOf(file, addresses), &kept);
  FileState* st = nullptr;  // read at the first address not kept
  for (size_t i = 0; i < addresses.size(); ++i) {
    const UserAddress& a = addresses[i];
    if (i < kept.size() && kept[i].mapping != nullptr) {
      out.push_back(
          SymbolizedAddress{a.offset, MappingOfKept(file, *kept[i].mapping), *kept[i].frames,
                            kept[i].no_symbol ? SymbolizedAddress::Miss::kNoSymbol : SymbolizedAddress::Miss::kNone});
      continue;
    }
    if (st == nullptr) st = &StateFor(file);
    if (!st->file) {  // no mapping, or an id the table never handed out: nothing is known of it
      out.push_back(SymbolizedAddress{
          0, st->mapping, {SymbolFrame{"[unknown]", "", 0, false}}, SymbolizedAddress::Miss::kUnknownMapping});
      continue;
    }
    out.push_back(NameUser(*st, a));
    Keep(file, *st, a, out.back());
  }
  return out;
}

std::vector<SymbolizedAddress> Symbolizer::SymbolizeKernel(std::span<const KernelAddress> addresses) {
  std::vector<SymbolizedAddress> out;
  out.reserve(addresses.size());
  for (const KernelAddress& a : addresses) {
    const Kallsyms::Hit hit = kallsyms_->Lookup(a.return_address ? a.ip - 1 : a.ip);
    if (hit.symbol == nullptr) {
      // No symbol holds it (or kallsyms is hidden): its address is all there is, and no absolute
      // kernel address leaves the host. One "[unknown]" frame in the kernel's mapping.
      if (kernel_misses_.size() < 1024) kernel_misses_.insert(a.ip);
      out.push_back(SymbolizedAddress{0,
                                      PseudoMapping("[kernel.kallsyms]"),
                                      {SymbolFrame{"[unknown]", "", 0, false}},
                                      SymbolizedAddress::Miss::kNoSymbol});
      continue;
    }
    const Kallsyms::Symbol& s = *hit.symbol;
    const uint32_t mapping = PseudoMapping(s.module.empty() ? "[kernel.kallsyms]" : "[" + s.module + ".ko]");
    out.push_back(
        SymbolizedAddress{a.ip - kallsyms_->base(s),
                          mapping,
                          {SymbolFrame{s.module.empty() ? s.name : s.name + " [" + s.module + "]", "", 0, false}},
                          SymbolizedAddress::Miss::kNone});
  }
  return out;
}

}  // namespace tpe
