// The protobuf exposition: the page parses with the classes protoc generated
// from client_model's metrics.proto and equals the text page metric by metric; the HTTP server
// serves it to a scrape whose Accept header prefers it, and text to every other.
#include <arpa/inet.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <gtest/gtest.h>
#include <io/prometheus/client/metrics.pb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/scoped_fd.h"
#include "exporter/content_negotiation.h"
#include "exporter/exporter.h"

namespace tpe {
namespace {

namespace pb = io::prometheus::client;

// Every length-delimited MetricFamily of a page; fails the test on a malformed message.
std::vector<pb::MetricFamily> ParseProtobufPage(const std::string& page) {
  std::vector<pb::MetricFamily> out;
  google::protobuf::io::ArrayInputStream in(page.data(), static_cast<int>(page.size()));
  for (;;) {
    pb::MetricFamily f;
    bool clean_eof = false;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&f, &in, &clean_eof)) {
      EXPECT_TRUE(clean_eof) << "malformed message after " << out.size() << " families";
      break;
    }
    out.push_back(std::move(f));
  }
  return out;
}

// A label value as the text format writes it (\\, \", \n escaped).
std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Key(const std::string& name, const pb::Metric& m, const std::string& extra = "") {
  std::string labels;
  for (const auto& l : m.label())
    labels += (labels.empty() ? "" : ",") + l.name() + "=\"" + EscapeLabel(l.value()) + "\"";
  if (!extra.empty()) labels += (labels.empty() ? "" : ",") + extra;
  return labels.empty() ? name : name + "{" + labels + "}";
}

std::string FormatBound(double b) {
  if (std::isinf(b)) return "+Inf";
  std::ostringstream o;
  o.precision(17);
  o << b;
  return o.str();
}

// The samples of the protobuf page as the text page names them: "name{labels}" -> value, and
// "# TYPE name" -> type, "# HELP name" -> help.
std::map<std::string, std::string> Flatten(const std::vector<pb::MetricFamily>& families,
                                           std::map<std::string, double>* values) {
  std::map<std::string, std::string> meta;
  for (const auto& f : families) {
    static const std::map<pb::MetricType, std::string> kTypes = {
        {pb::COUNTER, "counter"}, {pb::GAUGE, "gauge"}, {pb::HISTOGRAM, "histogram"}, {pb::UNTYPED, "untyped"}};
    meta["# TYPE " + f.name()] = kTypes.at(f.type());
    meta["# HELP " + f.name()] = f.help();
    for (const auto& m : f.metric()) {
      switch (f.type()) {
        case pb::COUNTER:
          (*values)[Key(f.name(), m)] = m.counter().value();
          break;
        case pb::GAUGE:
          (*values)[Key(f.name(), m)] = m.gauge().value();
          break;
        case pb::HISTOGRAM:
          (*values)[Key(f.name() + "_count", m)] = static_cast<double>(m.histogram().sample_count());
          (*values)[Key(f.name() + "_sum", m)] = m.histogram().sample_sum();
          for (const auto& b : m.histogram().bucket()) {
            (*values)[Key(f.name() + "_bucket", m, "le=\"" + FormatBound(b.upper_bound()) + "\"")] =
                static_cast<double>(b.cumulative_count());
          }
          break;
        default:
          ADD_FAILURE() << f.name() << ": unexpected type " << f.type();
      }
    }
  }
  return meta;
}

// The text page the same way; HELP text unescaped (\\ and \n).
std::map<std::string, std::string> FlattenText(const std::string& page, std::map<std::string, double>* values) {
  std::map<std::string, std::string> meta;
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0 || line.rfind("# HELP ", 0) == 0) {
      const size_t sp = line.find(' ', 7);
      std::string text = line.substr(sp + 1), help;
      for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) {
          help += text[i + 1] == 'n' ? '\n' : text[i + 1];
          ++i;
        } else {
          help += text[i];
        }
      }
      meta[line.substr(0, sp)] = help;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    std::string key = line.substr(0, sp);
    // A bucket's bound as the protobuf side formats it (the text page writes "1e-06").
    if (const size_t le = key.find("le=\""); le != std::string::npos) {
      const size_t end = key.find('"', le + 4);
      const std::string bound = key.substr(le + 4, end - le - 4);
      key = key.substr(0, le + 4) + FormatBound(bound == "+Inf" ? INFINITY : std::strtod(bound.c_str(), nullptr)) +
            key.substr(end);
    }
    (*values)[key] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return meta;
}

