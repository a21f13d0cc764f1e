#include "exporter/exporter.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/scoped_fd.h"

namespace tpe {
namespace {

// The sample lines of a page, "name{labels}" -> value text, failing on a repeated key.
std::map<std::string, std::string> SampleLines(const std::string& page) {
  std::map<std::string, std::string> out;
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    auto [it, inserted] = out.emplace(line.substr(0, sp), line.substr(sp + 1));
    EXPECT_TRUE(inserted) << "two series with one label set: " << line;
  }
  return out;
}

// Comms "tpdup\xff", "tpdup\xfe" and "tpdup\xef\xbf\xbd" all render as
// "tpdup\uFFFD"; a cgroup re-created at one path renders its path twice. The page has one line
// per label set, with the values added (before the merge it had three lines for the comm, and
// Prometheus kept 1 of the 3).
TEST(SerializeTextTest, SeriesThatRenderOneLabelSetAreOneLine) {
  const std::string fffd = "tpdup\xef\xbf\xbd";
  MetricSnapshot c;
  c.name = "calls_total";
  c.help = "h";
  c.kind = MetricKind::kCounter;
  for (double v : {111.0, 222.0, 333.0})
    c.series.push_back(SeriesSnapshot{{{"comm", fffd}}, v, {}, 0, 0, std::nullopt});
  c.series.push_back(SeriesSnapshot{{{"comm", "other"}}, 5, {}, 0, 0, std::nullopt});
  MetricSnapshot h;
  h.name = "lat_seconds";
  h.help = "h";
  h.kind = MetricKind::kHistogram;
  h.bucket_bounds = {0.5};
  h.series.push_back(SeriesSnapshot{{{"cgroup", "/x"}}, 0, {2, 1}, 1.0, 3, std::nullopt});
  h.series.push_back(SeriesSnapshot{{{"cgroup", "/x"}}, 0, {0, 4}, 4.0, 4, std::nullopt});
  auto lines = SampleLines(SerializeText({c, h}));
  EXPECT_EQ(lines["calls_total{comm=\"" + fffd + "\"}"], "666");
  EXPECT_EQ(lines["calls_total{comm=\"other\"}"], "5");
  EXPECT_EQ(lines["lat_seconds_count{cgroup=\"/x\"}"], "7");
  EXPECT_EQ(lines["lat_seconds_sum{cgroup=\"/x\"}"], "5");
  EXPECT_EQ(lines["lat_seconds_bucket{cgroup=\"/x\",le=\"0.5\"}"], "2");
  EXPECT_EQ(lines["lat_seconds_bucket{cgroup=\"/x\",le=\"+Inf\"}"], "7");
  EXPECT_EQ(lines.size(), 2u + 4u);
}

// A line of /proc/self/status ("VmHWM", "VmRSS"), in bytes (proc(5): the value is in kB).
uint64_t StatusBytes(const std::string& key) {
  auto status = ReadFileToString("/proc/self/status");
  if (!status.ok()) return 0;
  const size_t p = status->find("\n" + key + ":");
  if (p == std::string::npos) return 0;
  return std::stoull(status->substr(p + key.size() + 2)) * 1024;
}

// Resets VmHWM to the current RSS (proc(5): writing 5 to /proc/PID/clear_refs, Linux 4.0).
bool ResetPeakRss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return f.good();
}

// One GET of `path` on a keep-alive connection; the body is counted, not kept (the scrapers
// must not add pages of their own to this process's RSS). Returns the body's size, or -1 when
// the response is not a complete 200.
int64_t ScrapeOnce(int fd, const std::string& path) {
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) return -1;
  std::string head;
  char buf[65536];
  size_t end = std::string::npos;
  while ((end = head.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return -1;
    head.append(buf, static_cast<size_t>(n));
  }
  if (head.rfind("HTTP/1.1 200 ", 0) != 0) return -1;
  const size_t cl = head.find("Content-Length: ");
  if (cl == std::string::npos || cl > end) return -1;
  const int64_t length = std::stoll(head.substr(cl + 16));
  int64_t left = length - static_cast<int64_t>(head.size() - end - 4);
  while (left > 0) {
    const ssize_t n = ::recv(fd, buf, std::min<int64_t>(left, sizeof(buf)), 0);
    if (n <= 0) return -1;
    left -= n;
  }
  return left == 0 ? length : -1;
}

