#include "exporter/exporter.h"

#include <CivetServer.h>
#include <dirent.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <thread>

#include "common/file_util.h"

namespace tpe {
namespace {

prometheus::MetricFamily ToFamily(const MetricSnapshot& m) {
  prometheus::MetricFamily f;
  f.name = m.name;
  f.help = m.help;
  switch (m.kind) {
    case MetricKind::kCounter:
      f.type = prometheus::MetricType::Counter;
      break;
    case MetricKind::kGauge:
      f.type = prometheus::MetricType::Gauge;
      break;
    case MetricKind::kHistogram:
      f.type = prometheus::MetricType::Histogram;
      break;
  }
  for (const auto& s : m.series) {
    prometheus::ClientMetric cm;
    for (const auto& [k, v] : s.labels) cm.label.push_back({k, v});
    switch (m.kind) {
      case MetricKind::kCounter:
        cm.counter.value = s.value;
        break;
      case MetricKind::kGauge:
        cm.gauge.value = s.value;
        break;
      case MetricKind::kHistogram: {
        cm.histogram.sample_count = s.count;
        cm.histogram.sample_sum = s.sum;
        uint64_t cumulative = 0;
        for (size_t i = 0; i < s.bucket_counts.size(); ++i) {
          cumulative += s.bucket_counts[i];
          prometheus::ClientMetric::Bucket b;
          b.cumulative_count = cumulative;
          b.upper_bound = i < m.bucket_bounds.size() ? m.bucket_bounds[i] : std::numeric_limits<double>::infinity();
          cm.histogram.bucket.push_back(b);
        }
        break;
      }
    }
    f.metric.push_back(std::move(cm));
  }
  return f;
}

class SnapshotCollectable : public prometheus::Collectable {
 public:
  SnapshotCollectable(SnapshotSource source, std::atomic<double>* last_scrape)
      : source_(std::move(source)), last_scrape_(last_scrape) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<prometheus::MetricFamily> out;
    for (const auto& m : source_()) out.push_back(ToFamily(m));
    for (const auto& m : ProcessMetrics()) out.push_back(ToFamily(m));
    // A scrape cannot time its own serialization: report the previous scrape's collection time.
    MetricSnapshot took;
    took.name = "tracepoint_exporter_scrape_duration_seconds";
    took.help = "Time the previous scrape took to snapshot every metric, in seconds.";
    took.kind = MetricKind::kGauge;
    took.series.push_back(SeriesSnapshot{{}, last_scrape_->load(), {}, 0, 0});
    out.push_back(ToFamily(took));
    last_scrape_->store(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return out;
  }

 private:
  SnapshotSource source_;
  std::atomic<double>* last_scrape_;
};

MetricSnapshot Gauge(const std::string& name, const std::string& help, double v, MetricKind kind = MetricKind::kGauge) {
  MetricSnapshot m;
  m.name = name;
  m.help = help;
  m.kind = kind;
  m.series.push_back(SeriesSnapshot{{}, v, {}, 0, 0});
  return m;
}

std::string g_landing_path;  // the telemetry path, for the landing page's link

}  // namespace

// The page served at "/" by both servers.
std::string LandingPageHtml(const std::string& telemetry_path) {
  return "<html><head><title>tracepoint_exporter</title></head><body>"
         "<h1>tracepoint_exporter</h1><p>Linux kernel tracepoints as Prometheus metrics.</p>"
         "<p><a href=\"" +
         telemetry_path + "\">Metrics</a></p></body></html>\n";
}

namespace {

int LandingPage(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  if (ri == nullptr || ri->local_uri == nullptr || std::strcmp(ri->local_uri, "/") != 0) return 0;
  const std::string body = LandingPageHtml(g_landing_path);
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n%s",
            body.size(), body.c_str());
  return 200;
}

}  // namespace

