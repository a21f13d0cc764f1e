#include "profile/renderer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "common/clock.h"

namespace tpe {

namespace {

// Names the frames of a render's stacks: every distinct address once, batched per mapping.
// Want* every stack first (each returns its frames' indices in the namer, appended to `refs`,
// so that the frames are looked up once per occurrence), then Resolve, then Append* (frames) or
// Append*Ids (Locations made once per distinct frame: a render's stacks share most of their
// frames) each stack with the indices Want* gave.
class FrameNamer {
 public:
  FrameNamer(Symbolizer* symbolizer, PprofBuilder* builder) : sym_(symbolizer), builder_(builder) {}

  void WantUser(std::span<const UserFrame> user, std::vector<uint32_t>* refs) {
    for (size_t i = 0; i < user.size(); ++i) {
      auto [it, inserted] = user_index_.try_emplace(Key(user[i]), static_cast<uint32_t>(user_slots_.size()));
      refs->push_back(it->second);
      if (!inserted) continue;
      auto& batch = user_batches_[user[i].file];
      user_slots_.push_back(Slot{user[i].file, batch.size()});
      // A return address is named by the call before it; a frame first met as the leaf by its own.
      batch.push_back(Symbolizer::UserAddress{user[i].offset, i != 0});
    }
  }
  void WantKernel(std::span<const uint64_t> ips, std::vector<uint32_t>* refs) {
    for (size_t i = 0; i < ips.size(); ++i) {
      auto [it, inserted] = kernel_index_.try_emplace(ips[i], static_cast<uint32_t>(kernel_batch_.size()));
      refs->push_back(it->second);
      if (inserted) kernel_batch_.push_back(Symbolizer::KernelAddress{ips[i], i != 0});
    }
  }
  void Resolve() {
    sym_->Prepare(user_batches_);
    std::unordered_map<FileId, size_t> first;  // a file's first entry in user_named_
    for (const auto& [file, batch] : user_batches_) {
      first[file] = user_named_.size();
      for (SymbolizedAddress& a : sym_->SymbolizeUser(file, batch)) user_named_.push_back(Frame(std::move(a)));
    }
    for (Slot& slot : user_slots_) slot.named = first.at(slot.file) + slot.in_batch;
    for (SymbolizedAddress& a : sym_->SymbolizeKernel(kernel_batch_)) kernel_named_.push_back(Frame(std::move(a)));
  }
  void AppendUser(std::span<const uint32_t> refs, std::vector<ProfileFrame>* out) {
    for (uint32_t r : refs) out->push_back(Counted(UserNamed(r), false).frame);
  }
  void AppendKernel(std::span<const uint32_t> refs, std::vector<ProfileFrame>* out) {
    for (uint32_t r : refs) out->push_back(Counted(kernel_named_[r], true).frame);
  }
  void AppendUserIds(std::span<const uint32_t> refs, std::vector<uint64_t>* out) {
    for (uint32_t r : refs) out->push_back(LocationId(Counted(UserNamed(r), false)));
  }
  void AppendKernelIds(std::span<const uint32_t> refs, std::vector<uint64_t>* out) {
    for (uint32_t r : refs) out->push_back(LocationId(Counted(kernel_named_[r], true)));
  }

 private:
  struct Named {
    ProfileFrame frame;
    SymbolizedAddress::Miss miss = SymbolizedAddress::Miss::kNone;
    uint64_t location_id = 0;  // the builder's Location; 0 until first asked
  };
  struct Slot {
    FileId file;
    size_t in_batch;   // index in its file's batch
    size_t named = 0;  // index in user_named_ (Resolve)
  };
  struct KeyHash {
    size_t operator()(const std::pair<FileId, uint64_t>& k) const {
      return std::hash<uint64_t>()(k.second * 0x9e3779b97f4a7c15ULL ^ k.first);
    }
  };
  static std::pair<FileId, uint64_t> Key(const UserFrame& f) { return {f.file, f.offset}; }
  Named& UserNamed(uint32_t ref) { return user_named_[user_slots_[ref].named]; }
  uint64_t LocationId(Named& n) {
    if (n.location_id == 0) n.location_id = builder_->AddLocation(n.frame);
    return n.location_id;
  }