ScopedFd ConnectLoopback(int port) {
  ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return ScopedFd();
  timeval tv{30, 0};  // a hung server fails the test instead of hanging it
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// ~100,000 counter series, each ~110 bytes on the page: an 11 MB page.
std::vector<MetricSnapshot> LargeSnapshot() {
  constexpr int kSeries = 100'000;
  MetricSnapshot m;
  m.name = "tpe_test_events_total";
  m.help = "Events per task.";
  m.kind = MetricKind::kCounter;
  m.series.reserve(kSeries);
  char comm[32], cgroup[64];
  for (int i = 0; i < kSeries; ++i) {
    std::snprintf(comm, sizeof(comm), "worker_%06d", i);
    std::snprintf(cgroup, sizeof(cgroup), "/system.slice/service-%06d.service", i);
    m.series.push_back(SeriesSnapshot{
        {{"cgroup", cgroup}, {"comm", comm}, {"pid", std::to_string(100000 + i)}}, 1e6 + i, {}, 0, 0, std::nullopt});
  }
  std::vector<MetricSnapshot> out;
  out.push_back(std::move(m));
  return out;
}

// 16 concurrent scrapes of a 10 MB page left the daemon at 650 MB of RSS:
// each response had its own copy of the page, and malloc kept what they freed. Now every
// response references one rendered page, at most 3 pages are alive, and each render's working
// memory is handed back. The peak RSS is measured (VmHWM, reset through clear_refs) against
// the peak of one scrape alone.
class LargePageTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's quarantine keeps freed memory: RSS does not measure the exporter. The
    // scrapes still run, for ASan to check the pages' lifetimes across threads.
    measure_ = false;
#endif
    if (!ResetPeakRss()) GTEST_SKIP() << "cannot write /proc/self/clear_refs to reset VmHWM (Linux 4.0)";
    rss0_ = StatusBytes("VmRSS");
    auto exporter = HttpExporter::Start("127.0.0.1:0", "/metrics", LargeSnapshot);
    ASSERT_TRUE(exporter.ok()) << exporter.status().ToString();
    exporter_ = std::move(*exporter);
    port_ = exporter_->ports()[0];
    // One scrape alone: the page's size, and what one render costs at its peak. Measured on
    // the second render, past the cache's window: the first one's large blocks are mmapped by
    // malloc, later ones come from its arenas (which raises the peak by about a page).
    ScopedFd one = ConnectLoopback(port_);
    ASSERT_GT(ScrapeOnce(one.get(), "/metrics"), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    ASSERT_TRUE(ResetPeakRss());
    page_ = ScrapeOnce(one.get(), "/metrics");
    ASSERT_GT(page_, 10'000'000);
    single_ = StatusBytes("VmHWM") - rss0_;
    ASSERT_TRUE(ResetPeakRss());
  }

  // `n` clients scraping in a loop on keep-alive connections for `duration`; returns the
  // number of complete scrapes, counting incomplete or short ones in *failures.
  int Scrape(int n, std::chrono::milliseconds duration, int* failures) {
    std::atomic<bool> stop{false};
    std::atomic<int> scrapes{0}, failed{0};
    std::vector<std::thread> scrapers;
    for (int i = 0; i < n; ++i) {
      scrapers.emplace_back([&] {
        ScopedFd fd = ConnectLoopback(port_);
        while (!stop.load()) {
          if (ScrapeOnce(fd.get(), "/metrics") < page_ / 2) {  // the size varies with process_* only
            failed.fetch_add(1);
            return;
          }
          scrapes.fetch_add(1);
        }
      });
    }
    std::this_thread::sleep_for(duration);
    stop.store(true);
    for (auto& t : scrapers) t.join();
    *failures = failed.load();
    return scrapes.load();
  }

  uint64_t PeakGrowth() const { return StatusBytes("VmHWM") - rss0_; }
  uint64_t Pages(uint64_t n) const { return n * static_cast<uint64_t>(page_); }

  bool measure_ = true;  // false: the peak RSS says nothing (sanitizer builds)
  uint64_t rss0_ = 0;    // before the exporter started
  std::unique_ptr<HttpExporter> exporter_;
  int port_ = 0;
  int64_t page_ = 0;     // bytes
  uint64_t single_ = 0;  // peak RSS growth of one scrape alone
};