std::vector<MetricSnapshot> ProcessMetrics() {
  std::vector<MetricSnapshot> out;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  auto stat = ReadFileToString("/proc/self/stat");
  if (stat.ok()) {
    // Fields after the ")" that ends comm: state is field 3; utime 14, stime 15, starttime 22,
    // vsize 23, rss 24 (proc(5)).
    std::istringstream in(stat->substr(stat->rfind(')') + 2));
    std::vector<std::string> f((std::istream_iterator<std::string>(in)), std::istream_iterator<std::string>());
    auto field = [&](size_t n) { return n - 3 < f.size() ? std::stod(f[n - 3]) : 0.0; };
    out.push_back(Gauge("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                        (field(14) + field(15)) / ticks, MetricKind::kCounter));
    out.push_back(Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", field(23)));
    out.push_back(Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", field(24) * page));
    double btime = 0;
    auto s = ReadFileToString("/proc/stat");
    if (s.ok()) {
      size_t p = s->find("\nbtime ");
      if (p != std::string::npos) btime = std::stod(s->substr(p + 7));
    }
    out.push_back(Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                        btime + field(22) / ticks));
  }
  double fds = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) fds += e->d_name[0] != '.';
    ::closedir(d);
    fds -= 1;  // the directory stream itself
  }
  out.push_back(Gauge("process_open_fds", "Number of open file descriptors.", fds));
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    out.push_back(
        Gauge("process_max_fds", "Maximum number of open file descriptors.", static_cast<double>(rl.rlim_cur)));
  }
  return out;
}

std::string SerializeText(const std::vector<MetricSnapshot>& metrics) {
  std::vector<prometheus::MetricFamily> fams;
  fams.reserve(metrics.size());
  for (const auto& m : metrics) fams.push_back(ToFamily(m));
  return prometheus::TextSerializer().Serialize(fams);
}

struct HttpExporter::Impl {
  ~Impl() {
    if (tls) {
      tls->stop();
      if (tls_thread.joinable()) tls_thread.join();
    }
  }
  std::unique_ptr<httplib::SSLServer> tls;  // set iff serving TLS
  std::thread tls_thread;
  int tls_port = 0;
  std::atomic<double> last_scrape{0};
  std::shared_ptr<SnapshotCollectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;
  CivetCallbacks callbacks{};
};

StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::Start(const std::string& listen_address,
                                                            const std::string& telemetry_path, SnapshotSource source,
                                                            const WebConfig& web) {
  size_t colon = listen_address.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen_address.size()) {
    return InvalidArgument("--web.listen-address=" + listen_address +
                           " is not [HOST]:PORT (e.g. :9478, 127.0.0.1:9478)");
  }
  std::string host = listen_address.substr(0, colon);
  std::string port = listen_address.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535) {
    return InvalidArgument("--web.listen-address=" + listen_address + ": port \"" + port + "\" is not 0-65535");
  }
  if (telemetry_path.empty() || telemetry_path[0] != '/' || telemetry_path == "/") {
    return InvalidArgument("--web.telemetry-path=" + telemetry_path +
                           " must start with / and not be / (e.g. /metrics)");
  }
  // civetweb syntax: "9478" (all interfaces), "127.0.0.1:9478", "[::1]:9478".
  std::string civet = host.empty() ? port : host + ":" + port;
  std::unique_ptr<HttpExporter> e(new HttpExporter());
  e->impl_ = std::make_unique<Impl>();
  g_landing_path = telemetry_path;
  e->impl_->callbacks.begin_request = LandingPage;
  std::vector<std::string> options = {"num_threads", "2"};
  e->impl_->collectable = std::make_shared<SnapshotCollectable>(source, &e->impl_->last_scrape);
  if (web.tls()) {
    // civetweb (prometheus-cpp's server) crashes on TLS with Debian 12's OpenSSL 3, so TLS is
    // served by cpp-httplib; collection and serialization stay prometheus-cpp's.
    TPE_RETURN_IF_ERROR(e->StartTls(host, port, telemetry_path, web));
    return e;
  }
  options.insert(options.end(), {"listening_ports", civet});
  try {
    e->impl_->exposer = std::make_unique<prometheus::Exposer>(options, &e->impl_->callbacks);
  } catch (const std::exception& ex) {
    return Unavailable("cannot listen on --web.listen-address=" + listen_address + " (" + ex.what() +
                       "); is the port already in use? choose another with --web.listen-address");
  }
  if (!web.users.empty()) {
    auto users = web.users;
    e->impl_->exposer->RegisterAuth(
        [users](const std::string& user, const std::string& password) {
          auto it = users.find(user);
          return it != users.end() && CheckPassword(it->second, password);
        },
        "tracepoint_exporter", telemetry_path);
  }
  e->impl_->exposer->RegisterCollectable(e->impl_->collectable, telemetry_path);
  return e;
}