  Named Frame(SymbolizedAddress a) {
    Named n;
    n.miss = a.miss;
    auto [it, inserted] = mapping_ids_.try_emplace(a.mapping, 0);
    if (inserted) {
      const SymbolMapping& m = sym_->mapping(a.mapping);
      it->second = builder_->AddMapping(ProfileMapping{0, m.limit, 0, m.file, m.build_id, m.key});
    }
    n.frame.address = a.address;
    n.frame.mapping_id = it->second;
    if (!a.frames.empty()) {
      const SymbolFrame& holder = a.frames.back();
      n.frame.function = holder.function;
      n.frame.file = holder.file;
      n.frame.line = holder.line;
      for (size_t i = 0; i + 1 < a.frames.size(); ++i) {
        n.frame.inlined.push_back(ProfileFrame::Inlined{a.frames[i].function, a.frames[i].file, a.frames[i].line});
      }
    }
    return n;
  }
  // Counts `n` in the symbolizer's stats (each time a stack holds it) and returns it.
  Named& Counted(Named& n, bool kernel) {
    Symbolizer::Stats& st = sym_->stats();
    ++st.frames;
    st.inlined += n.frame.inlined.size();
    if (n.miss == SymbolizedAddress::Miss::kNoSymbol) {
      ++st.unsymbolized;
      if (kernel) ++st.kernel_unsymbolized;
    } else if (n.miss == SymbolizedAddress::Miss::kUnknownMapping) {
      ++st.unknown_mapping;
    }
    return n;
  }