TEST_F(LargePageTest, SixteenConcurrentScrapersCostAFewPagesMoreThanOne) {
  int failures = 0;
  const int scrapes = Scrape(16, std::chrono::milliseconds(3000), &failures);
  const uint64_t peak = PeakGrowth();
  const uint64_t after = StatusBytes("VmRSS") - rss0_;
  std::printf(
      "page %.1f MB; peak RSS growth: one scrape %.1f MB, 16 scrapers %.1f MB (%d scrapes); after them %.1f MB\n",
      page_ / 1e6, single_ / 1e6, peak / 1e6, scrapes, after / 1e6);
  EXPECT_EQ(failures, 0);
  EXPECT_GE(scrapes, 16);
  if (!measure_) GTEST_SKIP() << "no memory bound checked: AddressSanitizer build";
  EXPECT_LT(peak, single_ + Pages(4)) << "16 concurrent scrapes must cost at most a few pages more than one";
  // Between scrapes the process holds the cached page, not a render's working memory per thread.
  EXPECT_LT(after, single_) << "the memory of the renders must be handed back";
}

// Clients that send a GET and never read pin the page their response references until the
// request deadline (30 s). Eight of them, one per 100 ms window, would pin eight pages; at most
// 3 pages are alive, so later requests get the newest page instead, and 8 fast scrapers
// meanwhile still get complete pages.
TEST_F(LargePageTest, ClientsThatDoNotReadPinAtMostThreePages) {
  std::vector<ScopedFd> stuck;
  for (int i = 0; i < 8; ++i) {
    stuck.push_back(ConnectLoopback(port_));
    const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send(stuck.back().get(), get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  int failures = 0;
  const int scrapes = Scrape(8, std::chrono::milliseconds(2000), &failures);
  const uint64_t peak = PeakGrowth();
  std::printf(
      "page %.1f MB; peak RSS growth: one scrape %.1f MB, 8 stuck clients and 8 scrapers %.1f MB (%d scrapes)\n",
      page_ / 1e6, single_ / 1e6, peak / 1e6, scrapes);
  EXPECT_EQ(failures, 0);
  EXPECT_GE(scrapes, 8);
  if (!measure_) GTEST_SKIP() << "no memory bound checked: AddressSanitizer build";
  EXPECT_LT(peak, single_ + Pages(4)) << "responses nobody reads must not pin a page each";
}

TEST(LandingPageTest, LinksEachProfilesFlameGraphAndPprof) {
  EXPECT_EQ(LandingPageHtml("/metrics").find("Profiles"), std::string::npos);
  const std::string html = LandingPageHtml("/metrics", {"cpu", "a b<&>\"'"});
  EXPECT_NE(html.find("<a href=\"/metrics\">Metrics</a>"), std::string::npos) << html;
  EXPECT_NE(html.find("<a href=\"/flamegraph/cpu\">flame graph</a>"), std::string::npos) << html;
  EXPECT_NE(html.find("<a href=\"/flamegraph/cpu?seconds=30\">"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"/debug/pprof/cpu\">pprof</a>"), std::string::npos);
  // A name is text escaped for HTML, and one URL path segment in links.
  EXPECT_NE(html.find("<li>a b&lt;&amp;&gt;&quot;&#39;: "), std::string::npos) << html;
  EXPECT_NE(html.find("/flamegraph/a%20b%3C%26%3E%22%27\""), std::string::npos) << html;
}

}  // namespace
}  // namespace tpe