namespace {

// "Basic <base64(user:password)>" → user, password (OpenSSL's base64 decoder).
bool ParseBasicAuth(const std::string& header, std::string* user, std::string* password) {
  if (!header.starts_with("Basic ")) return false;
  const std::string b64 = header.substr(6);
  if (b64.empty() || b64.size() > 4096 || b64.size() % 4 != 0) return false;
  std::string out(b64.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
  if (n < 0) return false;
  size_t len = static_cast<size_t>(n);
  for (size_t i = b64.size(); i > 0 && b64[i - 1] == '='; --i) --len;  // EVP_DecodeBlock keeps padding bytes
  out.resize(len);
  const size_t colon = out.find(':');
  if (colon == std::string::npos) return false;
  *user = out.substr(0, colon);
  *password = out.substr(colon + 1);
  return true;
}

}  // namespace

Status HttpExporter::StartTls(const std::string& host, const std::string& port, const std::string& telemetry_path,
                              const WebConfig& web) {
  auto server = std::make_unique<httplib::SSLServer>(web.cert_file.c_str(), web.key_file.c_str());
  if (!server->is_valid()) {
    return InvalidArgument("TLS setup failed: OpenSSL rejects tls_server_config cert_file " + web.cert_file +
                           " / key_file " + web.key_file + " (PEM certificate and its matching private key)");
  }
  Impl* impl = impl_.get();
  const auto users = web.users;
  server->Get(telemetry_path, [impl, users](const httplib::Request& req, httplib::Response& res) {
    if (!users.empty()) {
      std::string user, password;
      auto it = users.end();
      if (ParseBasicAuth(req.get_header_value("Authorization"), &user, &password)) it = users.find(user);
      if (it == users.end() || !CheckPassword(it->second, password)) {
        res.status = 401;
        res.set_header("WWW-Authenticate", "Basic realm=\"tracepoint_exporter\"");
        res.set_content("Unauthorized\n", "text/plain");
        return;
      }
    }
    res.set_content(prometheus::TextSerializer().Serialize(impl->collectable->Collect()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  const std::string landing = LandingPageHtml(telemetry_path);
  server->Get("/", [landing](const httplib::Request&, httplib::Response& res) {
    res.set_content(landing, "text/html; charset=utf-8");
  });
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  const int want = std::stoi(port);
  const int got = want == 0 ? server->bind_to_any_port(bind_host.c_str())
                            : (server->bind_to_port(bind_host.c_str(), want) ? want : -1);
  if (got < 0) {
    return Unavailable("cannot listen on " + bind_host + ":" + port + "; is the port already in use?");
  }
  impl_->tls_port = got;
  impl_->tls = std::move(server);
  impl_->tls_thread = std::thread([impl] { impl->tls->listen_after_bind(); });
  return Status::Ok();
}

HttpExporter::~HttpExporter() = default;

std::vector<int> HttpExporter::ports() const {
  if (impl_->tls) return {impl_->tls_port};
  return impl_->exposer->GetListeningPorts();
}

}  // namespace tpe
