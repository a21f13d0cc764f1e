#include "exporter/http_server.h"

#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/log.h"
#include "common/scoped_fd.h"
#include "exporter/basic_auth.h"
#include "exporter/content_negotiation.h"
#include "exporter/delayed_runner.h"
#include "exporter/listen_address.h"

namespace tpe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kRealm[] = "tracepoint_exporter";

// One per TCP connection (libmicrohttpd's socket_context): what the deadline watchdog needs.
// Fields are guarded by Impl::conns_mu.
struct ConnState {
  int fd = -1;                         // owned by libmicrohttpd; valid until the CLOSED notification
  bool in_request = false;             // headers complete, response not yet sent
  Clock::time_point since;             // start of the current phase (accept, or the previous response)
  std::chrono::milliseconds extra{0};  // added to the request deadline (an answer that waits)
  bool shut = false;                   // the watchdog has shut the socket down
  // Seen waiting for headers while the server was under pressure: keeps the short header deadline
  // for this phase even if pressure ends first (shed connections leave before later ones expire).
  bool pressed = false;
};

// One per HTTP request (libmicrohttpd's con_cls).
struct Request {
  enum Auth : int { kUnchecked, kPending, kAllowed, kDenied, kBusy };
  std::atomic<int> auth{kUnchecked};  // written by the auth thread before it resumes the connection
  // A pprof answer that waited: written by the delayed-answer thread before it resumes the
  // connection, then `later_ready` set.
  std::unique_ptr<HttpAnswer> later;
  std::atomic<bool> later_ready{false};
  bool stopping = false;  // resumed with the 503 of a stopping server (Impl::stopping_answers)
};

struct AuthJob {
  std::string user, password;
  Request* request;  // alive until the connection is resumed (the request cannot end while suspended)
  MHD_Connection* connection;
};

void Wipe(std::string& s) {
  ::explicit_bzero(s.data(), s.size());
  s.clear();
}

// libmicrohttpd's messages go to the debug log; while MHD_start_daemon runs on this thread they
// are also collected, for the error message if it fails.
thread_local std::string* t_start_log = nullptr;

void MhdLog(void*, const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string msg(buf);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (t_start_log != nullptr) *t_start_log += (t_start_log->empty() ? "" : "; ") + msg;
  TPE_LOG_DEBUG("libmicrohttpd: {}", msg);
}

// Checks what GnuTLS (libmicrohttpd's TLS) will do with the PEM texts, naming the bad file.
Status CheckCertificateAndKey(const HttpServerOptions& o) {
  const std::string prefix = "TLS setup failed: tls_server_config ";
  gnutls_datum_t cert{reinterpret_cast<unsigned char*>(const_cast<char*>(o.cert_pem.data())),
                      static_cast<unsigned>(o.cert_pem.size())};
  gnutls_datum_t key{reinterpret_cast<unsigned char*>(const_cast<char*>(o.key_pem.data())),
                     static_cast<unsigned>(o.key_pem.size())};
  gnutls_x509_crt_t* certs = nullptr;
  unsigned n = 0;
  int rc = gnutls_x509_crt_list_import2(&certs, &n, &cert, GNUTLS_X509_FMT_PEM, 0);
  if (rc < 0) {
    return InvalidArgument(prefix + "cert_file " + o.cert_file + " is not a PEM certificate: " + gnutls_strerror(rc));
  }
  for (unsigned i = 0; i < n; ++i) gnutls_x509_crt_deinit(certs[i]);
  gnutls_free(certs);
  gnutls_x509_privkey_t pk = nullptr;
  gnutls_x509_privkey_init(&pk);
  rc = gnutls_x509_privkey_import2(pk, &key, GNUTLS_X509_FMT_PEM, nullptr, 0);
  gnutls_x509_privkey_deinit(pk);
  if (rc < 0) {
    return InvalidArgument(prefix + "key_file " + o.key_file +
                           " is not an unencrypted PEM private key: " + gnutls_strerror(rc));
  }
  gnutls_certificate_credentials_t cred = nullptr;
  gnutls_certificate_allocate_credentials(&cred);
  rc = gnutls_certificate_set_x509_key_mem2(cred, &cert, &key, GNUTLS_X509_FMT_PEM, nullptr, 0);
  gnutls_certificate_free_credentials(cred);
  if (rc < 0) {
    return InvalidArgument(prefix + "key_file " + o.key_file + " does not fit cert_file " + o.cert_file + ": " +
                           gnutls_strerror(rc));
  }
  return Status::Ok();
}

