#include "exporter/listen_address.h"

#include <gtest/gtest.h>

namespace tpe {
namespace {

TEST(ListenAddressTest, Parses) {
  auto a = ParseListenAddress(":9478");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "");
  EXPECT_EQ(a->port, 9478);
  a = ParseListenAddress("127.0.0.1:0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 0);
  a = ParseListenAddress("[::1]:65535");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 65535);
  a = ParseListenAddress("localhost:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "localhost");
}

TEST(ListenAddressTest, RejectsMalformed) {
  for (const char* bad : {"9478", "", ":", "host:", ":65536", ":99999999", ":-1", ":9x", "::1:9478", "[::1]9478",
                          "[::1]", "[::1:9478", "[]:9478", "a]:9478"}) {
    auto a = ParseListenAddress(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(a.status().message().find(std::string("--web.listen-address=") + bad + " "), std::string::npos)
        << a.status().message();
  }
  EXPECT_NE(ParseListenAddress("::1:9478").status().message().find("write [::1]:9478"), std::string::npos);
}

TEST(ListenAddressTest, ListensOnAFreePort) {
  auto fd = ListenTcp({"127.0.0.1", 0}, "127.0.0.1:0");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  const int port = BoundPort(fd->get());
  EXPECT_GT(port, 0);
  // The same port again: in use, and the message says so with the errno text.
  auto again = ListenTcp({"127.0.0.1", port}, "127.0.0.1:" + std::to_string(port));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("cannot listen on 127.0.0.1:" + std::to_string(port) +
                                          " (bind: Address already in use); is the port already in use?"),
            std::string::npos)
      << again.status().message();
}

TEST(ListenAddressTest, Ipv6Loopback) {
  auto fd = ListenTcp({"::1", 0}, "[::1]:0");
  if (!fd.ok() && fd.status().message().find("Cannot assign requested address") != std::string::npos) {
    GTEST_SKIP() << "no IPv6 loopback here: " << fd.status().message();
  }
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_GT(BoundPort(fd->get()), 0);
}

TEST(ListenAddressTest, UnresolvableHostSaysSo) {
  // A name glibc rejects without asking a DNS server.
  auto fd = ListenTcp({"no such host", 9478}, "no such host:9478");
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fd.status().message().find("cannot resolve host \"no such host\": "), std::string::npos)
      << fd.status().message();
  EXPECT_EQ(fd.status().message().find("in use"), std::string::npos);
}

TEST(ListenAddressTest, NonLocalAddressSaysSo) {
  auto fd = ListenTcp({"192.0.2.1", 0}, "192.0.2.1:0");  // TEST-NET-1, not on this machine
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fd.status().message().find("Cannot assign requested address"), std::string::npos) << fd.status().message();
}

}  // namespace
}  // namespace tpe
