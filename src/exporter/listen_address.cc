#include "exporter/listen_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tpe {
namespace {

Status Malformed(const std::string& flag_value, const std::string& why) {
  return InvalidArgument("--web.listen-address=" + flag_value + " " + why +
                         " (expected [HOST]:PORT, e.g. :9478, 127.0.0.1:9478, [::1]:9478)");
}

std::string AddressText(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
  port = ntohs(in6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

// socket + bind + listen; on failure returns -1 with errno set and `*step` naming the call.
int BindAndListen(const sockaddr* sa, socklen_t len, bool dual_stack, const char** step) {
  *step = "socket";
  int fd = ::socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // rebinding over TIME_WAIT only
  if (sa->sa_family == AF_INET6) {
    const int v6only = dual_stack ? 0 : 1;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
  }
  *step = "bind";
  if (::bind(fd, sa, len) == 0) {
    *step = "listen";
    if (::listen(fd, SOMAXCONN) == 0) return fd;
  }
  const int err = errno;
  ::close(fd);
  errno = err;
  return -1;
}

Status BindError(const std::string& flag_value, const std::string& where, const char* step, int err) {
  const std::string what = "--web.listen-address=" + flag_value + ": cannot listen on " + where + " (" + step + ": " +
                           std::strerror(err) + ")";
  switch (err) {
    case EADDRINUSE:
      return Unavailable(what + "; is the port already in use? choose another with --web.listen-address");
    case EADDRNOTAVAIL:
      return InvalidArgument(what + "; the host is not an address of this machine");
    case EACCES:
    case EPERM:
      return PermissionDenied(what + "; ports below 1024 need CAP_NET_BIND_SERVICE");
    default:
      return Internal(what);
  }
}

}  // namespace

StatusOr<ListenAddress> ParseListenAddress(const std::string& flag_value) {
  ListenAddress out;
  std::string port;
  if (!flag_value.empty() && flag_value[0] == '[') {
    const size_t close = flag_value.find(']');
    if (close == std::string::npos) return Malformed(flag_value, "has no closing bracket");
    out.host = flag_value.substr(1, close - 1);
    if (out.host.empty()) return Malformed(flag_value, "has an empty [HOST]");
    if (close + 1 >= flag_value.size() || flag_value[close + 1] != ':') {
      return Malformed(flag_value, "has no :PORT after the bracketed host");
    }
    port = flag_value.substr(close + 2);
  } else {
    const size_t colon = flag_value.rfind(':');
    if (colon == std::string::npos) return Malformed(flag_value, "has no :PORT");
    out.host = flag_value.substr(0, colon);
    port = flag_value.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      return Malformed(flag_value, "has an IPv6 address without brackets, write [" + out.host + "]:" + port);
    }
    if (out.host.find_first_of("[]") != std::string::npos) return Malformed(flag_value, "has a stray bracket");
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535) {
    return Malformed(flag_value, "has port \"" + port + "\", not a number 0-65535");
  }
  out.port = std::stoi(port);
  return out;
}

StatusOr<ScopedFd> ListenTcp(const ListenAddress& address, const std::string& flag_value) {
  const char* step = "";
  if (address.host.empty()) {
    // Every interface: one dual-stack IPv6 socket, or IPv4 only where IPv6 is disabled.
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(static_cast<uint16_t>(address.port));
    int fd = BindAndListen(reinterpret_cast<sockaddr*>(&any6), sizeof(any6), true, &step);
    if (fd >= 0) return ScopedFd(fd);
    if (errno != EAFNOSUPPORT && errno != EADDRNOTAVAIL) {
      return BindError(flag_value, "[::]:" + std::to_string(address.port) + " (every interface)", step, errno);
    }
    sockaddr_in any4{};
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    any4.sin_port = htons(static_cast<uint16_t>(address.port));
    fd = BindAndListen(reinterpret_cast<sockaddr*>(&any4), sizeof(any4), false, &step);
    if (fd >= 0) return ScopedFd(fd);
    return BindError(flag_value, "0.0.0.0:" + std::to_string(address.port) + " (every interface)", step, errno);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(address.port);
  const int rc = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    const std::string what = "--web.listen-address=" + flag_value + ": cannot resolve host \"" + address.host +
                             "\": " + (rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc));
    return rc == EAI_AGAIN ? Unavailable(what) : InvalidArgument(what);
  }
  Status first;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = BindAndListen(ai->ai_addr, ai->ai_addrlen, false, &step);
    if (fd >= 0) {
      ::freeaddrinfo(res);
      return ScopedFd(fd);
    }
    if (first.ok()) first = BindError(flag_value, AddressText(ai->ai_addr), step, errno);
  }
  ::freeaddrinfo(res);
  if (first.ok())
    first =
        InvalidArgument("--web.listen-address=" + flag_value + ": \"" + address.host + "\" resolves to no TCP address");
  return first;
}

int BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

}  // namespace tpe
