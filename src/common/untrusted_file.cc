#include "common/untrusted_file.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace tpe {
namespace {

constexpr int kPathFlags = O_PATH | O_CLOEXEC;

std::string Describe(const struct stat& st) {
  switch (st.st_mode & S_IFMT) {
    case S_IFIFO:
      return "a FIFO";
    case S_IFDIR:
      return "a directory";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "not a regular file";
  }
}

Status Refuse(FileRefusal reason, FileRefusal* out, Status status) {
  if (out != nullptr) *out = reason;
  return status;
}

// openat2(2) through syscall(2): glibc 2.36 has no wrapper. -1 with errno (ENOSYS before 5.6).
int Openat2(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
#ifdef SYS_openat2
  struct open_how how {};
  how.flags = flags;
  how.resolve = resolve;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
#else
  (void)dirfd, (void)path, (void)flags, (void)resolve;
  errno = ENOSYS;
  return -1;
#endif
}

// The components of `relative`, without empty ones and "."; false when one is "..".
bool SplitComponents(const std::string& relative, std::vector<std::string>* out) {
  size_t i = 0;
  while (i <= relative.size()) {
    size_t slash = relative.find('/', i);
    if (slash == std::string::npos) slash = relative.size();
    std::string c = relative.substr(i, slash - i);
    if (c == "..") return false;
    if (!c.empty() && c != ".") out->push_back(std::move(c));
    i = slash + 1;
  }
  return true;
}

// The O_PATH fd of `relative` below `root_fd` when no component may be a symlink, by walking
// the components (kernels without openat2). -1 with errno; ELOOP for a symlink.
int WalkNoSymlinks(int root_fd, const std::vector<std::string>& components) {
  ScopedFd dir(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return -1;
  for (size_t i = 0; i < components.size(); ++i) {
    ScopedFd next(::openat(dir.get(), components[i].c_str(), kPathFlags | O_NOFOLLOW));
    if (!next.valid()) return -1;
    struct stat st;
    if (::fstat(next.get(), &st) != 0) return -1;
    if (S_ISLNK(st.st_mode)) {
      errno = ELOOP;
      return -1;
    }
    if (i + 1 < components.size() && !S_ISDIR(st.st_mode)) {
      errno = ENOTDIR;
      return -1;
    }
    dir = std::move(next);
  }
  return ::fcntl(dir.get(), F_DUPFD_CLOEXEC, 0);
}

// Checks the O_PATH fd `path_fd` and reopens it for reading.
StatusOr<UntrustedFile> CheckAndReopen(ScopedFd path_fd, const UntrustedFileOptions& options,
                                       const std::string& display, FileRefusal* refusal) {
  struct stat st;
  if (::fstat(path_fd.get(), &st) != 0) return ErrnoStatus(errno, "fstat " + display);
  if (S_ISLNK(st.st_mode)) {  // O_PATH | O_NOFOLLOW on a symlink opens the link itself
    return Refuse(FileRefusal::kSymlink, refusal,
                  PermissionDenied(display + " is a symbolic link; it is not followed (a file the daemon reads as "
                                             "root must be a regular file at that path)"));
  }
  if (S_ISFIFO(st.st_mode)) {
    return Refuse(FileRefusal::kFifo, refusal,
                  InvalidArgument(display + " is a FIFO, not a regular file; it is not read"));
  }
  if (!S_ISREG(st.st_mode)) {
    return Refuse(FileRefusal::kNotRegular, refusal,
                  InvalidArgument(display + " is " + Describe(st) + ", not a regular file; it is not read"));
  }
  if (!options.owners.empty() &&
      std::find(options.owners.begin(), options.owners.end(), st.st_uid) == options.owners.end()) {
    std::string allowed;
    for (uid_t u : options.owners) allowed += (allowed.empty() ? "" : ", ") + std::to_string(u);
    return Refuse(FileRefusal::kOwner, refusal,
                  PermissionDenied(display + " is owned by uid " + std::to_string(st.st_uid) +
                                   "; only a file owned by uid " + allowed + " is read"));
  }
  auto too_large = [&](uint64_t size) {
    return Refuse(FileRefusal::kTooLarge, refusal,
                  InvalidArgument(display + " has " + std::to_string(size) + " bytes, more than the " +
                                  std::to_string(options.max_bytes) + " bytes read from such a file"));
  };
  if (static_cast<uint64_t>(st.st_size) > options.max_bytes) return too_large(static_cast<uint64_t>(st.st_size));
  // A regular file now and forever (an inode's type never changes): reopening it cannot block
  // or open a device. O_NONBLOCK still, in case a file system's regular file honours it.
  const std::string self = "/proc/self/fd/" + std::to_string(path_fd.get());
  ScopedFd fd(::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return ErrnoStatus(errno, "cannot open " + display + " (through " + self + ")");
  UntrustedFile out;
  if (::fstat(fd.get(), &out.st) != 0) return ErrnoStatus(errno, "fstat " + display);
  if (out.st.st_dev != st.st_dev || out.st.st_ino != st.st_ino) {
    return Internal(display + ": reopened through " + self + " as another file (is /proc mounted?)");
  }
  if (static_cast<uint64_t>(out.st.st_size) > options.max_bytes) {
    return too_large(static_cast<uint64_t>(out.st.st_size));
  }
  out.fd = std::move(fd);
  return out;
}

Status OpenError(int err, const std::string& display, const UntrustedFileOptions& options, FileRefusal* refusal) {
  if (err == ELOOP && options.symlinks != UntrustedFileOptions::Symlinks::kFollow) {
    return Refuse(FileRefusal::kSymlink, refusal,
                  PermissionDenied(display + ": a component of the path is a symbolic link; none is followed (a "
                                             "file the daemon reads as root must be reached without one)"));
  }
  return ErrnoStatus(err, "cannot open " + display);
}

}  // namespace

const char* FileRefusalName(FileRefusal reason) {
  switch (reason) {
    case FileRefusal::kNone:
      return "";
    case FileRefusal::kFifo:
      return "fifo";
    case FileRefusal::kNotRegular:
      return "not_regular";
    case FileRefusal::kSymlink:
      return "symlink";
    case FileRefusal::kTooLarge:
      return "too_large";
    case FileRefusal::kOwner:
      return "owner";
  }
  return "";
}

StatusOr<UntrustedFile> OpenUntrustedInRoot(int root_fd, const std::string& relative,
                                            const UntrustedFileOptions& options, const std::string& display,
                                            FileRefusal* refusal) {
  if (refusal != nullptr) *refusal = FileRefusal::kNone;
  std::vector<std::string> components;
  if (!SplitComponents(relative, &components)) {
    return InvalidArgument(display + ": \"..\" is not allowed in a path below a root (\"" + relative + "\")");
  }
  std::string joined;
  for (const std::string& c : components) joined += (joined.empty() ? "" : "/") + c;
  if (joined.empty()) joined = ".";
  using Symlinks = UntrustedFileOptions::Symlinks;
  const int flags = kPathFlags | (options.symlinks == Symlinks::kRefuseLast ? O_NOFOLLOW : 0);
  const uint64_t resolve = RESOLVE_IN_ROOT | (options.symlinks == Symlinks::kRefuseAny ? RESOLVE_NO_SYMLINKS : 0);
  int fd = -1;
  errno = ENOSYS;
  if (!options.force_no_openat2) {
    // EAGAIN: a rename raced the RESOLVE_IN_ROOT lookup; the kernel asks for a retry.
    for (int attempt = 0; attempt < 4; ++attempt) {
      fd = Openat2(root_fd, joined.c_str(), static_cast<uint64_t>(flags), resolve);
      if (fd >= 0 || errno != EAGAIN) break;
    }
  }
  // ENOSYS: before Linux 5.6; EPERM: a seccomp filter that does not know openat2 (some
  // container runtimes' default profiles answer unknown syscalls so).
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
    // Without openat2 a followed absolute symlink resolves from the daemon's root, not
    // `root_fd`: only kRefuseAny (no symlink at all) keeps the lookup inside.
    fd = options.symlinks == Symlinks::kRefuseAny ? WalkNoSymlinks(root_fd, components)
                                                  : ::openat(root_fd, joined.c_str(), flags);
  }
  if (fd < 0) return OpenError(errno, display, options, refusal);
  return CheckAndReopen(ScopedFd(fd), options, display, refusal);
}

StatusOr<UntrustedFile> OpenUntrusted(const std::string& path, const UntrustedFileOptions& options,
                                      FileRefusal* refusal) {
  if (refusal != nullptr) *refusal = FileRefusal::kNone;
  if (options.symlinks == UntrustedFileOptions::Symlinks::kRefuseAny) {
    const bool absolute = !path.empty() && path[0] == '/';
    ScopedFd root(::open(absolute ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return ErrnoStatus(errno, "cannot open " + std::string(absolute ? "/" : "."));
    return OpenUntrustedInRoot(root.get(), path, options, path, refusal);
  }
  const int flags = kPathFlags | (options.symlinks == UntrustedFileOptions::Symlinks::kRefuseLast ? O_NOFOLLOW : 0);
  ScopedFd fd(::open(path.c_str(), flags));
  if (!fd.valid()) return OpenError(errno, path, options, refusal);
  return CheckAndReopen(std::move(fd), options, path, refusal);
}

StatusOr<std::string> ReadUntrusted(const UntrustedFile& file, uint64_t max_bytes, const std::string& display,
                                    FileRefusal* refusal) {
  if (refusal != nullptr) *refusal = FileRefusal::kNone;
  std::string out;
  out.reserve(static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(file.st.st_size), max_bytes)));
  char buf[65536];
  for (;;) {
    // At most max_bytes + 1: one byte past the bound is enough to know it is too large.
    const uint64_t want = std::min<uint64_t>(sizeof(buf), max_bytes + 1 - out.size());
    ssize_t n = ::pread(file.fd.get(), buf, static_cast<size_t>(want), static_cast<off_t>(out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read " + display);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return Refuse(FileRefusal::kTooLarge, refusal,
                    InvalidArgument(display + " grew past the " + std::to_string(max_bytes) +
                                    " bytes read from such a file while it was read"));
    }
  }
  return out;
}

void FileRefusalCounts::Add(FileRefusal reason, const Status& status) {
  if (reason == FileRefusal::kNone) return;
  const auto i = static_cast<size_t>(reason);
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  if (!logged_[i].exchange(true)) {
    TPE_LOG_WARN(
        "refused a {} file ({}; later {} refusals are only counted in "
        "tracepoint_exporter_profile_file_refusals_total): {}",
        source_, FileRefusalName(reason), FileRefusalName(reason), status.message());
  }
}

uint64_t FileRefusalCounts::Total() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
  return n;
}

}  // namespace tpe
