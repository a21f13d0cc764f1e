#include "decode/kernel_names.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "common/file_util.h"

namespace tpe {

StatusOr<KernelSymbols> KernelSymbols::Parse(std::string_view text, const std::string& source) {
  KernelSymbols out;
  bool any_nonzero = false;
  size_t lines = 0;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    // "ffffffff815be070 t vmstat_update" or "ffffffffc0a01000 t foo\t[module]"
    size_t sp1 = line.find(' ');
    if (sp1 == std::string_view::npos || sp1 + 3 > line.size() || line[sp1 + 2] != ' ') continue;
    uint64_t addr = 0;
    auto [p, ec] = std::from_chars(line.data(), line.data() + sp1, addr, 16);
    if (ec != std::errc() || p != line.data() + sp1) continue;
    ++lines;
    char type = line[sp1 + 1];
    std::string_view name = line.substr(sp1 + 3);
    name = name.substr(0, name.find_first_of("\t "));
    if (addr != 0) any_nonzero = true;
    if (type == 'a' || type == 'A' || name.empty()) continue;
    out.syms_.push_back({addr, static_cast<uint32_t>(out.names_.size()), static_cast<uint32_t>(name.size())});
    out.names_.append(name);
  }
  if (lines == 0) return InvalidArgument(source + " has no symbols (expected lines \"<hex address> <type> <name>\")");
  if (!any_nonzero) {
    return PermissionDenied(source +
                            " lists every kernel symbol address as 0: kernel.kptr_restrict hides them from this "
                            "process (kptr_restrict=1 shows them only to processes with CAP_SYSLOG, 2 to none). "
                            "Run as root or with CAP_SYSLOG and set `sysctl kernel.kptr_restrict=1` (or 0), or "
                            "use decode \"hex\" for this label");
  }
  std::stable_sort(out.syms_.begin(), out.syms_.end(), [](const Sym& a, const Sym& b) { return a.addr < b.addr; });
  return out;
}

StatusOr<std::shared_ptr<const KernelSymbols>> KernelSymbols::Load(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const KernelSymbols>> loaded;  // guarded by mu
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(path);
  if (it != loaded.end()) return it->second;
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto syms = Parse(*text, path);
  if (!syms.ok()) return syms.status();
  auto shared = std::make_shared<const KernelSymbols>(std::move(*syms));
  loaded.emplace(path, shared);
  return shared;
}

std::string KernelSymbols::Resolve(uint64_t addr) const {
  char buf[32];
  auto it = std::upper_bound(syms_.begin(), syms_.end(), addr, [](uint64_t a, const Sym& s) { return a < s.addr; });
  if (it == syms_.begin()) {
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(addr));
    return buf;
  }
  // The first of the symbols sharing the nearest lower address (file order: _stext before _text).
  uint64_t base = std::prev(it)->addr;
  auto first = std::lower_bound(syms_.begin(), it, base, [](const Sym& s, uint64_t a) { return s.addr < a; });
  std::string out = names_.substr(first->name_offset, first->name_size);
  if (addr != base) {
    std::snprintf(buf, sizeof(buf), "+0x%llx", static_cast<unsigned long long>(addr - base));
    out += buf;
  }
  return out;
}

std::shared_ptr<BlockDevNames> BlockDevNames::Shared(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<BlockDevNames>> shared;  // guarded by mu
  std::lock_guard<std::mutex> lock(mu);
  auto& p = shared[dir];
  if (p == nullptr) p = std::make_shared<BlockDevNames>(dir);
  return p;
}

std::string BlockDevNames::Name(uint64_t dev) {
  const std::string mm = std::to_string((dev >> 20) & 0xfff) + ":" + std::to_string(dev & 0xfffff);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(dev);
  if (it != cache_.end() && now - it->second.checked < retry_) {
    return it->second.name.empty() ? mm : it->second.name;
  }
  if (cache_.size() >= kMaxCached) cache_.clear();  // not dev_t values after all: stay small
  Entry e{"", now};
  auto text = ReadFileToString(dir_ + "/" + mm + "/uevent");
  if (text.ok()) {
    std::string_view t = *text;
    for (size_t pos = 0; pos < t.size();) {
      size_t eol = t.find('\n', pos);
      std::string_view line = t.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
      if (line.starts_with("DEVNAME=")) {
        e.name = std::string(line.substr(8));
        break;
      }
      if (eol == std::string_view::npos) break;
      pos = eol + 1;
    }
  }
  cache_[dev] = e;
  return e.name.empty() ? mm : e.name;
}

}  // namespace tpe
