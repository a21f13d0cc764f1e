#include "profile/symbolizer.h"

#include <algorithm>

#include "process/mapped_file_open.h"

namespace tpe {
namespace {

// The end of a mapping whose size is not known: the top of the user address space (so no
// mapping bound looks like a kernel address either).
constexpr uint64_t kNoLimit = 0x800000000000;

// A mapping that is no file: "[unknown]", "[kernel.kallsyms]", a module; addresses in it are
// offsets (from its base).
ProfileMapping Pseudo(const std::string& name) { return ProfileMapping{0, kNoLimit, 0, name, ""}; }

}  // namespace

Symbolizer::Symbolizer(const MappedFiles* files, std::shared_ptr<const Kallsyms> kallsyms, Caches caches,
                       std::string proc_root)
    : files_(files),
      kallsyms_(kallsyms ? std::move(kallsyms) : std::make_shared<const Kallsyms>()),
      caches_(caches),
      proc_root_(std::move(proc_root)) {}

std::shared_ptr<const elf::ElfFile> Symbolizer::OpenElf(FileId id, const MappedFile& f) {
  if (f.kind != MappedFile::Kind::kFile) return nullptr;
  const std::string key = std::to_string(id);
  if (caches_.elf != nullptr) {
    if (auto cached = caches_.elf->Find(key)) return cached;
  }
  std::string display;
  auto file = OpenMappedFile(f, proc_root_, elf::ElfLimits().max_file_bytes, caches_.elf_refusals, &display);
  if (!file.ok()) return nullptr;
  auto opened = elf::ElfFile::OpenFd(file->fd.get(), display);
  if (!opened.ok()) return nullptr;
  auto elf = std::make_shared<const elf::ElfFile>(std::move(opened).value());
  if (caches_.elf != nullptr) caches_.elf->Put(key, elf);
  return elf;
}

void Symbolizer::UseBuilder(PprofBuilder* builder) {
  if (builder->instance() == builder_) return;
  builder_ = builder->instance();
  mappings_.clear();
  pseudo_ids_.clear();
}

uint64_t Symbolizer::PseudoMappingId(const std::string& name, PprofBuilder* builder) {
  auto it = pseudo_ids_.find(name);
  if (it == pseudo_ids_.end()) it = pseudo_ids_.emplace(name, builder->AddMapping(Pseudo(name))).first;
  return it->second;
}

Symbolizer::MappingIds& Symbolizer::MappingFor(FileId id, PprofBuilder* builder) {
  auto [it, inserted] = mappings_.try_emplace(id);
  MappingIds& ids = it->second;
  if (!inserted) return ids;
  ids.file = files_ != nullptr ? files_->Get(id) : std::nullopt;
  if (!ids.file) {
    ids.id = PseudoMappingId("[unknown]", builder);
    return ids;
  }
  const MappedFile& f = *ids.file;
  ProfileMapping m{0, kNoLimit, 0, f.path, ""};
  m.key = id;
  switch (f.kind) {
    case MappedFile::Kind::kFile:
      ids.elf = OpenElf(id, f);
      if (ids.elf == nullptr) ++stats_.file_changed;
      if (f.stat_known && f.size != 0) m.limit = f.size;
      if (ids.elf != nullptr) m.build_id = ids.elf->build_id();
      break;
    case MappedFile::Kind::kAnonymous:
      m.file = "[jit pid " + std::to_string(f.pid) + "]";
      break;
    case MappedFile::Kind::kPseudo:
      break;
  }
  ids.id = builder->AddMapping(m);
  return ids;
}

void Symbolizer::AppendUser(std::span<const UserFrame> user, PprofBuilder* builder, std::vector<ProfileFrame>* out) {
  UseBuilder(builder);
  for (size_t i = 0; i < user.size(); ++i) {
    ++stats_.frames;
    const UserFrame& uf = user[i];
    if (uf.file == kNoFile) {
      ++stats_.unknown_mapping;
      out->push_back(ProfileFrame{0, PseudoMappingId("[unknown]", builder), "[unknown]"});
      continue;
    }
    MappingIds& ids = MappingFor(uf.file, builder);
    if (!ids.file) {  // an id the table never handed out: nothing is known of it
      ++stats_.unknown_mapping;
      out->push_back(ProfileFrame{0, ids.id, "[unknown]"});
      continue;
    }
    // Named once per (mapping, offset): a frame the builder has is that location.
    if (auto known = builder->FindLocation(ids.id, uf.offset)) {
      if (!known->named) ++stats_.unsymbolized;
      out->push_back(ProfileFrame{uf.offset, ids.id, "", known->id});
      continue;
    }
    // A return address is named by the call before it.
    const uint64_t lookup = i == 0 || uf.offset == 0 ? uf.offset : uf.offset - 1;
    ProfileFrame frame{uf.offset, ids.id, ""};
    if (ids.file->kind == MappedFile::Kind::kAnonymous) {  // JIT code, named by the perf map if any
      if (!ids.perf_map_read) {
        ids.perf_map_read = true;
        if (caches_.perf_maps != nullptr) ids.perf_map = caches_.perf_maps->Get(ids.file->pid);
      }
      if (ids.perf_map != nullptr) {
        if (const PerfMap::Entry* e = ids.perf_map->Lookup(lookup)) frame.function = e->name;
      }
    } else if (ids.elf != nullptr) {
      auto address = elf::AddressForFileOffset(ids.elf->segments(), lookup);
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
  for (size_t i = 0; i < ips.size(); ++i) {
    ++stats_.frames;
    const Kallsyms::Hit hit = kallsyms_->Lookup(i == 0 ? ips[i] : ips[i] - 1);
    if (hit.symbol == nullptr) {
      // No symbol holds it (or kallsyms is hidden): its address is all there is, and no absolute
      // kernel address leaves the host. One "[unknown]" frame in the kernel's mapping.
      ++stats_.unsymbolized;
      ++stats_.kernel_unsymbolized;
      if (kernel_misses_.size() < 1024) kernel_misses_.insert(ips[i]);
      out->push_back(ProfileFrame{0, PseudoMappingId("[kernel.kallsyms]", builder), "[unknown]"});
      continue;
    }
    const Kallsyms::Symbol& s = *hit.symbol;
    const uint64_t mapping = PseudoMappingId(s.module.empty() ? "[kernel.kallsyms]" : "[" + s.module + ".ko]", builder);
    const uint64_t offset = ips[i] - kallsyms_->base(s);
    if (auto known = builder->FindLocation(mapping, offset)) {
      out->push_back(ProfileFrame{offset, mapping, "", known->id});
      continue;
    }
    out->push_back(ProfileFrame{offset, mapping, s.module.empty() ? s.name : s.name + " [" + s.module + "]"});
  }
}

}  // namespace tpe
