// Finds the separate debug information of a binary whose own file lacks it (stripped of .symtab,
// or built without -g), in the order gdb, perf and elfutils look (gdb's "Debugging Information in
// Separate Files"; elfutils libdwfl/find-debuginfo.c):
//   1. /usr/lib/debug/.build-id/xx/yyyy.debug by the binary's GNU build id (Debian's -dbgsym);
//   2. .gnu_debuglink's name beside the binary, in its .debug/, and under /usr/lib/debug/ + the
//      binary's directory, accepted only with the CRC-32 the link names;
//   3. .gnu_debugdata (MiniDebugInfo): an xz-compressed ELF (a .symtab) inside the binary,
//      decompressed with liblzma (bounded) into a memfd;
//   4. a debuginfod server (debuginfod.h), by build id, never waiting on the network here.
// Paths are looked up in the process's own root (/proc/PID/root: a container's files) and then
// in the daemon's. Every candidate is an untrusted file (common/untrusted_file.h: regular, bounded,
// no FIFO), read within elf::ElfLimits, and refused when its build id is not the binary's
// (sources 1 and 4 need it; 2 and 3 when both files have one). Each source's outcome is counted
// (DebugInfoCounts), one count per source tried.
//
// Thread-safety: a free function; safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "elf/elf_file.h"
#include "symbols/debug_counts.h"
#include "symbols/debuginfod.h"
#include "symbols/dwarf_info.h"

namespace tpe::symbols {

struct DebugLookupOptions {
  std::string host_root = "/";               // the daemon's root (tests: a directory made as a fake root)
  std::string debug_dir = "/usr/lib/debug";  // gdb's debug-file-directory, in each root
  uint64_t max_compressed_debugdata_bytes = uint64_t{16} << 20;  // .gnu_debugdata larger: refused
  uint64_t max_debugdata_bytes = uint64_t{256} << 20;            // decompressed larger: refused
  elf::ElfLimits limits;
};

// The binary whose debug file is looked for.
struct BinaryRef {
  const elf::ElfFile* elf = nullptr;  // its build id, .gnu_debuglink, .gnu_debugdata (not owned)
  int fd = -1;                        // the binary, open (.gnu_debugdata is read from it)
  std::string path;                   // as its process named it (the debuglink directories)
  std::string process_root;           // "/proc/PID/root", or "" (only the daemon's root)
};

struct DebugFile {
  DebugSource source = DebugSource::kBuildIdDir;
  std::string display;                      // where it was found
  std::shared_ptr<const elf::ElfFile> elf;  // its symbols (never null)
  std::shared_ptr<const DwarfInfo> dwarf;   // its DWARF; null when it has none
};

struct DebugLookup {
  std::optional<DebugFile> file;  // nullopt: none found (yet)
  // A debuginfod fetch for it is in progress: look again later (do not keep "none" for good).
  bool pending = false;
};

// Looks for `binary`'s debug file. `debuginfod` and `counts` may be null.
DebugLookup FindDebugFile(const BinaryRef& binary, const DebugLookupOptions& options, DebuginfodClient* debuginfod,
                          DebugInfoCounts* counts);

// The CRC-32 (ISO-HDLC, zlib's crc32: what .gnu_debuglink holds) of the file open as `fd`, read
// with pread(2) to at most `max_bytes`. Errors: Internal on a read error, InvalidArgument past max_bytes.
StatusOr<uint32_t> FileCrc32(int fd, uint64_t max_bytes);

// The ELF inside `compressed` (.gnu_debugdata: an .xz stream), decompressed into a sealed memfd.
// Errors: InvalidArgument (not xz, corrupt, larger than `max_bytes`), Internal (memfd).
StatusOr<ScopedFd> DecompressXzToMemfd(std::string_view compressed, uint64_t max_bytes, const std::string& display);

}  // namespace tpe::symbols
