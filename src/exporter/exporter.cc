#include "exporter/exporter.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "collectors/self_metrics.h"
#include "common/file_util.h"
#include "common/html_escape.h"
#include "common/log.h"
#include "exporter/content_negotiation.h"
#include "exporter/http_server.h"
#include "exporter/page_cache.h"

namespace tpe {
namespace {

// Writes one metric family in `format` (exposition.h); its snapshot is freed once written.
void WriteFamily(std::ostream& out, MetricSnapshot m, ExpositionFormat format) {
  if (format == ExpositionFormat::kText) {
    WriteText(std::move(m), &out);
  } else if (const std::string name = m.name; !WriteProtobuf(std::move(m), &out)) {
    throw std::runtime_error("protobuf exposition: writing " + name + " failed");  // a 500, logged
  }
}

// Renders the /metrics page: the source's families, the process_* metrics and the previous
// scrape's snapshot time, converted and written one family at a time into a RenderedPage (the
// text is never copied). Not thread-safe: PageCache runs one render at a time.
class PageRenderer {
 public:
  PageRenderer(SnapshotSource source, ExpositionFormat format) : source_(std::move(source)), format_(format) {}

  RenderedPage Render() {
    RenderedPage page = Write();
#if defined(__GLIBC__)
    // The render's working memory (snapshots, MetricFamily objects: several times the page, in
    // small blocks) is free now, in the malloc arena of whichever HTTP thread ran it; glibc
    // keeps free memory in each arena. Give its whole pages back to the kernel (malloc_trim(3))
    // so that the process does not hold one render's worth per arena.
    ::malloc_trim(0);
#endif
    return page;
  }

 private:
  RenderedPage Write() {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<MetricSnapshot> metrics = source_();
    for (auto& m : ProcessMetrics()) metrics.push_back(std::move(m));
    // A scrape cannot time its own serialization: report the previous scrape's snapshot time.
    SelfMetrics took;
    took.Add(kScrapeDurationSecondsDesc, {}, last_scrape_seconds_);
    took.MoveTo(&metrics);
    last_scrape_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Room for the previous page and an eighth more: a page that grows a little is written
    // without growing the mapping (pages not written to cost no memory).
    PageWriter writer(last_size_ + last_size_ / 8);
    std::ostream out(&writer);
    for (auto& m : metrics) WriteFamily(out, std::move(m), format_);  // each snapshot is freed once written
    RenderedPage page = writer.Finish();
    last_size_ = page.text().size();
    return page;
  }

