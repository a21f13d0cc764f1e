#include "perf/cpu_hotplug.h"

#include <linux/netlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace tpe {

bool IsCpuHotplugUevent(const char* msg, size_t len) {
  std::string_view all(msg, len);
  // The first string is "ACTION@DEVPATH".
  std::string_view head = all.substr(0, all.find('\0'));
  size_t at = head.find('@');
  if (at == std::string_view::npos) return false;
  std::string_view action = head.substr(0, at);
  std::string_view devpath = head.substr(at + 1);
  if (action != "online" && action != "offline" && action != "add" && action != "remove") return false;
  return devpath.starts_with("/devices/system/cpu/cpu");
}

StatusOr<std::unique_ptr<CpuHotplugMonitor>> CpuHotplugMonitor::Open() {
  ScopedFd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT));
  if (!fd.valid()) return ErrnoStatus(errno, "socket(NETLINK_KOBJECT_UEVENT)");
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = 1;  // the kernel's uevent multicast group
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoStatus(errno, "bind(NETLINK_KOBJECT_UEVENT)");
  }
  return std::unique_ptr<CpuHotplugMonitor>(new CpuHotplugMonitor(std::move(fd)));
}

bool CpuHotplugMonitor::DrainCpuEvents() {
  bool cpu = false;
  char buf[8192];
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;  // EAGAIN: drained (ENOBUFS after an overflow: the periodic check covers it)
    cpu |= IsCpuHotplugUevent(buf, static_cast<size_t>(n));
  }
  return cpu;
}

}  // namespace tpe
