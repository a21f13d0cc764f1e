#include "daemon/privileges.h"

#include <sys/capability.h>
#include <sys/prctl.h>

#include <cerrno>
#include <string>

#include "common/file_util.h"
#include "profile/kallsyms.h"

namespace tpe {

StatusOr<size_t> ThreadCount() {
  TPE_ASSIGN_OR_RETURN(std::string status, ReadFileToString("/proc/self/status"));
  const size_t at = status.find("\nThreads:");
  if (at == std::string::npos) return Internal("/proc/self/status has no \"Threads:\" line");
  return static_cast<size_t>(std::strtoul(status.c_str() + at + 9, nullptr, 10));
}

Status DropAllCapabilities() {
  TPE_ASSIGN_OR_RETURN(size_t threads, ThreadCount());
  if (threads != 1) {
    return Internal("cannot drop capabilities with " + std::to_string(threads) +
                    " threads running: capabilities are per thread (capabilities(7)), so the others would keep "
                    "theirs; drop them before any thread starts");
  }
  // Best effort: without it (no /proc/kallsyms) kernel frames stay addresses, as they would anyway.
  (void)HoldKallsymsOpen();
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return ErrnoStatus(errno, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
  }
  cap_t caps = cap_init();  // an empty set
  if (caps == nullptr) return ErrnoStatus(errno, "cap_init");
  const int rc = cap_set_proc(caps);
  const int err = errno;
  cap_free(caps);
  if (rc != 0) return ErrnoStatus(err, "cap_set_proc(empty)");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoStatus(errno, "prctl(PR_SET_NO_NEW_PRIVS)");
  return Status::Ok();
}

}  // namespace tpe