// The text format writes values with 16 significant digits: equal within that.
void ExpectSameValues(const std::map<std::string, double>& text, const std::map<std::string, double>& proto) {
  ASSERT_EQ(text.size(), proto.size());
  for (const auto& [key, v] : proto) {
    auto it = text.find(key);
    ASSERT_NE(it, text.end()) << key << " is on the protobuf page only";
    EXPECT_NEAR(it->second, v, std::abs(v) * 1e-15) << key;
  }
}

std::vector<MetricSnapshot> Families() {
  std::vector<MetricSnapshot> out;
  MetricSnapshot c;
  c.name = "tcp_retransmits_total";
  c.help = "Retransmits \\ per \"comm\"\nsecond line";
  c.kind = MetricKind::kCounter;
  c.series.push_back(SeriesSnapshot{{{"comm", "a\"b\\c\nd"}}, 12345, {}, 0, 0, std::nullopt});
  c.series.push_back(SeriesSnapshot{{{"comm", "tpdup\xef\xbf\xbd"}}, 1e18, {}, 0, 0, std::nullopt});
  c.series.push_back(SeriesSnapshot{{{"comm", "x"}}, 0.1, {}, 0, 0, std::nullopt});
  out.push_back(c);
  MetricSnapshot none;
  none.name = "plain_total";
  none.help = "h";
  none.kind = MetricKind::kCounter;
  none.series.push_back(SeriesSnapshot{{}, 7, {}, 0, 0, std::nullopt});
  out.push_back(none);
  MetricSnapshot g;
  g.name = "inflight";
  g.help = "g";
  g.kind = MetricKind::kGauge;
  g.series.push_back(SeriesSnapshot{{{"disk", "sda"}, {"op", "read"}}, -3.5, {}, 0, 0, std::nullopt});
  out.push_back(g);
  MetricSnapshot h;
  h.name = "latency_seconds";
  h.help = "l";
  h.kind = MetricKind::kHistogram;
  h.bucket_bounds = {1e-6, 0.001, 1};
  h.series.push_back(SeriesSnapshot{{{"cpu", "0"}}, 0, {1, 2, 3, 4}, 12.25, 10, std::nullopt});
  h.series.push_back(SeriesSnapshot{{{"cpu", "1"}}, 0, {0, 0, 0, 0}, 0, 0, std::nullopt});
  out.push_back(h);
  MetricSnapshot empty;  // a family with no series yet
  empty.name = "later_total";
  empty.help = "e";
  empty.kind = MetricKind::kCounter;
  out.push_back(empty);
  return out;
}

TEST(ProtobufExpositionTest, EqualsTheTextPageMetricByMetric) {
  const auto families = Families();
  const std::vector<pb::MetricFamily> parsed = ParseProtobufPage(SerializeProtobuf(families));
  ASSERT_EQ(parsed.size(), families.size());
  EXPECT_EQ(parsed[3].type(), pb::HISTOGRAM);
  ASSERT_EQ(parsed[3].metric(0).histogram().bucket_size(), 4);
  EXPECT_EQ(parsed[3].metric(0).histogram().bucket(3).cumulative_count(), 10u);
  EXPECT_TRUE(std::isinf(parsed[3].metric(0).histogram().bucket(3).upper_bound()));
  EXPECT_EQ(parsed[0].metric(0).label(0).value(), "a\"b\\c\nd");  // raw in protobuf, escaped in text
  std::map<std::string, double> text_values, proto_values;
  const auto text_meta = FlattenText(SerializeText(families), &text_values);
  const auto proto_meta = Flatten(parsed, &proto_values);
  EXPECT_EQ(text_meta, proto_meta);
  ExpectSameValues(text_values, proto_values);
  EXPECT_EQ(proto_values.size(), 3u + 1u + 1u + 2u * 6u);
}

