// Notification of CPUs going offline and online, from the kernel's uevents (the
// NETLINK_KOBJECT_UEVENT multicast group the kernel sends "online"/"offline" actions of
// /devices/system/cpu/cpuN to; see Documentation/core-api/cpu_hotplug.rst "User Space
// Notification"). Only a hint to look at the CPUs now: the pipeline also checks them every
// second, because uevents are not delivered in every network namespace (containers).
//
// Thread-safety: one thread reads it.
#pragma once

#include <memory>

#include "common/scoped_fd.h"
#include "common/status.h"

namespace tpe {

class CpuHotplugMonitor {
 public:
  // Opens and binds the uevent socket (non-blocking, close-on-exec).
  // Errors: the socket()/bind() errno (e.g. EPERM, EPROTONOSUPPORT) as a Status.
  static StatusOr<std::unique_ptr<CpuHotplugMonitor>> Open();

  // The socket, readable when uevents are waiting (for epoll).
  int fd() const { return fd_.get(); }

  // Reads every waiting uevent; true when one of them concerns a CPU (DEVPATH under
  // /devices/system/cpu/ with ACTION online, offline, add or remove).
  bool DrainCpuEvents();

 private:
  explicit CpuHotplugMonitor(ScopedFd fd) : fd_(std::move(fd)) {}
  ScopedFd fd_;
};

// True when a raw uevent message (NUL-separated "ACTION@DEVPATH\0KEY=VALUE\0...") is a CPU's
// online/offline/add/remove. Pure.
bool IsCpuHotplugUevent(const char* msg, size_t len);

}  // namespace tpe