  Symbolizer* sym_;
  PprofBuilder* builder_;
  std::unordered_map<std::pair<FileId, uint64_t>, uint32_t, KeyHash> user_index_;  // -> user_slots_
  std::vector<Slot> user_slots_;
  std::map<FileId, std::vector<Symbolizer::UserAddress>> user_batches_;
  std::vector<Named> user_named_;                        // every file's batch in turn, as named
  std::unordered_map<uint64_t, uint32_t> kernel_index_;  // -> kernel_batch_, kernel_named_
  std::vector<Symbolizer::KernelAddress> kernel_batch_;
  std::vector<Named> kernel_named_;
  std::unordered_map<uint32_t, uint64_t> mapping_ids_;  // symbolizer's mapping -> builder's
};

}  // namespace

void AddStacks(const std::vector<StackCount>& stacks, Symbolizer* symbolizer, PprofBuilder* builder) {
  FrameNamer namer(symbolizer, builder);
  std::vector<UserFrame> unknown;
  auto user_of = [&](const StackCount& sc) -> std::span<const UserFrame> {
    if (sc.user_frames.empty() && !sc.user.empty()) {
      unknown.assign(sc.user.size(), UserFrame{});
      return unknown;
    }
    return sc.user_frames;
  };
  // Every stack's frames as the namer's indices: kernel part, then user part.
  std::vector<uint32_t> refs;
  std::vector<size_t> ends;  // per stack: where its kernel part ends in refs, where its user part ends
  ends.reserve(2 * stacks.size());
  for (const StackCount& sc : stacks) {
    namer.WantKernel(sc.kernel, &refs);
    ends.push_back(refs.size());
    namer.WantUser(user_of(sc), &refs);
    ends.push_back(refs.size());
  }
  namer.Resolve();
  std::vector<uint64_t> frames;  // Location ids, leaf first
  std::vector<std::pair<std::string, std::string>> labels;
  auto lost = [&](const char* part, const std::string& reason) {
    return builder->AddLocation(ProfileFrame{0, 0, std::string("[") + part + " stack lost: " + reason + "]"});
  };
  const std::span<const uint32_t> all(refs);
  size_t at = 0;
  for (size_t i = 0; i < stacks.size(); ++i) {
    const StackCount& sc = stacks[i];
    frames.clear();
    namer.AppendKernelIds(all.subspan(at, ends[2 * i] - at), &frames);
    if (!sc.kernel_lost.empty()) frames.push_back(lost("kernel", sc.kernel_lost));
    namer.AppendUserIds(all.subspan(ends[2 * i], ends[2 * i + 1] - ends[2 * i]), &frames);
    if (!sc.user_lost.empty()) frames.push_back(lost("user", sc.user_lost));
    at = ends[2 * i + 1];
    labels.assign(sc.labels.begin(), sc.labels.end());
    labels.emplace_back("pid", std::to_string(sc.pid));
    // pprof values are int64: a value profile's sum past INT64_MAX saturates.
    builder->AddSample(frames, labels,
                       static_cast<int64_t>(std::min<uint64_t>(sc.value, std::numeric_limits<int64_t>::max())));
  }
}

void AppendUser(Symbolizer* symbolizer, std::span<const UserFrame> user, PprofBuilder* builder,
                std::vector<ProfileFrame>* out) {
  FrameNamer namer(symbolizer, builder);
  std::vector<uint32_t> refs;
  namer.WantUser(user, &refs);
  namer.Resolve();
  namer.AppendUser(refs, out);
}

void AppendKernel(Symbolizer* symbolizer, std::span<const uint64_t> ips, PprofBuilder* builder,
                  std::vector<ProfileFrame>* out) {
  FrameNamer namer(symbolizer, builder);
  std::vector<uint32_t> refs;
  namer.WantKernel(ips, &refs);
  namer.Resolve();
  namer.AppendKernel(refs, out);
}

ProfileRenderer::ProfileRenderer(ProcessImages* images, const MappedFiles* files, Options options)
    : images_(images),
      files_(files),
      options_(std::move(options)),
      kallsyms_(options_.kallsyms_path),
      elf_files_(options_.elf_cache),
      perf_maps_(options_.proc_root) {}

void ProfileRenderer::SetDebuginfod(const symbols::DebuginfodClient::Options& options) {
  std::shared_ptr<symbols::DebuginfodClient> client;
  if (!options.urls.empty()) client = std::make_shared<symbols::DebuginfodClient>(options);
  std::lock_guard<std::mutex> lock(debuginfod_mu_);
  debuginfod_ = std::move(client);
}

ProfileRenderer::Rendered ProfileRenderer::Render(std::vector<StackCount> stacks, const std::string& value_type,
                                                  const std::string& value_unit, double scale, int64_t time_ns,
                                                  int64_t duration_ns) {
  const uint64_t now = MonotonicNs();
  // The bpf engine's user stacks are raw addresses: named with the image their process had
  // when they were counted.
  if (images_ != nullptr) {
    for (StackCount& sc : stacks) {
      if (!sc.user_frames.empty() || sc.user.empty()) continue;
      images_->NormalizeAt(sc.pid, sc.image_ns, sc.user, now, &sc.user_frames);
    }
  }
  // A value profile's sums, scaled (pprof values are integers: rounded).
  if (scale != 1) {
    for (StackCount& sc : stacks) {
      const double v = static_cast<double>(sc.value) * scale + 0.5;
      sc.value = v >= 18446744073709551615.0 ? ~0ull : static_cast<uint64_t>(v);
    }
  }
  Rendered out;
  out.builder = std::make_unique<PprofBuilder>(value_type, value_unit);
  {
    std::shared_ptr<symbols::DebuginfodClient> debuginfod;
    {
      std::lock_guard<std::mutex> lock(debuginfod_mu_);
      debuginfod = debuginfod_;
    }
    SymbolizerCaches caches{.elf = &elf_files_,
                            .perf_maps = &perf_maps_,
                            .elf_refusals = &elf_refusals_,
                            .debug = options_.debug_files ? &debug_files_ : nullptr,
                            .debug_options = &options_.debug_lookup,
                            .debuginfod = debuginfod.get(),
                            .debug_counts = &debug_counts_,
                            .debuginfod_wait = options_.debuginfod_wait,
                            .names = &names_};
    Symbolizer symbolizer(files_, kallsyms_.Get(now), caches, options_.proc_root);
    AddStacks(stacks, &symbolizer, out.builder.get());
    if (!symbolizer.kernel_misses().empty()) kallsyms_.MarkMissed(symbolizer.kernel_misses());
    out.stats = symbolizer.stats();
  }
  out.builder->SetTime(time_ns, duration_ns);
  return out;
}

}  // namespace tpe
