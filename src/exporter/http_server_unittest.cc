#include "exporter/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "common/scoped_fd.h"

namespace tpe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// bcrypt (cost 4) of "secret" with salt "abcdefghijklmnopqrstuu".
const char* kHash = "$2b$04$abcdefghijklmnopqrstuu2r9OfJnfCsdneAXAGHnS4UpFFP8WIrW";

HttpServerOptions Options() {
  HttpServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.telemetry_path = "/metrics";
  o.metrics = [] { return std::make_shared<const RenderedPage>(RenderedPage::FromText("up 1\n")); };
  o.landing = [] { return std::string("<html>landing</html>"); };
  return o;
}

ScopedFd Connect(int port) {
  ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  return fd;
}

void Send(int fd, const std::string& s) { ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }

// Reads until the server closes the connection or `limit` passes. Sets *closed.
std::string ReadAll(int fd, milliseconds limit, bool* closed = nullptr) {
  std::string out;
  const auto end = Clock::now() + limit;
  if (closed) *closed = false;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<milliseconds>(end - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The status lines ("HTTP/1.1 200 OK") in order (a pipelined response follows the previous
// body directly). (No std::regex: GCC 12
// warns inside it under -fsanitize with -Werror.)
std::vector<std::string> StatusLines(const std::string& responses) {
  std::vector<std::string> out;
  const std::string prefix = "HTTP/1.1 ";
  for (size_t pos = responses.find(prefix); pos != std::string::npos; pos = responses.find(prefix, pos + 1)) {
    const size_t end = responses.find("\r\n", pos);
    if (end == std::string::npos) break;
    std::string line = responses.substr(pos, end - pos);
    const bool code = line.size() > prefix.size() + 3 && std::isdigit(static_cast<unsigned char>(line[9])) &&
                      std::isdigit(static_cast<unsigned char>(line[10])) &&
                      std::isdigit(static_cast<unsigned char>(line[11])) && line[12] == ' ';
    if (code) out.push_back(line);
  }
  return out;
}

std::string Get(int port, const std::string& path, const std::string& extra = "") {
  ScopedFd fd = Connect(port);
  Send(fd.get(), "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra + "\r\n");
  return ReadAll(fd.get(), milliseconds(5000));
}

TEST(HttpServerTest, PathsMethodsAndPipelining) {
  auto server = HttpServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  ScopedFd fd = Connect(port);
  // Four requests in one write: answered in order; the last says Connection: close.
  Send(fd.get(),
       "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
       "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
       "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
       "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  bool closed = false;
  const std::string out = ReadAll(fd.get(), milliseconds(5000), &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(StatusLines(out), (std::vector<std::string>{"HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK",
                                                        "HTTP/1.1 404 Not Found"}))
      << out;
  const size_t first = out.find("up 1\n"), landing = out.find("<html>landing</html>");
  EXPECT_NE(first, std::string::npos);
  EXPECT_LT(first, landing);
  EXPECT_EQ(out.find("up 1\n", first + 1), std::string::npos) << "HEAD must not send the body";
  EXPECT_NE(out.find("text/plain; version=0.0.4; charset=utf-8"), std::string::npos);

  ScopedFd post = Connect(port);
  Send(post.get(), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc");
  const std::string r = ReadAll(post.get(), milliseconds(5000));
  EXPECT_EQ(r.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos) << r;
}

TEST(HttpServerTest, DeadlineClosesADrippingConnection) {
  HttpServerOptions o = Options();
  o.header_deadline = milliseconds(1000);
  auto server = HttpServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ScopedFd fd = Connect((*server)->port());
  const auto t0 = Clock::now();
  Send(fd.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  bool closed = false;
  // One header byte every 100 ms: each resets libmicrohttpd's idle timeout, not the deadline.
  for (int i = 0; i < 60 && !closed; ++i) {
    if (::send(fd.get(), "X", 1, MSG_NOSIGNAL) != 1) closed = true;
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char c;
      if (::recv(fd.get(), &c, 1, 0) <= 0) closed = true;
    }
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(closed);
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 5.0);
  EXPECT_EQ((*server)->deadline_closes(), 1u);
  EXPECT_EQ(StatusLines(Get((*server)->port(), "/metrics")), std::vector<std::string>{"HTTP/1.1 200 OK"});
}

// 8 connection slots (pressure from 6 in use); headers get 60 s, 300 ms under pressure.
HttpServerOptions PressureOptions() {
  HttpServerOptions o = Options();
  o.connection_limit = 8;
  o.threads = 1;
  o.header_deadline = milliseconds(60000);
  o.pressure_header_deadline = milliseconds(300);
  return o;
}

// `n` connections that send a request line and never the rest of their headers.
std::vector<ScopedFd> SlowClients(int port, int n) {
  std::vector<ScopedFd> slow;
  for (int i = 0; i < n; ++i) {
    slow.push_back(Connect(port));
    Send(slow.back().get(), "GET / HTTP/1.1\r\n");
  }
  return slow;
}

// Each of `fds` is closed by the server within 5 s.
void ExpectClosed(std::vector<ScopedFd>& fds) {
  for (auto& fd : fds) {
    bool closed = false;
    ReadAll(fd.get(), milliseconds(5000), &closed);
    EXPECT_TRUE(closed);
  }
}

TEST(HttpServerTest, UnderPressureHeadersGetAShortDeadline) {
  auto server = HttpServer::Start(PressureOptions());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<ScopedFd> slow = SlowClients((*server)->port(), 7);  // 7 of 8 slots: above 3/4
  const auto t0 = Clock::now();
  ExpectClosed(slow);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 4.0);
  EXPECT_GE((*server)->deadline_closes(), 7u);
  EXPECT_EQ(StatusLines(Get((*server)->port(), "/metrics")), std::vector<std::string>{"HTTP/1.1 200 OK"});
}

// A connection seen under pressure keeps the short deadline though the ones shed before it take
// the pressure away (CI under ASan: the last of 7 slow clients waited for the 60 s deadline).
TEST(HttpServerTest, AConnectionSeenUnderPressureKeepsTheShortDeadline) {
  auto server = HttpServer::Start(PressureOptions());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<ScopedFd> early = SlowClients((*server)->port(), 6);  // 6 of 8: pressure
  std::this_thread::sleep_for(milliseconds(150));
  ScopedFd late = Connect((*server)->port());  // arrives under pressure, expires after the 6 left
  Send(late.get(), "GET / HTTP/1.1\r\n");
  ExpectClosed(early);
  bool closed = false;
  ReadAll(late.get(), milliseconds(10000), &closed);
  EXPECT_TRUE(closed) << "the late connection lost its short deadline when pressure ended";
  EXPECT_EQ((*server)->deadline_closes(), 7u);
}

TEST(HttpServerTest, BasicAuth) {
  HttpServerOptions o = Options();
  o.users = {{"alice", kHash}};
  auto server = HttpServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  const std::string none = Get(port, "/metrics");
  EXPECT_EQ(StatusLines(none), std::vector<std::string>{"HTTP/1.1 401 Unauthorized"});
  EXPECT_NE(none.find("WWW-Authenticate: Basic realm=\"tracepoint_exporter\""), std::string::npos) << none;
  for (int i = 0; i < 2; ++i) {  // the second round is answered from the cache
    EXPECT_EQ(StatusLines(Get(port, "/metrics", "Authorization: Basic YWxpY2U6c2VjcmV0\r\n")),  // alice:secret
              std::vector<std::string>{"HTTP/1.1 200 OK"});
    EXPECT_EQ(StatusLines(Get(port, "/metrics", "Authorization: Basic YWxpY2U6d3Jvbmc=\r\n")),  // alice:wrong
              std::vector<std::string>{"HTTP/1.1 401 Unauthorized"});
    EXPECT_EQ(StatusLines(Get(port, "/metrics", "Authorization: Basic Ym9iOnNlY3JldA==\r\n")),  // bob:secret
              std::vector<std::string>{"HTTP/1.1 401 Unauthorized"});
  }
  EXPECT_EQ(StatusLines(Get(port, "/metrics", "Authorization: Basic !!!\r\n")),
            std::vector<std::string>{"HTTP/1.1 401 Unauthorized"});
  EXPECT_EQ(StatusLines(Get(port, "/")), std::vector<std::string>{"HTTP/1.1 200 OK"});  // the landing page is public
}

TEST(HttpServerTest, FullAuthQueueIs503) {
  HttpServerOptions o = Options();
  o.users = {{"alice", kHash}};
  o.auth_queue = 0;  // no check may wait
  auto server = HttpServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ(StatusLines(Get((*server)->port(), "/metrics", "Authorization: Basic YWxpY2U6c2VjcmV0\r\n")),
            std::vector<std::string>{"HTTP/1.1 503 Service Unavailable"});
}

// A pprof handler that answers "<name> <format> <seconds or -> now" at once, or (seconds
// present) the same with "later" after `delay`.
HttpServerOptions PprofOptions(milliseconds delay, std::shared_ptr<std::atomic<int>> starts = nullptr) {
  HttpServerOptions o = Options();
  o.pprof = [delay, starts](const PprofRequest& r) {
    const std::string what = r.name + " " + r.format + " " + (r.seconds ? "[" + *r.seconds + "]" : "-");
    PprofReply reply;
    reply.answer.body = what + " now";
    if (r.seconds) {
      reply.delay = delay;
      reply.later = [what] { return HttpAnswer{200, "text/plain; charset=utf-8", what + " later"}; };
      if (starts) reply.start = [starts] { ++*starts; };
    }
    return reply;
  };
  return o;
}

TEST(HttpServerTest, PprofAnswersNowOrAfterTheDelayWithoutHoldingTheEventLoop) {
  HttpServerOptions o = PprofOptions(milliseconds(2000));
  o.threads = 1;  // one event loop: a waiting answer must not hold it
  auto server = HttpServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  std::string out = Get(port, "/debug/pprof/cpu?format=folded");
  EXPECT_NE(out.find("\r\n\r\ncpu folded - now"), std::string::npos) << out;
  EXPECT_EQ(StatusLines(Get(port, "/debug/pprof/")), std::vector<std::string>{"HTTP/1.1 404 Not Found"});
  // A /flamegraph/ page is the handler's "flamegraph" format, whatever format the query names.
  out = Get(port, "/flamegraph/cpu?format=folded");
  EXPECT_NE(out.find("\r\n\r\ncpu flamegraph - now"), std::string::npos) << out;
  EXPECT_EQ(StatusLines(Get(port, "/flamegraph/")), std::vector<std::string>{"HTTP/1.1 404 Not Found"});

  const auto start = Clock::now();
  ScopedFd waiting = Connect(port);
  Send(waiting.get(), "GET /debug/pprof/cpu?seconds=7 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ScopedFd no_value = Connect(port);
  Send(no_value.get(), "GET /debug/pprof/off?seconds HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  // Meanwhile the one event loop serves scrapes: answered while the waiting answer is not.
  EXPECT_EQ(StatusLines(Get(port, "/metrics")), std::vector<std::string>{"HTTP/1.1 200 OK"});
  pollfd p{waiting.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the scrape was answered only after the delayed answer";
  out = ReadAll(waiting.get(), milliseconds(10000));
  EXPECT_GE(Clock::now() - start, milliseconds(2000));
  EXPECT_NE(out.find("\r\n\r\ncpu  [7] later"), std::string::npos) << out;
  out = ReadAll(no_value.get(), milliseconds(5000));
  EXPECT_NE(out.find("\r\n\r\noff  [] later"), std::string::npos) << out;
}

TEST(HttpServerTest, PprofWaitsOutlastTheRequestDeadline) {
  HttpServerOptions o = PprofOptions(milliseconds(1500));
  o.request_deadline = milliseconds(500);
  auto server = HttpServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string out = Get((*server)->port(), "/debug/pprof/cpu?seconds=1");
  EXPECT_EQ(StatusLines(out), std::vector<std::string>{"HTTP/1.1 200 OK"}) << out;
  EXPECT_EQ((*server)->deadline_closes(), 0u);
}

TEST(HttpServerTest, PprofWaitingAnswersAreBoundedAndAnswered503AtStop) {
  auto starts = std::make_shared<std::atomic<int>>(0);
  HttpServerOptions o = PprofOptions(milliseconds(60000), starts);
  o.max_delayed_answers = 2;
  auto server = HttpServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  std::vector<ScopedFd> waiting;
  for (int i = 0; i < 2; ++i) {
    waiting.push_back(Connect(port));
    Send(waiting.back().get(), "GET /debug/pprof/cpu?seconds=60 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  }
  // Once both wait (their starts were called), a third is refused at once, not after 60 s.
  for (int i = 0; i < 500 && starts->load() < 2; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(starts->load(), 2);
  const std::string third = Get(port, "/debug/pprof/cpu?seconds=60");
  EXPECT_EQ(StatusLines(third), std::vector<std::string>{"HTTP/1.1 429 Too Many Requests"}) << third;
  EXPECT_NE(third.find("2 profile requests with seconds=N are already waiting"), std::string::npos) << third;
  EXPECT_EQ(StatusLines(Get(port, "/debug/pprof/cpu")), std::vector<std::string>{"HTTP/1.1 200 OK"});
  EXPECT_EQ(starts->load(), 2) << "only accepted waits start";
  server->reset();  // stopping answers the waiting ones
  for (ScopedFd& fd : waiting) {
    const std::string out = ReadAll(fd.get(), milliseconds(5000));
    EXPECT_EQ(StatusLines(out), std::vector<std::string>{"HTTP/1.1 503 Service Unavailable"}) << out;
    EXPECT_NE(out.find("the server is stopping"), std::string::npos) << out;
  }
}

TEST(HttpServerTest, Errors) {
  auto first = HttpServer::Start(Options());
  ASSERT_TRUE(first.ok());
  HttpServerOptions o = Options();
  o.listen_address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = HttpServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("Address already in use"), std::string::npos);

  o = Options();
  o.cert_file = "/x/server.crt";
  o.key_file = "/x/server.key";
  o.cert_pem = "not a certificate\n";
  o.key_pem = "not a key\n";
  auto tls = HttpServer::Start(o);
  ASSERT_FALSE(tls.ok());
  EXPECT_EQ(tls.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tls.status().message().find("cert_file /x/server.crt is not a PEM certificate"), std::string::npos)
      << tls.status().message();
}

}  // namespace
}  // namespace tpe
