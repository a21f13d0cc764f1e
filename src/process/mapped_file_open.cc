#include "process/mapped_file_open.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace tpe {
namespace {

// Opens `f` one way: `how` 0 through map_files, 1 in the process's root, 2 by path here.
StatusOr<UntrustedFile> OpenOneWay(const MappedFile& f, const std::string& proc_root, uint64_t max_bytes, int how,
                                   std::string* display, FileRefusal* refusal) {
  const std::string base = proc_root + "/" + std::to_string(f.pid);
  UntrustedFileOptions o;
  o.max_bytes = max_bytes;
  o.symlinks = UntrustedFileOptions::Symlinks::kRefuseAny;
  if (how == 0) {
    // A magic link to the very file the process maps (followed: it is no user's symlink).
    char range[64];
    std::snprintf(range, sizeof(range), "/map_files/%lx-%lx", static_cast<unsigned long>(f.map_start),
                  static_cast<unsigned long>(f.map_end));
    *display = base + range;
    o.symlinks = UntrustedFileOptions::Symlinks::kFollow;
    return OpenUntrusted(*display, o, refusal);
  }
  if (how == 1) {
    *display = base + "/root" + f.path;
    ScopedFd root(::open((base + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return ErrnoStatus(errno, "open " + base + "/root");
    return OpenUntrustedInRoot(root.get(), f.path, o, *display, refusal);
  }
  *display = f.path;
  return OpenUntrusted(f.path, o, refusal);
}

}  // namespace

StatusOr<UntrustedFile> OpenMappedFile(const MappedFile& f, const std::string& proc_root, uint64_t max_bytes,
                                       FileRefusalCounts* refusals, std::string* display, bool* changed) {
  if (changed != nullptr) *changed = false;
  if (f.kind != MappedFile::Kind::kFile || f.path.empty() || f.path[0] != '/') {
    return NotFound("\"" + f.path + "\" is no file on a file system");
  }
  for (int how = f.pid == 0 ? 2 : 0; how < 3; ++how) {
    FileRefusal refusal = FileRefusal::kNone;
    auto file = OpenOneWay(f, proc_root, max_bytes, how, display, &refusal);
    if (!file.ok()) {
      if (refusal != FileRefusal::kNone && refusals != nullptr) refusals->Add(refusal, file.status());
      continue;
    }
    const struct stat& st = file->st;
    const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_ino != f.inode ||
        (f.stat_known && (static_cast<uint64_t>(st.st_size) != f.size || mtime_ns != f.mtime_ns))) {
      if (changed != nullptr) *changed = true;
      continue;
    }
    return file;
  }
  return NotFound(f.path + ": no longer the file that was mapped (gone, replaced or overwritten since)");
}

}  // namespace tpe