  SnapshotSource source_;
  const ExpositionFormat format_;
  double last_scrape_seconds_ = 0;
  size_t last_size_ = 0;
};

// The standard process metrics (client_golang's process collector), read from /proc/self.
constexpr MetricDesc kProcessCpuSecondsTotalDesc{
    "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", MetricKind::kCounter};
constexpr MetricDesc kProcessVirtualMemoryBytesDesc{"process_virtual_memory_bytes", "Virtual memory size in bytes.",
                                                    MetricKind::kGauge};
constexpr MetricDesc kProcessResidentMemoryBytesDesc{"process_resident_memory_bytes", "Resident memory size in bytes.",
                                                     MetricKind::kGauge};
constexpr MetricDesc kProcessStartTimeSecondsDesc{
    "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", MetricKind::kGauge};
constexpr MetricDesc kProcessOpenFdsDesc{"process_open_fds", "Number of open file descriptors.", MetricKind::kGauge};
constexpr MetricDesc kProcessMaxFdsDesc{"process_max_fds", "Maximum number of open file descriptors.",
                                        MetricKind::kGauge};

}  // namespace

// The page served at "/".
namespace {

// `s` as one URL path segment (RFC 3986 unreserved characters kept, the rest %XX).
std::string PathSegment(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string LandingPageHtml(const std::string& telemetry_path, const std::vector<std::string>& profiles) {
  std::string html =
      "<html><head><title>tracepoint_exporter</title></head><body>"
      "<h1>tracepoint_exporter</h1><p>Linux kernel tracepoints as Prometheus metrics.</p>"
      "<p><a href=\"" +
      HtmlEscaped(telemetry_path) + "\">Metrics</a></p>";
  if (!profiles.empty()) {
    html += "<h2>Profiles</h2><ul>";
    for (const std::string& name : profiles) {
      const std::string seg = HtmlEscaped(PathSegment(name));
      html += "<li>" + HtmlEscaped(name) + ": <a href=\"/flamegraph/" + seg +
              "\">flame graph</a>, <a href=\"/flamegraph/" + seg +
              "?seconds=30\">flame graph of the next 30 s</a>, <a href=\"/debug/pprof/" + seg +
              "\">pprof</a>, <a href=\"/debug/pprof/" + seg + "?format=folded\">folded stacks</a></li>";
    }
    html += "</ul>";
  }
  return html + "</body></html>\n";
}

std::vector<MetricSnapshot> ProcessMetrics() {
  SelfMetrics m;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  auto stat = ReadFileToString("/proc/self/stat");
  if (stat.ok()) {
    // Fields after the ")" that ends comm: state is field 3; utime 14, stime 15, starttime 22,
    // vsize 23, rss 24 (proc(5)).
    std::istringstream in(stat->substr(stat->rfind(')') + 2));
    std::vector<std::string> f((std::istream_iterator<std::string>(in)), std::istream_iterator<std::string>());
    auto field = [&](size_t n) { return n - 3 < f.size() ? std::stod(f[n - 3]) : 0.0; };
    m.Add(kProcessCpuSecondsTotalDesc, {}, (field(14) + field(15)) / ticks);
    m.Add(kProcessVirtualMemoryBytesDesc, {}, field(23));
    m.Add(kProcessResidentMemoryBytesDesc, {}, field(24) * page);
    double btime = 0;
    auto s = ReadFileToString("/proc/stat");
    if (s.ok()) {
      size_t p = s->find("\nbtime ");
      if (p != std::string::npos) btime = std::stod(s->substr(p + 7));
    }
    m.Add(kProcessStartTimeSecondsDesc, {}, btime + field(22) / ticks);
  }
  m.Add(kProcessOpenFdsDesc, {}, static_cast<double>(OpenFdCount()));
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    m.Add(kProcessMaxFdsDesc, {}, static_cast<double>(rl.rlim_cur));
  }
  std::vector<MetricSnapshot> out;
  m.MoveTo(&out);
  return out;
}

struct HttpExporter::Impl {
  std::unique_ptr<HttpServer> server;
};

StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::Start(const std::string& listen_address,
                                                            const std::string& telemetry_path, SnapshotSource source,
                                                            const WebConfig& web, ProfileSource profiles,
                                                            ProfileNamesSource profile_names) {
  if (telemetry_path.empty() || telemetry_path[0] != '/' || telemetry_path == "/") {
    return InvalidArgument("--web.telemetry-path=" + telemetry_path +
                           " must start with / and not be / (e.g. /metrics)");
  }
  std::unique_ptr<HttpExporter> e(new HttpExporter());
  e->impl_ = std::make_unique<Impl>();
  HttpServerOptions o;
  o.listen_address = listen_address;
  o.telemetry_path = telemetry_path;
  o.landing = [telemetry_path, profile_names = std::move(profile_names)] {
    return LandingPageHtml(telemetry_path, profile_names ? profile_names() : std::vector<std::string>{});
  };
  // Concurrent and pipelined scrapes share one rendered page per 100 ms, at most 3 pages alive
  // (PageCache) per exposition format; each response references the page, never copies it.
  // Each format renders on its own (its snapshot taken when it is asked for).
  // The formats share the bound of 3 pages and one render at a time (PageCacheShare). Scrapes
  // are counted per format (tracepoint_exporter_scrapes_total{format}).
  auto scrapes = std::make_shared<std::array<std::atomic<uint64_t>, 2>>();
  auto shared_source = std::make_shared<SnapshotSource>([source = std::move(source), scrapes] {
    std::vector<MetricSnapshot> metrics = source();
    SelfMetrics m;
    m.Add(kScrapesTotalDesc, {{"format", "text"}}, static_cast<double>((*scrapes)[0].load()));
    m.Add(kScrapesTotalDesc, {{"format", "protobuf"}}, static_cast<double>((*scrapes)[1].load()));
    m.MoveTo(&metrics);
    return metrics;
  });
  auto share = std::make_shared<PageCacheShare>();
  for (ExpositionFormat format : {ExpositionFormat::kText, ExpositionFormat::kProtobuf}) {
    auto renderer = std::make_shared<PageRenderer>([shared_source] { return (*shared_source)(); }, format);
    auto cache = std::make_shared<PageCache>([renderer] { return renderer->Render(); }, PageCache::kDefaultWindowNs,
                                             nullptr, PageCache::kDefaultMaxPages, share);
    const size_t i = format == ExpositionFormat::kText ? 0 : 1;
    (i == 0 ? o.metrics : o.metrics_protobuf) = [cache, scrapes, i] {
      (*scrapes)[i].fetch_add(1, std::memory_order_relaxed);
      return cache->Get();
    };
  }
  o.pprof = std::move(profiles);
  o.users = web.users;
  if (web.tls()) {
    o.cert_file = web.cert_file;
    o.key_file = web.key_file;
    for (auto [path, pem] : {std::pair{&web.cert_file, &o.cert_pem}, std::pair{&web.key_file, &o.key_pem}}) {
      auto text = ReadFileToString(*path);
      if (!text.ok()) return text.status().WithContext("TLS setup failed: tls_server_config");
      *pem = std::move(*text);
    }
  }
  auto server = HttpServer::Start(std::move(o));
  if (!server.ok()) return server.status();
  e->impl_->server = std::move(*server);
  return e;
}

HttpExporter::~HttpExporter() = default;

std::vector<int> HttpExporter::ports() const { return {impl_->server->port()}; }

}  // namespace tpe
