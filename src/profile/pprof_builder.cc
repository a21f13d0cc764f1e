#include "profile/pprof_builder.h"

#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <tuple>

namespace tpe {

namespace {
std::atomic<uint64_t> next_instance{1};
}  // namespace

PprofBuilder::PprofBuilder(const std::string& value_type, const std::string& value_unit)
    : instance_(next_instance.fetch_add(1, std::memory_order_relaxed)),
      arena_(std::make_unique<google::protobuf::Arena>()),
      profile_(google::protobuf::Arena::CreateMessage<perftools::profiles::Profile>(arena_.get())) {
  Str("");  // string_table[0] must be ""
  auto* st = profile_->add_sample_type();
  st->set_type(Str(value_type));
  st->set_unit(Str(value_unit));
  // One sample stands for one of its unit (Go's goroutine profile does the same): servers that
  // weigh samples by the period (Parca's graphs and merged views) would count 0 without it.
  profile_->mutable_period_type()->set_type(Str(value_type));
  profile_->mutable_period_type()->set_unit(Str(value_unit));
  profile_->set_period(1);
}

int64_t PprofBuilder::Str(const std::string& s) {
  auto [it, inserted] = strings_.emplace(s, static_cast<int64_t>(profile_->string_table_size()));
  if (inserted) profile_->add_string_table(s);
  return it->second;
}

uint64_t PprofBuilder::AddMapping(const ProfileMapping& m) {
  auto key = std::make_tuple(m.start, m.limit, m.file_offset, m.file, m.build_id, m.key);
  auto it = mappings_.find(key);
  if (it != mappings_.end()) return it->second;
  auto* pm = profile_->add_mapping();
  const uint64_t id = static_cast<uint64_t>(profile_->mapping_size());
  pm->set_id(id);
  pm->set_memory_start(m.start);
  pm->set_memory_limit(m.limit);
  pm->set_file_offset(m.file_offset);
  pm->set_filename(Str(m.file));
  pm->set_build_id(Str(m.build_id));
  pm->set_has_functions(true);
  mappings_.emplace(std::move(key), id);
  return id;
}

std::optional<PprofBuilder::KnownLocation> PprofBuilder::FindLocation(uint64_t mapping_id, uint64_t address) const {
  auto it = locations_.find({mapping_id, address});
  if (it == locations_.end()) return std::nullopt;
  return it->second;
}

uint64_t PprofBuilder::LocationOf(const ProfileFrame& f) {
  if (f.location_id != 0) return f.location_id;
  uint64_t* id = nullptr;
  if (f.address != 0) {
    auto [it, inserted] = locations_.emplace(std::make_pair(f.mapping_id, f.address), KnownLocation{});
    if (!inserted) return it->second.id;
    it->second.named = !f.function.empty();
    id = &it->second.id;
  } else {
    // A frame without an address (a lost stack's reason) is told apart by its name.
    auto [it, inserted] = named_frames_.emplace(std::make_pair(f.mapping_id, f.function), 0);
    if (!inserted) return it->second;
    id = &it->second;
  }
  auto* loc = profile_->add_location();
  *id = static_cast<uint64_t>(profile_->location_size());
  loc->set_id(*id);
  loc->set_mapping_id(f.mapping_id);
  loc->set_address(f.address);
  if (!f.function.empty()) {
    for (const ProfileFrame::Inlined& in : f.inlined) {
      auto* line = loc->add_line();
      line->set_function_id(FunctionId(in.function, in.file));
      line->set_line(in.line);
    }
    auto* line = loc->add_line();
    line->set_function_id(FunctionId(f.function, f.file));
    line->set_line(f.line);
  }
  return *id;
}

uint64_t PprofBuilder::FunctionId(const std::string& name, const std::string& file) {
  auto [it, inserted] = functions_.emplace(std::make_pair(name, file), 0);
  if (inserted) {
    auto* fn = profile_->add_function();
    it->second = static_cast<uint64_t>(profile_->function_size());
    fn->set_id(it->second);
    fn->set_name(Str(name));
    fn->set_system_name(Str(name));
    fn->set_filename(Str(file));
  }
  return it->second;
}

void PprofBuilder::AddSample(std::span<const ProfileFrame> leaf_first,
                             std::span<const std::pair<std::string, std::string>> labels, int64_t value) {
  auto* s = profile_->add_sample();
  s->mutable_location_id()->Reserve(static_cast<int>(leaf_first.size()));
  for (const ProfileFrame& f : leaf_first) s->add_location_id(LocationOf(f));
  AddValueAndLabels(s, labels, value);
}

void PprofBuilder::AddSample(std::span<const uint64_t> leaf_first_location_ids,
                             std::span<const std::pair<std::string, std::string>> labels, int64_t value) {
  auto* s = profile_->add_sample();
  s->mutable_location_id()->Add(leaf_first_location_ids.begin(), leaf_first_location_ids.end());
  AddValueAndLabels(s, labels, value);
}

void PprofBuilder::AddValueAndLabels(perftools::profiles::Sample* s,
                                     std::span<const std::pair<std::string, std::string>> labels, int64_t value) {
  s->add_value(value);
  for (const auto& [k, v] : labels) {
    auto* l = s->add_label();
    l->set_key(Str(k));
    l->set_str(Str(v));
  }
}

void PprofBuilder::SetTime(int64_t time_ns, int64_t duration_ns) {
  profile_->set_time_nanos(time_ns);
  profile_->set_duration_nanos(duration_ns);
}

StatusOr<std::string> PprofBuilder::Gzipped() const {
  std::string raw;
  if (!profile_->SerializeToString(&raw)) return Internal("pprof: the profile did not serialize");
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's. Level 1 (Z_BEST_SPEED), as
  // Go's runtime/pprof writes profiles: a continuous profile is compressed at every scrape.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Internal("pprof: zlib deflateInit2 failed");
  }
  std::string out(deflateBound(&z, raw.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  const size_t written = z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return Internal("pprof: zlib deflate did not finish (" + std::to_string(rc) + ")");
  out.resize(written);
  return out;
}

namespace {

std::string Sanitized(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    if (c == ';' || c == ' ' || c == '\n') c = '_';
  }
  return s;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::map<uint64_t, LocationName> NameLocations(const perftools::profiles::Profile& p) {
  auto str = [&](int64_t i) -> std::string {
    return i >= 0 && i < p.string_table_size() ? p.string_table(static_cast<int>(i)) : std::string();
  };
  std::map<uint64_t, const perftools::profiles::Function*> functions;
  for (const auto& f : p.function()) functions[f.id()] = &f;
  std::map<uint64_t, const perftools::profiles::Mapping*> mappings;
  for (const auto& m : p.mapping()) mappings[m.id()] = &m;
  std::map<uint64_t, LocationName> out;
  for (const auto& loc : p.location()) {
    LocationName& n = out[loc.id()];
    for (int i = loc.line_size() - 1; i >= 0; --i) {  // the holder, then what was inlined into it
      auto fit = functions.find(loc.line(i).function_id());
      const std::string name = fit != functions.end() ? str(fit->second->name()) : std::string();
      if (i == loc.line_size() - 1) {
        n.name = name;
      } else if (!name.empty()) {
        n.inlined.push_back(name);
      }
    }
    auto mit = mappings.find(loc.mapping_id());
    if (mit != mappings.end()) {
      const auto& m = *mit->second;
      const std::string file = str(m.filename());
      if (file == "[kernel.kallsyms]" || (file.starts_with("[") && file.ends_with(".ko]"))) {
        n.kind = FrameKind::kKernel;
      } else if (file == "[unknown]") {
        n.kind = FrameKind::kUnknown;
      } else if (file.starts_with("/") || file == "[vdso]" || file == "[vsyscall]") {
        n.kind = FrameKind::kUser;
      } else {
        n.kind = FrameKind::kJit;
      }
      if (n.name.empty()) n.name = file + "+" + Hex(loc.address() - m.memory_start() + m.file_offset());
    } else if (n.name.empty()) {
      n.name = Hex(loc.address());
    }
  }
  return out;
}

std::string FoldedStacks(const perftools::profiles::Profile& p) {
  std::map<uint64_t, std::string> frame_names;  // location id -> folded name(s), root first
  for (const auto& [id, n] : NameLocations(p)) {
    std::string& f = frame_names[id];
    f = Sanitized(n.name);
    for (const std::string& in : n.inlined) f += ";" + Sanitized(in);
  }
  std::map<std::string, int64_t> folded;
  for (const auto& s : p.sample()) {
    std::string line;
    for (int i = s.location_id_size() - 1; i >= 0; --i) {  // root first
      auto it = frame_names.find(s.location_id(i));
      if (!line.empty()) line += ';';
      line += it != frame_names.end() ? it->second : Hex(s.location_id(i));
    }
    if (line.empty()) line = "[no frames]";
    folded[line] += s.value_size() > 0 ? s.value(0) : 0;
  }
  std::string out;
  for (const auto& [stack, v] : folded) out += stack + " " + std::to_string(v) + "\n";
  return out;
}

}  // namespace tpe
