#include "symbols/debug_lookup.h"

#include <fcntl.h>
#include <lzma.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <vector>

#include "common/untrusted_file.h"

namespace tpe::symbols {
namespace {

// A root that paths are looked up in: its directory open, and how messages name it.
struct Root {
  ScopedFd fd;
  std::string prefix;  // "" for "/", else the root's path
};

std::vector<Root> RootsOf(const BinaryRef& binary, const DebugLookupOptions& options) {
  std::vector<Root> roots;
  for (const std::string& r : {binary.process_root, options.host_root}) {
    if (r.empty()) continue;
    ScopedFd fd(::open(r.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) continue;
    roots.push_back(Root{std::move(fd), r == "/" ? "" : r});
  }
  return roots;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

// What trying one candidate gave.
struct Tried {
  DebugResult result = DebugResult::kMissing;
  std::string why;
  std::optional<DebugFile> file;
};

// Whether `result` says more than `than` (a refusal says more than a miss).
bool Worse(DebugResult result, DebugResult than) { return than == DebugResult::kMissing && result != than; }

// Reads the ELF open as `fd` (`display`) as a debug file of `binary` from `source`.
Tried Accept(int fd, const std::string& display, DebugSource source, const BinaryRef& binary,
             const DebugLookupOptions& options, bool build_id_required) {
  Tried t;
  auto opened = elf::ElfFile::OpenDebugFd(fd, display, binary.elf->segments(), options.limits);
  if (!opened.ok()) {
    t.result = DebugResult::kInvalid;
    t.why = opened.status().message();
    return t;
  }
  auto elf = std::make_shared<const elf::ElfFile>(std::move(opened).value());
  const std::string& want = binary.elf->build_id();
  const std::string& have = elf->build_id();
  if ((build_id_required && have != want) || (!want.empty() && !have.empty() && have != want)) {
    t.result = DebugResult::kBuildIdMismatch;
    t.why = display + " has build id " + (have.empty() ? "(none)" : have) + ", not the binary's " + want + " (" +
            binary.path + ")";
    return t;
  }
  DebugFile f{source, display, elf, nullptr};
  if (elf->has_debug_info()) {
    auto dwarf = DwarfInfo::Open(fd, display);
    if (dwarf.ok()) {
      f.dwarf = std::move(dwarf).value();
    } else if (dwarf.status().code() == StatusCode::kInvalidArgument) {
      spdlog::info("profile: {}", dwarf.status().message());  // over the bound: symbols only
    }
  }
  t.result = DebugResult::kFound;
  t.file = std::move(f);
  return t;
}

// Opens `path` in each root and accepts the first that is `binary`'s debug file.
// `crc`: when set, the CRC-32 the file must have (.gnu_debuglink).
Tried TryPath(const std::vector<Root>& roots, const std::string& path, DebugSource source, const BinaryRef& binary,
              const DebugLookupOptions& options, bool build_id_required, std::optional<uint32_t> crc,
              UntrustedFileOptions::Symlinks symlinks) {
  Tried best;
  for (const Root& root : roots) {
    UntrustedFileOptions o;
    o.max_bytes = options.limits.max_file_bytes;
    o.symlinks = symlinks;
    const std::string display = root.prefix + path;
    FileRefusal refusal = FileRefusal::kNone;
    auto file = OpenUntrustedInRoot(root.fd.get(), path, o, display, &refusal);
    if (!file.ok()) {
      if (refusal != FileRefusal::kNone && Worse(DebugResult::kRefused, best.result)) {
        best.result = DebugResult::kRefused;
        best.why = file.status().message();
      }
      continue;
    }
    if (crc) {
      auto have = FileCrc32(file->fd.get(), options.limits.max_file_bytes);
      if (!have.ok() || *have != *crc) {
        if (Worse(DebugResult::kCrcMismatch, best.result)) {
          best.result = DebugResult::kCrcMismatch;
          char buf[80];
          std::snprintf(buf, sizeof(buf), "CRC-32 %08x, not the %08x .gnu_debuglink names", have.ok() ? *have : 0u,
                        *crc);
          best.why =
              display + ": " + (have.ok() ? std::string(buf) : have.status().message()) + " (" + binary.path + ")";
        }
        continue;
      }
    }
    Tried t = Accept(file->fd.get(), display, source, binary, options, build_id_required);
    if (t.result == DebugResult::kFound) return t;
    if (Worse(t.result, best.result)) best = std::move(t);
  }
  return best;
}

void Count(DebugInfoCounts* counts, DebugSource source, const Tried& t) {
  if (counts != nullptr) counts->Add(source, t.result, t.why);
}

}  // namespace

StatusOr<uint32_t> FileCrc32(int fd, uint64_t max_bytes) {
  std::vector<unsigned char> buf(1 << 16);
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t offset = 0;
  while (true) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "pread");
    }
    if (n == 0) break;
    offset += static_cast<uint64_t>(n);
    if (offset > max_bytes) return InvalidArgument("more than " + std::to_string(max_bytes) + " bytes");
    crc = crc32(crc, buf.data(), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

StatusOr<ScopedFd> DecompressXzToMemfd(std::string_view compressed, uint64_t max_bytes, const std::string& display) {
  lzma_stream z = LZMA_STREAM_INIT;
  // 64 MiB of decoder memory: xz's presets need at most 65 MiB (-9) to decode; a header asking
  // for more is refused (LZMA_MEMLIMIT_ERROR).
  if (lzma_stream_decoder(&z, uint64_t{64} << 20, 0) != LZMA_OK) return Internal("lzma_stream_decoder failed");
  std::string out;
  z.next_in = reinterpret_cast<const uint8_t*>(compressed.data());
  z.avail_in = compressed.size();
  lzma_ret rc = LZMA_OK;
  while (rc == LZMA_OK) {
    if (out.size() >= max_bytes) break;
    const size_t at = out.size();
    out.resize(std::min<uint64_t>(max_bytes, at + (uint64_t{1} << 20)));
    z.next_out = reinterpret_cast<uint8_t*>(out.data() + at);
    z.avail_out = out.size() - at;
    rc = lzma_code(&z, LZMA_FINISH);
    out.resize(out.size() - z.avail_out);
  }
  lzma_end(&z);
  if (rc != LZMA_STREAM_END) {
    if (rc == LZMA_OK) {
      return InvalidArgument(display + ": .gnu_debugdata decompresses to more than " + std::to_string(max_bytes) +
                             " bytes");
    }
    return InvalidArgument(display + ": .gnu_debugdata is no valid xz stream (liblzma error " +
                           std::to_string(static_cast<int>(rc)) + ")");
  }
  ScopedFd fd(::memfd_create("tpe-debugdata", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoStatus(errno, "memfd_create");
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(fd.get(), out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write memfd");
    }
    done += static_cast<size_t>(n);
  }
  ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  return fd;
}

DebugLookup FindDebugFile(const BinaryRef& binary, const DebugLookupOptions& options, DebuginfodClient* debuginfod,
                          DebugInfoCounts* counts) {
  DebugLookup out;
  if (binary.elf == nullptr) return out;
  const std::vector<Root> roots = RootsOf(binary, options);
  const std::string& build_id = binary.elf->build_id();
  // 1. The build-id directory.
  if (build_id.size() > 2) {
    const std::string path =
        options.debug_dir + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug";
    Tried t = TryPath(roots, path, DebugSource::kBuildIdDir, binary, options, true, std::nullopt,
                      UntrustedFileOptions::Symlinks::kFollow);
    Count(counts, DebugSource::kBuildIdDir, t);
    if (t.file) {
      out.file = std::move(t.file);
      return out;
    }
  }
  // 2. .gnu_debuglink, CRC checked.
  if (const auto& link = binary.elf->debuglink(); !link.name.empty() && !binary.path.empty()) {
    Tried best;
    if (link.name.find('/') != std::string::npos || link.name == "." || link.name == "..") {
      best.result = DebugResult::kInvalid;
      best.why = binary.path + ": .gnu_debuglink names \"" + link.name + "\", not a file name";
    } else {
      const std::string dir = DirOf(binary.path);
      const std::string base = dir == "/" ? "" : dir;
      for (const std::string& path :
           {base + "/" + link.name, base + "/.debug/" + link.name, options.debug_dir + base + "/" + link.name}) {
        // Beside the binary the directory may be a user's: no symlink followed there.
        const auto symlinks = path.starts_with(options.debug_dir + "/") ? UntrustedFileOptions::Symlinks::kFollow
                                                                        : UntrustedFileOptions::Symlinks::kRefuseLast;
        Tried t = TryPath(roots, path, DebugSource::kDebugLink, binary, options, false, link.crc, symlinks);
        if (t.file) {
          best = std::move(t);
          break;
        }
        if (Worse(t.result, best.result)) best = std::move(t);
      }
    }
    Count(counts, DebugSource::kDebugLink, best);
    if (best.file) {
      out.file = std::move(best.file);
      return out;
    }
  }
  // 3. .gnu_debugdata (MiniDebugInfo).
  if (const auto& extent = binary.elf->debugdata(); extent.size > 0 && binary.fd >= 0) {
    Tried t;
    const std::string display = binary.path + "[.gnu_debugdata]";
    if (extent.size > options.max_compressed_debugdata_bytes) {
      t.result = DebugResult::kInvalid;
      t.why = display + ": " + std::to_string(extent.size) + " bytes, more than " +
              std::to_string(options.max_compressed_debugdata_bytes);
    } else {
      std::string compressed(extent.size, '\0');
      const ssize_t n = ::pread(binary.fd, compressed.data(), compressed.size(), static_cast<off_t>(extent.offset));
      auto memfd = n == static_cast<ssize_t>(compressed.size())
                       ? DecompressXzToMemfd(compressed, options.max_debugdata_bytes, display)
                       : StatusOr<ScopedFd>(InvalidArgument(display + ": cut short"));
      if (!memfd.ok()) {
        t.result = DebugResult::kInvalid;
        t.why = memfd.status().message();
      } else {
        t = Accept(memfd->get(), display, DebugSource::kDebugData, binary, options, false);
      }
    }
    Count(counts, DebugSource::kDebugData, t);
    if (t.file) {
      out.file = std::move(t.file);
      return out;
    }
  }
  // 4. debuginfod.
  if (debuginfod != nullptr && debuginfod->enabled() && !build_id.empty()) {
    const DebuginfodClient::Answer a = debuginfod->Find(build_id);
    Tried t;
    switch (a.state) {
      case DebuginfodClient::State::kPending:
        t.result = DebugResult::kPending;
        out.pending = true;
        break;
      case DebuginfodClient::State::kMissing:
        t.result = DebugResult::kMissing;
        break;
      case DebuginfodClient::State::kFailed:
        t.result = DebugResult::kFailed;
        t.why = "build id " + build_id + " (" + binary.path + "): " + a.error;
        break;
      case DebuginfodClient::State::kFound: {
        UntrustedFileOptions o;
        o.max_bytes = options.limits.max_file_bytes;
        o.symlinks = UntrustedFileOptions::Symlinks::kRefuseLast;
        FileRefusal refusal = FileRefusal::kNone;
        auto file = OpenUntrusted(a.path, o, &refusal);
        if (!file.ok()) {
          t.result = refusal != FileRefusal::kNone ? DebugResult::kRefused : DebugResult::kFailed;
          t.why = file.status().message();
        } else {
          t = Accept(file->fd.get(), a.path, DebugSource::kDebuginfod, binary, options, true);
        }
        if (!t.file) debuginfod->Reject(build_id, t.why);
        break;
      }
    }
    Count(counts, DebugSource::kDebuginfod, t);
    if (t.file) out.file = std::move(t.file);
  }
  return out;
}

}  // namespace tpe::symbols