// The buckets of one sign of a native histogram, decoded from spans and deltas as Prometheus
// decodes them: index -> count.
std::map<int32_t, uint64_t> DecodeNative(const google::protobuf::RepeatedPtrField<pb::BucketSpan>& spans,
                                         const google::protobuf::RepeatedField<int64_t>& deltas) {
  std::map<int32_t, uint64_t> out;
  int32_t index = 0;
  int64_t count = 0;
  int d = 0;
  for (int i = 0; i < spans.size(); ++i) {
    index += spans[i].offset();
    for (uint32_t j = 0; j < spans[i].length(); ++j, ++index) {
      count += deltas[d++];
      out[index] = static_cast<uint64_t>(count);
    }
  }
  EXPECT_EQ(d, deltas.size());
  return out;
}

TEST(ProtobufExpositionTest, NativeHistogramsAsSpansAndDeltas) {
  NativeSnapshot n;
  n.schema = 3;
  n.zero_threshold = 1e-9;
  n.zero_count = 3;
  n.positive = {{-3, 2}, {-2, 1}, {0, 5}, {5, 1}};
  n.negative = {{1, 1}};
  MetricSnapshot only;  // native buckets alone
  only.name = "native_seconds";
  only.help = "n";
  only.kind = MetricKind::kHistogram;
  only.classic = false;
  only.native_max_buckets = 160;
  only.series.push_back(SeriesSnapshot{{{"cpu", "0"}}, 0, {13}, 1.5, 13, n});
  MetricSnapshot both = only;  // classic buckets too
  both.name = "both_seconds";
  both.classic = true;
  both.bucket_bounds = {0.5};
  both.series[0].bucket_counts = {10, 3};
  MetricSnapshot reduced = only;  // 5 buckets > 3: the schema is lowered until at most 3
  reduced.name = "reduced_seconds";
  reduced.native_max_buckets = 3;
  const std::vector<MetricSnapshot> families = {only, both, reduced};
  const std::vector<pb::MetricFamily> parsed = ParseProtobufPage(SerializeProtobuf(families));
  ASSERT_EQ(parsed.size(), 3u);
  const pb::Histogram& h = parsed[0].metric(0).histogram();
  EXPECT_EQ(h.schema(), 3);
  EXPECT_EQ(h.zero_threshold(), 1e-9);
  EXPECT_EQ(h.zero_count(), 3u);
  EXPECT_EQ(h.sample_count(), 13u);
  EXPECT_EQ(h.sample_sum(), 1.5);
  EXPECT_EQ(h.bucket_size(), 0);  // no classic buckets
  ASSERT_EQ(h.positive_span_size(), 3);
  EXPECT_EQ(h.positive_span(0).offset(), -3);
  EXPECT_EQ(h.positive_span(0).length(), 2u);
  EXPECT_EQ(h.positive_span(1).offset(), 1);  // index 0 after -2: one gap (-1)
  EXPECT_EQ(h.positive_span(2).offset(), 4);  // index 5 after 0: gaps 1..4
  EXPECT_EQ(std::vector<int64_t>(h.positive_delta().begin(), h.positive_delta().end()),
            (std::vector<int64_t>{2, -1, 4, -4}));
  EXPECT_EQ(DecodeNative(h.positive_span(), h.positive_delta()),
            (std::map<int32_t, uint64_t>{{-3, 2}, {-2, 1}, {0, 5}, {5, 1}}));
  EXPECT_EQ(DecodeNative(h.negative_span(), h.negative_delta()), (std::map<int32_t, uint64_t>{{1, 1}}));
  const pb::Histogram& hb = parsed[1].metric(0).histogram();
  EXPECT_EQ(hb.schema(), 3);
  ASSERT_EQ(hb.bucket_size(), 2);
  EXPECT_EQ(hb.bucket(0).cumulative_count(), 10u);
  EXPECT_EQ(DecodeNative(hb.positive_span(), hb.positive_delta()).size(), 4u);
  // Reduced: positive -3,-2,0,5 at schema 3 are -1,-1,0,3 at 2; 0,0,0,2 at 1 (ceil(i/2) each
  // step); the negative 1 stays 1: 3 buckets at schema 1.
  const pb::Histogram& hr = parsed[2].metric(0).histogram();
  EXPECT_EQ(hr.schema(), 1);
  const auto pos = DecodeNative(hr.positive_span(), hr.positive_delta());
  const auto neg = DecodeNative(hr.negative_span(), hr.negative_delta());
  EXPECT_EQ(pos, (std::map<int32_t, uint64_t>{{0, 8}, {2, 1}}));
  EXPECT_EQ(neg, (std::map<int32_t, uint64_t>{{1, 1}}));
  uint64_t total = hr.zero_count();
  for (const auto& [i, c] : pos) total += c;
  for (const auto& [i, c] : neg) total += c;
  EXPECT_EQ(total, 13u);
  // The text page of a native-only histogram: its +Inf bucket, _sum and _count.
  const std::string text = SerializeText({only});
  EXPECT_NE(text.find("native_seconds_bucket{cpu=\"0\",le=\"+Inf\"} 13"), std::string::npos) << text;
  EXPECT_NE(text.find("native_seconds_count{cpu=\"0\"} 13"), std::string::npos) << text;
  EXPECT_EQ(text.find("le=\"0.5\""), std::string::npos);
}

