#include "daemon/privileges.h"

#include <sys/capability.h>
#include <sys/prctl.h>

#include <cerrno>

namespace tpe {

Status DropAllCapabilities() {
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
