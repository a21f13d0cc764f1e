// Names for kernel numbers that only the running system knows, for label decodes "ksym" and
// "blkdev". This is the one file of src/decode that reads files; each reader takes its path as
// data (tests point them at tests/data/kernel_names/), and FieldExtractor receives the loaded
// objects through DecodeSources, so the extractor's Render stays a lookup in memory.
//
// KernelSymbols — proc(5) /proc/kallsyms: lines "<hex address> <type> <name>[\t[module]]".
//   Load(path) reads the file once per path per process (a successful load is cached and shared
//   by every extractor; a failed one is not, so fixing the cause and reloading works). Absolute
//   symbols (types a/A) are skipped: they are not kernel addresses. Resolve(addr) returns the
//   nearest symbol at or below addr: "name" when exact, "name+0x<off>" otherwise, and "0x<hex>"
//   below the first symbol. Errors: NotFound/PermissionDenied when unreadable; PermissionDenied
//   when every address is 0 — kernel.kptr_restrict (Documentation/admin-guide/sysctl/kernel.rst)
//   hides them from this process. Immutable after Load: thread-safe. Symbols of modules loaded
//   later are not seen until the process restarts.
//
// BlockDevNames — a kernel dev_t as block tracepoints carry it (include/linux/kdev_t.h:
//   MAJOR = dev >> 20, MINOR = dev & 0xfffff; not the user-space glibc encoding) to the disk
//   name in <dir>/M:m/uevent ("DEVNAME=nvme0n1"), <dir> = /sys/dev/block
//   (Documentation/ABI/stable/sysfs-dev, Documentation/admin-guide/devices.rst). "M:m" when
//   there is none. Results are cached (at most kMaxCached devices) and re-read when older than
//   `retry`, so a disk added later gets its name and a reused dynamic minor its new one. Thread-safe (a mutex; called
//   at scrape time, never per event).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpe {

class KernelSymbols {
 public:
  // Parses kallsyms text; `source` names it in errors.
  static StatusOr<KernelSymbols> Parse(std::string_view text, const std::string& source);
  // The process-wide shared table of the file at `path` (loaded on first use).
  static StatusOr<std::shared_ptr<const KernelSymbols>> Load(const std::string& path);

  std::string Resolve(uint64_t addr) const;
  size_t size() const { return syms_.size(); }

 private:
  struct Sym {
    uint64_t addr;
    uint32_t name_offset;  // into names_
    uint32_t name_size;
  };
  std::vector<Sym> syms_;  // sorted by addr; equal addresses keep file order
  std::string names_;
};

class BlockDevNames {
 public:
  explicit BlockDevNames(std::string dir = "/sys/dev/block",
                         std::chrono::steady_clock::duration retry = std::chrono::seconds(5))
      : dir_(std::move(dir)), retry_(retry) {}
  // The process-wide shared resolver for `dir`.
  static std::shared_ptr<BlockDevNames> Shared(const std::string& dir);

  // `dev` in the kernel's internal encoding (MAJOR = dev >> 20, MINOR = dev & 0xfffff).
  std::string Name(uint64_t dev);

  static constexpr size_t kMaxCached = 1024;

 private:
  struct Entry {
    std::string name;  // empty: not found (yet)
    std::chrono::steady_clock::time_point checked;
  };
  const std::string dir_;
  const std::chrono::steady_clock::duration retry_;
  std::mutex mu_;
  std::map<uint64_t, Entry> cache_;  // guarded by mu_
};

// Where FieldExtractor::Compile finds the files behind "ksym" and "blkdev".
struct DecodeSources {
  std::string kallsyms = "/proc/kallsyms";
  std::string sys_dev_block = "/sys/dev/block";
};

}  // namespace tpe