// A whole response: status line + headers, then the body.
struct Response {
  std::string head, body;
};

Response Get(int port, const std::string& path, const std::string& accept) {
  Response r;
  ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return r;
  timeval tv{30, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                          (accept.empty() ? "" : "Accept: " + accept + "\r\n") + "\r\n";
  if (::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return r;
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof(buf), 0)) > 0;) all.append(buf, static_cast<size_t>(n));
  const size_t end = all.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4);
  return r;
}

TEST(ProtobufExpositionTest, ServedToScrapesThatPreferItWithTheSameFamilies) {
  auto exporter = HttpExporter::Start("127.0.0.1:0", "/metrics", [] { return Families(); });
  ASSERT_TRUE(exporter.ok()) << exporter.status().message();
  const int port = (*exporter)->ports()[0];
  const std::string prometheus =  // Prometheus 2.42 with native histograms on (captured)
      "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,"
      "application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,"
      "text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
  const Response proto = Get(port, "/metrics", prometheus);
  ASSERT_EQ(proto.head.rfind("HTTP/1.1 200 ", 0), 0u) << proto.head;
  EXPECT_NE(proto.head.find(std::string("Content-Type: ") + kProtobufContentType), std::string::npos) << proto.head;
  const Response text = Get(port, "/metrics", "");
  ASSERT_EQ(text.head.rfind("HTTP/1.1 200 ", 0), 0u) << text.head;
  EXPECT_NE(text.head.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << text.head;
  EXPECT_NE(text.head.find("Vary: Accept"), std::string::npos) << text.head;
  EXPECT_NE(proto.head.find("Vary: Accept"), std::string::npos) << proto.head;
  EXPECT_EQ(Get(port, "/metrics", "text/plain;version=0.0.4,*/*;q=0.1").body.substr(0, 7), "# HELP ");

  std::map<std::string, double> text_values, proto_values;
  auto text_meta = FlattenText(text.body, &text_values);
  auto proto_meta = Flatten(ParseProtobufPage(proto.body), &proto_values);
  EXPECT_EQ(text_meta, proto_meta);  // every family, process_* and the scrape duration included
  // Each request counted by its format before its page is rendered.
  EXPECT_EQ(proto_values.at("tracepoint_exporter_scrapes_total{format=\"protobuf\"}"), 1);
  EXPECT_EQ(proto_values.at("tracepoint_exporter_scrapes_total{format=\"text\"}"), 0);
  EXPECT_EQ(text_values.at("tracepoint_exporter_scrapes_total{format=\"protobuf\"}"), 1);
  EXPECT_EQ(text_values.at("tracepoint_exporter_scrapes_total{format=\"text\"}"), 1);
  // process_*, the previous scrape's duration and the scrape counts change between two scrapes:
  // the rest is equal.
  for (auto* values : {&text_values, &proto_values}) {
    std::erase_if(*values, [](const auto& kv) {
      return kv.first.rfind("process_", 0) == 0 || kv.first.rfind("tracepoint_exporter_scrape", 0) == 0;
    });
  }
  ExpectSameValues(text_values, proto_values);
  EXPECT_EQ(proto_values.at("tcp_retransmits_total{comm=\"x\"}"), 0.1);
}

}  // namespace
}  // namespace tpe
