// --web.listen-address: parsing "[HOST]:PORT" and opening the listening TCP socket.
//
//   ":9478"            every interface (IPv6 dual-stack "::", or 0.0.0.0 without IPv6)
//   "127.0.0.1:9478"   an IPv4 address; "localhost:9478" a host name (resolved with getaddrinfo)
//   "[::1]:9478"       an IPv6 address (brackets required)
//   "127.0.0.1:0"      a free port chosen by the kernel (BoundPort tells which)
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>

#include "common/scoped_fd.h"
#include "common/status.h"

namespace tpe {

struct ListenAddress {
  std::string host;  // without brackets; empty = every interface
  int port = 0;      // 0-65535; 0 = any free port
};

// Errors: InvalidArgument naming `flag_value` (no colon, empty or non-numeric port, port above
// 65535, an unbracketed IPv6 address, a stray bracket).
StatusOr<ListenAddress> ParseListenAddress(const std::string& flag_value);

// Creates a non-blocking, close-on-exec TCP socket bound to `address` and listening. A host that
// resolves to several addresses is bound to the first one that works (as Go's net.Listen does).
// Errors name `flag_value`, the address tried and the errno/resolver text: InvalidArgument for
// a host that does not resolve or is not an address of this machine, Unavailable for a port in
// use (or a temporary resolver failure), PermissionDenied for a privileged port.
StatusOr<ScopedFd> ListenTcp(const ListenAddress& address, const std::string& flag_value);

// The local port of a bound socket, or -1.
int BoundPort(int fd);

}  // namespace tpe
