// The HTTP(S) server behind HttpExporter: GNU libmicrohttpd (TLS through GnuTLS) in event-loop
// mode, built so that slow or hostile clients cannot starve scrapes.
//
//  - A few threads each run an epoll loop over many connections (MHD_USE_EPOLL_INTERNAL_THREAD
//    with a thread pool): a slow client costs a socket and a small buffer, never a thread.
//  - Deadlines: a request's headers (and, with TLS, the handshake) must arrive within
//    `header_deadline` of the connection being accepted or of its previous response; a
//    request must be answered within `request_deadline`. libmicrohttpd's own timeout is an
//    idle timeout that each received byte resets, so a deadline watchdog thread shuts down
//    the sockets that overstay (shutdown(2) on the connection's fd; libmicrohttpd then sees
//    EOF and frees it). Idle connections also close after `header_deadline`. While 3/4 of the
//    connection limit is in use, the header deadline is `pressure_header_deadline` instead.
//  - Limits: `connection_limit` in total (lowered to what RLIMIT_NOFILE leaves free; beyond it
//    new connections wait in the kernel's accept queue), `per_ip_connection_limit` per client
//    address (beyond it a connection is closed at once).
//  - Basic auth: bcrypt runs on a dedicated auth thread while the connection is suspended
//    (MHD_suspend_connection), never on an event loop; answers are cached (BasicAuth). At most
//    `auth_queue` checks wait; beyond that a request gets 503 at once.
//  - HTTP/1.1 keep-alive, pipelining (answered in order), HEAD and "Connection: close" are
//    libmicrohttpd's. GET/HEAD only (else 405); "/" is `landing()`, `telemetry_path` is
//    `metrics()`, "/debug/pprof/<name>" and "/flamegraph/<name>" are `pprof(request)`, anything
//    else 404.
//  - Answers that wait (a pprof reply with `later`, e.g. "?seconds=30"): the connection is
//    suspended, the answer computed by a DelayedRunner thread once the delay has passed, and the
//    request deadline of that connection grows by the delay. At most `max_delayed_answers` wait;
//    beyond that a request gets 429 at once; stopping the server answers those waiting 503.
//
// Memory: a response references its body; the server copies no body into buffers of its own
// (libmicrohttpd sends straight from it, through GnuTLS records with TLS).
//
// Thread-safety: Start/~HttpServer from one thread. `metrics` and `pprof` are called on the
// server's threads, possibly concurrently; the buffers they return are released on those
// threads. A reply's `later` runs on the server's delayed-answer thread, one at a time.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "exporter/rendered_page.h"

namespace tpe {

// An answer a handler builds whole (the /debug/pprof/ endpoints): status, content type, body.
struct HttpAnswer {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// GET /debug/pprof/<name>: the path's name and the query arguments a pprof handler reads.
struct PprofRequest {
  std::string name;                    // after "/debug/pprof/", not decoded further
  std::string format;                  // "format=...", "" when absent
  std::optional<std::string> seconds;  // "seconds=..." as sent ("" for "seconds" without a value)
};

// A pprof handler's reply: `answer` now, or, when `later` is set, later()'s answer once `delay`
// has passed (then `answer` is unused). `start` (optional) is called once the wait is accepted
// (not for a request refused with 429), on the server thread, before the delay begins.
struct PprofReply {
  HttpAnswer answer;
  std::chrono::milliseconds delay{0};
  std::function<HttpAnswer()> later;
  std::function<void()> start;
};

struct HttpServerOptions {
  std::string listen_address;  // "[HOST]:PORT", see listen_address.h
  std::string telemetry_path;  // e.g. "/metrics"
  // The body served at telemetry_path: an immutable page that the response references until
  // it is sent (never copied); several responses may share one. Null is answered 500.
  std::function<std::shared_ptr<const RenderedPage>()> metrics;
  std::string metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";
  // The protobuf exposition's page (kProtobufContentType), served instead of `metrics` when the
  // request's Accept header prefers it (NegotiateExposition). Unset: always `metrics`.
  std::function<std::shared_ptr<const RenderedPage>()> metrics_protobuf;
  std::function<std::string()> landing;  // the HTML served at "/", called per request; unset: empty
  // "/debug/pprof/<name>[?format=...][&seconds=N]", and "/flamegraph/<name>[?seconds=N]" as the
  // format "flamegraph" (any "format" argument ignored): called on a server thread, behind the
  // same basic auth as telemetry_path. Unset: 404.
  std::function<PprofReply(const PprofRequest& request)> pprof;
  size_t max_delayed_answers = 16;  // replies with `later` waiting at once; beyond: 429
  // TLS: both set = HTTPS only. Paths are for error messages; the PEM text is what is served.
  std::string cert_file, key_file;
  std::string cert_pem, key_pem;
  std::map<std::string, std::string> users;  // basic auth for telemetry_path; empty = none

  unsigned threads = 4;
  unsigned connection_limit = 512;
  unsigned per_ip_connection_limit = 128;
  std::chrono::milliseconds header_deadline{10000};
  std::chrono::milliseconds request_deadline{30000};
  std::chrono::milliseconds pressure_header_deadline{1000};
  size_t auth_queue = 32;
  size_t auth_cache = 1024;
};

class HttpServer {
 public:
  // Binds, then serves until destroyed. Errors: those of ParseListenAddress/ListenTcp (naming
  // the address and the errno text), InvalidArgument naming the file for a certificate or key
  // GnuTLS cannot use, Internal when libmicrohttpd cannot start (with its message).
  static StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options);
  // Answers or cancels (503) pending password checks, then stops libmicrohttpd and the threads.
  ~HttpServer();

  int port() const;
  // Connections closed by the deadline watchdog so far.
  uint64_t deadline_closes() const;

  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpe
