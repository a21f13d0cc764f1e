#include "common/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/scoped_fd.h"

namespace tpe {

StatusOr<std::string> ReadFileToString(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "cannot open " + path);
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status WriteStringToFile(const std::string& path, const std::string& data) {
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "cannot open " + path + " for writing");
  ssize_t n = ::write(fd.get(), data.data(), data.size());
  if (n < 0) return ErrnoStatus(errno, "write to " + path);
  if (static_cast<size_t>(n) != data.size()) return Internal("short write to " + path);
  return Status::Ok();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

size_t OpenFdCount() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  size_t n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - 1;  // the directory stream itself
}

}  // namespace tpe