// The connection limit, lowered so that HTTP clients cannot take the file descriptors the
// daemon needs: RLIMIT_NOFILE minus twice the descriptors open now (a reload opens a second
// set of perf events before closing the first) minus a margin; at least 16.
unsigned EffectiveConnectionLimit(unsigned wanted) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return wanted;
  const int64_t open = static_cast<int64_t>(OpenFdCount());
  const int64_t room = static_cast<int64_t>(rl.rlim_cur) - 2 * open - 64;
  return static_cast<unsigned>(std::min<int64_t>(wanted, std::max<int64_t>(room, 16)));
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions opt;
  int port = -1;
  ScopedFd listen_fd;  // libmicrohttpd serves a duplicate of it
  MHD_Daemon* daemon = nullptr;
  unsigned connection_limit = 0;    // what libmicrohttpd was given
  std::unique_ptr<BasicAuth> auth;  // null when no users are configured

  // The deadline watchdog.
  std::mutex conns_mu;
  std::set<ConnState*> conns;
  bool watchdog_stop = false;
  std::condition_variable watchdog_cv;
  std::thread watchdog;
  std::atomic<uint64_t> deadline_closes{0};

  // The auth thread: bcrypt off the event loops.
  std::mutex auth_mu;
  std::condition_variable auth_cv;
  std::deque<AuthJob> auth_jobs;
  bool auth_stop = false;
  std::thread auth_thread;

  // Answers that wait (pprof replies with `later`).
  std::unique_ptr<DelayedRunner> delayed;
  // Waiting answers resumed with a 503 at stop and not yet completed: the destructor lets the
  // event loops send them before it stops libmicrohttpd (which closes connections unanswered).
  std::atomic<int> stopping_answers{0};

  // Closes the connections past their deadline. It sleeps until the next deadline (no timer while
  // no connection is open: an idle daemon is not woken 5 times a second), and is woken when a
  // connection opens or changes phase (either may bring a deadline closer).
  void WatchdogLoop() {
    std::unique_lock<std::mutex> lock(conns_mu);
    while (!watchdog_stop) {
      const auto now = Clock::now();
      // Under pressure (3/4 of the connection limit in use) headers get a much shorter deadline:
      // real scrapers send theirs at once, so only slow clients are shed, freeing slots sooner.
      const bool pressure = conns.size() * 4 >= size_t{connection_limit} * 3;
      const auto short_deadline = std::min(opt.header_deadline, opt.pressure_header_deadline);
      std::optional<Clock::time_point> next;
      for (ConnState* c : conns) {
        if (c->shut) continue;
        if (pressure && !c->in_request) c->pressed = true;
        const auto header_deadline = c->pressed ? short_deadline : opt.header_deadline;
        const auto deadline = c->since + (c->in_request ? opt.request_deadline + c->extra : header_deadline);
        if (now <= deadline) {
          next = next ? std::min(*next, deadline) : deadline;
          continue;
        }
        // libmicrohttpd reads EOF (or fails its next send) and closes the connection; the fd
        // stays valid until then, as the CLOSED notification takes conns_mu first.
        deadline_closes.fetch_add(1);
        ::shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
      }
      if (next) {
        // Just past it: a deadline is passed once now is beyond it.
        watchdog_cv.wait_until(lock, *next + std::chrono::milliseconds(1));
      } else {
        watchdog_cv.wait(lock);
      }
    }
  }

  void AuthLoop() {
    for (;;) {
      AuthJob job;
      {
        std::unique_lock<std::mutex> lock(auth_mu);
        auth_cv.wait(lock, [&] { return auth_stop || !auth_jobs.empty(); });
        if (auth_stop) break;
        job = std::move(auth_jobs.front());
        auth_jobs.pop_front();
      }
      const bool ok = auth->Verify(job.user, job.password);
      Wipe(job.password);
      job.request->auth.store(ok ? Request::kAllowed : Request::kDenied);
      MHD_resume_connection(job.connection);
    }
    // Stopping: the waiting requests get 503 (libmicrohttpd cannot stop with suspended connections).
    std::deque<AuthJob> rest;
    {
      std::lock_guard<std::mutex> lock(auth_mu);
      rest.swap(auth_jobs);
    }
    for (AuthJob& job : rest) {
      Wipe(job.password);
      job.request->auth.store(Request::kBusy);
      MHD_resume_connection(job.connection);
    }
  }

  // False when the queue is full or the server is stopping.
  bool SubmitAuth(AuthJob job) {
    {
      std::lock_guard<std::mutex> lock(auth_mu);
      if (auth_stop || auth_jobs.size() >= opt.auth_queue) return false;
      auth_jobs.push_back(std::move(job));
    }
    auth_cv.notify_one();
    return true;
  }

  static ConnState* StateOf(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == nullptr ? nullptr : static_cast<ConnState*>(info->socket_context);
  }

  void SetPhase(MHD_Connection* connection, bool in_request) {
    ConnState* c = StateOf(connection);
    if (c == nullptr) return;
    std::lock_guard<std::mutex> lock(conns_mu);
    c->in_request = in_request;
    c->since = Clock::now();
    c->pressed = false;
    c->extra = std::chrono::milliseconds(0);
    watchdog_cv.notify_one();  // the new phase's deadline may be sooner than the one it waits for
  }

  void ExtendRequestDeadline(MHD_Connection* connection, std::chrono::milliseconds by) {
    ConnState* c = StateOf(connection);
    if (c == nullptr) return;
    std::lock_guard<std::mutex> lock(conns_mu);
    c->extra = by;
  }

  // Hands `answer` to a suspended request and resumes its connection (OnRequest then sends it).
  static void ResumeWith(MHD_Connection* connection, Request* request, HttpAnswer answer) {
    request->later = std::make_unique<HttpAnswer>(std::move(answer));
    request->later_ready.store(true);
    MHD_resume_connection(connection);
  }

  // A pprof request: the handler's answer now, or (a reply with `later`) the connection suspended
  // until the delayed-answer thread has computed it.
  // `format`: the path's own (a /flamegraph/ page), or null for the request's "format" argument.
  MHD_Result ServePprof(MHD_Connection* connection, Request* request, std::string_view name, const char* format) {
    if (request->later_ready.load()) return RespondAnswer(connection, std::move(*request->later));
    PprofRequest pr;
    pr.name = std::string(name);
    if (format == nullptr) format = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "format");
    pr.format = format != nullptr ? format : "";
    const char* seconds = nullptr;
    size_t seconds_size = 0;
    if (MHD_lookup_connection_value_n(connection, MHD_GET_ARGUMENT_KIND, "seconds", 7, &seconds, &seconds_size) ==
        MHD_YES) {
      pr.seconds = seconds != nullptr ? std::string(seconds, seconds_size) : std::string();
    }
    PprofReply reply;
    try {  // nothing may unwind through libmicrohttpd's C frames
      reply = opt.pprof(pr);
    } catch (const std::exception& e) {
      TPE_LOG_ERROR("profile failed: {}", e.what());
      return Respond(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "profile failed\n", "text/plain; charset=utf-8");
    }
    if (!reply.later) return RespondAnswer(connection, std::move(reply.answer));
    // Suspend first: the delayed thread may answer before this handler returns.
    ExtendRequestDeadline(connection, reply.delay);
    MHD_suspend_connection(connection);
    auto later = std::make_shared<std::function<HttpAnswer()>>(std::move(reply.later));
    const bool queued = delayed->Submit(
        Clock::now() + reply.delay,
        [connection, request, later] {
          HttpAnswer a;
          try {
            a = (*later)();
          } catch (const std::exception& e) {
            TPE_LOG_ERROR("profile failed: {}", e.what());
            a = HttpAnswer{500, "text/plain; charset=utf-8", "profile failed\n"};
          }
          ResumeWith(connection, request, std::move(a));
        },
        [this, connection, request] {
          request->stopping = true;
          stopping_answers.fetch_add(1);
          ResumeWith(connection, request, HttpAnswer{503, "text/plain; charset=utf-8", "the server is stopping\n"});
        });
    if (queued && reply.start) reply.start();  // the delay is at least a second: before `later` runs
    if (!queued) {
      ResumeWith(connection, request,
                 HttpAnswer{429, "text/plain; charset=utf-8",
                            std::to_string(opt.max_delayed_answers) +
                                " profile requests with seconds=N are already waiting; retry later\n"});
    }
    return MHD_YES;  // suspended; called again once resumed
  }

  static MHD_Result RespondAnswer(MHD_Connection* connection, HttpAnswer answer) {
    auto owned = std::make_shared<const HttpAnswer>(std::move(answer));
    const std::string_view text = owned->body;
    const char* type = owned->content_type.c_str();
    return Respond(connection, owned->status, owned, text, type);
  }

  // --- libmicrohttpd callbacks (on its threads) ---

  static void OnConnection(void* cls, MHD_Connection* connection, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* impl = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      auto* c = new ConnState();
      c->fd = info == nullptr ? -1 : info->connect_fd;
      c->since = Clock::now();
      c->shut = c->fd < 0;
      std::lock_guard<std::mutex> lock(impl->conns_mu);
      impl->conns.insert(c);
      impl->watchdog_cv.notify_one();  // a deadline to keep (and perhaps pressure)
      *socket_context = c;
      return;
    }
    auto* c = static_cast<ConnState*>(*socket_context);
    if (c == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(impl->conns_mu);
      impl->conns.erase(c);
    }
    delete c;
    *socket_context = nullptr;
  }

  static void OnCompleted(void* cls, MHD_Connection* connection, void** con_cls, MHD_RequestTerminationCode) {
    auto* request = static_cast<Request*>(*con_cls);
    if (request != nullptr && request->stopping) static_cast<Impl*>(cls)->stopping_answers.fetch_sub(1);
    delete request;
    *con_cls = nullptr;
    static_cast<Impl*>(cls)->SetPhase(connection, false);  // the next request's headers are due
  }

  // Queues `text`, which `owner` keeps valid, without copying it: the response holds the
  // reference, dropped by libmicrohttpd (the free callback) once the response is sent or
  // abandoned.
  static MHD_Result Respond(MHD_Connection* connection, unsigned status, std::shared_ptr<const void> owner,
                            std::string_view text, const char* content_type, bool auth_challenge = false,
                            const char* vary = nullptr) {
    using Owner = std::shared_ptr<const void>;
    auto* held = new Owner(std::move(owner));
    MHD_Response* r = MHD_create_response_from_buffer_with_free_callback_cls(
        text.size(), const_cast<char*>(text.data()), [](void* p) { delete static_cast<Owner*>(p); }, held);
    if (r == nullptr) {
      delete held;
      return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (vary != nullptr) MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, vary);
    const MHD_Result ret = auth_challenge ? MHD_queue_basic_auth_fail_response(connection, kRealm, r)
                                          : MHD_queue_response(connection, status, r);
    MHD_destroy_response(r);
    return ret;
  }

  static MHD_Result Respond(MHD_Connection* connection, unsigned status, std::string body, const char* content_type,
                            bool auth_challenge = false) {
    auto owned = std::make_shared<const std::string>(std::move(body));
    const std::string_view text = *owned;
    return Respond(connection, status, std::move(owned), text, content_type, auth_challenge);
  }

  static MHD_Result Unauthorized(MHD_Connection* connection) {
    return Respond(connection, MHD_HTTP_UNAUTHORIZED, "Unauthorized\n", "text/plain; charset=utf-8", true);
  }

  // Basic auth for the telemetry path: kAllowed/kDenied from the cache or the header, or
  // kPending after handing the check to the auth thread (the connection is then suspended).
  int Authenticate(MHD_Connection* connection, Request* request) {
    char* password_c = nullptr;
    char* user_c = MHD_basic_auth_get_username_password(connection, &password_c);
    if (user_c == nullptr) {
      if (password_c != nullptr) MHD_free(password_c);
      return Request::kDenied;
    }
    std::string user(user_c), password(password_c == nullptr ? "" : password_c);
    MHD_free(user_c);
    if (password_c != nullptr) {
      ::explicit_bzero(password_c, std::strlen(password_c));
      MHD_free(password_c);
    }
    if (auto cached = auth->Lookup(user, password)) {
      Wipe(password);
      return *cached ? Request::kAllowed : Request::kDenied;
    }
    // Suspend first: the auth thread may finish and resume before this handler returns.
    request->auth.store(Request::kPending);
    MHD_suspend_connection(connection);
    if (!SubmitAuth(AuthJob{std::move(user), std::move(password), request, connection})) {
      request->auth.store(Request::kBusy);
      MHD_resume_connection(connection);
    }
    return Request::kPending;
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                              const char* /*version*/, const char* /*upload_data*/, size_t* upload_data_size,
                              void** con_cls) {
    auto* impl = static_cast<Impl*>(cls);
    auto* request = static_cast<Request*>(*con_cls);
    const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (request == nullptr) {  // first call: the headers are complete
      request = new Request();
      *con_cls = request;
      impl->SetPhase(connection, true);
      if (!get && !head) {  // answered before any body is read: libmicrohttpd then closes
        return Respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed\n", "text/plain; charset=utf-8");
      }
      // A response queued in this first call makes libmicrohttpd close the connection after it
      // (and drop pipelined requests): answer in the next call, made as soon as any body is read.
      return MHD_YES;
    }
    if (*upload_data_size != 0) {  // a GET with a body: read and ignore it
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (std::strcmp(url, "/") == 0) {
      std::string html;
      try {  // nothing may unwind through libmicrohttpd's C frames
        if (impl->opt.landing) html = impl->opt.landing();
      } catch (const std::exception& e) {
        TPE_LOG_ERROR("landing page failed: {}", e.what());
      }
      return Respond(connection, MHD_HTTP_OK, std::move(html), "text/html; charset=utf-8");
    }
    static constexpr std::string_view kPprof = "/debug/pprof/", kFlameGraph = "/flamegraph/";
    const std::string_view path = url;
    const bool pprof = impl->opt.pprof && path.starts_with(kPprof) && path.size() > kPprof.size();
    const bool flame_graph = impl->opt.pprof && path.starts_with(kFlameGraph) && path.size() > kFlameGraph.size();
    if (url != impl->opt.telemetry_path && !pprof && !flame_graph) {
      return Respond(connection, MHD_HTTP_NOT_FOUND, "Not Found\n", "text/plain; charset=utf-8");
    }
    if (impl->auth) {
      int verdict = request->auth.load();
      if (verdict == Request::kUnchecked) verdict = impl->Authenticate(connection, request);
      switch (verdict) {
        case Request::kPending:
          return MHD_YES;  // suspended; called again once the auth thread resumes it
        case Request::kDenied:
          return Unauthorized(connection);
        case Request::kBusy:
          return Respond(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "Too many password checks in progress\n",
                         "text/plain; charset=utf-8");
        default:
          break;
      }
    }
    if (pprof) return impl->ServePprof(connection, request, path.substr(kPprof.size()), nullptr);
    if (flame_graph) return impl->ServePprof(connection, request, path.substr(kFlameGraph.size()), "flamegraph");
    std::shared_ptr<const RenderedPage> body;
    const char* accept = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    const bool protobuf =
        impl->opt.metrics_protobuf && accept != nullptr && NegotiateExposition(accept) == ExpositionFormat::kProtobuf;
    try {  // nothing may unwind through libmicrohttpd's C frames
      body = protobuf ? impl->opt.metrics_protobuf() : impl->opt.metrics();
    } catch (const std::exception& e) {
      TPE_LOG_ERROR("scrape failed: {}", e.what());
      return Respond(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "scrape failed\n", "text/plain; charset=utf-8");
    }
    if (body == nullptr) {
      TPE_LOG_ERROR("scrape failed: no page rendered");
      return Respond(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "scrape failed\n", "text/plain; charset=utf-8");
    }
    const std::string_view text = body->text();
    // The format follows the Accept header: a cache between must not give one client's to another.
    return Respond(connection, MHD_HTTP_OK, std::move(body), text,
                   protobuf ? kProtobufContentType : impl->opt.metrics_content_type.c_str(), false,
                   impl->opt.metrics_protobuf ? "Accept" : nullptr);
  }
};

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options) {
  auto address = ParseListenAddress(options.listen_address);
  if (!address.ok()) return address.status();
  const bool tls = !options.cert_pem.empty() || !options.key_pem.empty();
  if (tls) TPE_RETURN_IF_ERROR(CheckCertificateAndKey(options));
  auto fd = ListenTcp(*address, options.listen_address);
  if (!fd.ok()) return fd.status();

  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>();
  Impl* impl = server->impl_.get();
  impl->opt = std::move(options);
  impl->listen_fd = std::move(*fd);
  impl->port = BoundPort(impl->listen_fd.get());
  const unsigned connection_limit = EffectiveConnectionLimit(impl->opt.connection_limit);
  impl->connection_limit = connection_limit;
  try {
    if (!impl->opt.users.empty()) {
      impl->auth = std::make_unique<BasicAuth>(impl->opt.users, impl->opt.auth_cache);
      impl->auth_thread = std::thread([impl] { impl->AuthLoop(); });
    }
    impl->watchdog = std::thread([impl] { impl->WatchdogLoop(); });
    if (impl->opt.pprof) impl->delayed = std::make_unique<DelayedRunner>(impl->opt.max_delayed_answers);
  } catch (const std::system_error& e) {
    return Internal(std::string("cannot start the HTTP server's threads: ") + e.what());
  }

  // libmicrohttpd closes the socket it is given (at stop, and on most start failures): give it
  // a duplicate so that ours is closed exactly once, by ScopedFd.
  const int mhd_fd = ::fcntl(impl->listen_fd.get(), F_DUPFD_CLOEXEC, 0);
  if (mhd_fd < 0) return ErrnoStatus(errno, "dup of the listening socket");
  const auto seconds = [](std::chrono::milliseconds ms) {
    return static_cast<intptr_t>(std::max<int64_t>(1, (ms.count() + 999) / 1000));
  };
  std::vector<MHD_OptionItem> opts = {
      // First: libmicrohttpd complains (into the start-up error) when the logger comes later.
      {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&MhdLog), nullptr},
      {MHD_OPTION_LISTEN_SOCKET, mhd_fd, nullptr},
      {MHD_OPTION_THREAD_POOL_SIZE, static_cast<intptr_t>(std::max(1u, impl->opt.threads)), nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, static_cast<intptr_t>(connection_limit), nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, static_cast<intptr_t>(impl->opt.per_ip_connection_limit), nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, seconds(impl->opt.header_deadline), nullptr},
      {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&Impl::OnConnection), impl},
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&Impl::OnCompleted), impl},
  };
  if (tls) {
    opts.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(impl->opt.cert_pem.c_str())});
    opts.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(impl->opt.key_pem.c_str())});
    // TLS 1.2 or newer, as the exporter-toolkit's default min_version.
    opts.push_back({MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>("NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2")});
  }
  opts.push_back({MHD_OPTION_END, 0, nullptr});
  const unsigned flags =
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | (tls ? MHD_USE_TLS : 0);
  std::string start_log;
  t_start_log = &start_log;
  impl->daemon = MHD_start_daemon(flags, 0, nullptr, nullptr, &Impl::OnRequest, impl, MHD_OPTION_ARRAY, opts.data(),
                                  MHD_OPTION_END);
  t_start_log = nullptr;
  if (impl->daemon == nullptr) {
    return Internal("libmicrohttpd cannot serve --web.listen-address=" + impl->opt.listen_address + ": " +
                    (start_log.empty() ? "MHD_start_daemon failed" : start_log));
  }
  TPE_LOG_DEBUG("HTTP server on port {}: {} threads, {} connections ({} per address), deadlines {} ms / {} ms",
                impl->port, impl->opt.threads, connection_limit, impl->opt.per_ip_connection_limit,
                impl->opt.header_deadline.count(), impl->opt.request_deadline.count());
  return server;
}

HttpServer::~HttpServer() {
  if (!impl_) return;
  Impl* impl = impl_.get();
  if (impl->auth_thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(impl->auth_mu);
      impl->auth_stop = true;
    }
    impl->auth_cv.notify_all();
    impl->auth_thread.join();  // every suspended connection has been resumed
  }
  // libmicrohttpd cannot stop with suspended connections: answers that wait get 503 first.
  if (impl->delayed) {
    impl->delayed->Stop();
    // The 503s just queued: sent by the event loops (or their connections closed) within 2 s.
    for (int i = 0; i < 400 && impl->stopping_answers.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (impl->daemon != nullptr) MHD_stop_daemon(impl->daemon);
  {
    std::lock_guard<std::mutex> lock(impl->conns_mu);
    impl->watchdog_stop = true;
  }
  impl->watchdog_cv.notify_all();
  if (impl->watchdog.joinable()) impl->watchdog.join();
}

int HttpServer::port() const { return impl_->port; }

uint64_t HttpServer::deadline_closes() const { return impl_->deadline_closes.load(); }

}  // namespace tpe
