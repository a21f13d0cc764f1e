#include "exporter/exporter.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

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

// Issue 17 item 2: comms "tpdup\xff", "tpdup\xfe" and "tpdup\xef\xbf\xbd" all render as
// "tpdup\uFFFD"; a cgroup re-created at one path renders its path twice. The page has one line
// per label set, with the values added (before the merge it had three lines for the comm).
TEST(SerializeTextTest, SeriesThatRenderOneLabelSetAreOneLine) {
  const std::string fffd = "tpdup\xef\xbf\xbd";
  MetricSnapshot c;
  c.name = "calls_total";
  c.help = "h";
  c.kind = MetricKind::kCounter;
  for (double v : {111.0, 222.0, 333.0}) c.series.push_back(SeriesSnapshot{{{"comm", fffd}}, v, {}, 0, 0});
  c.series.push_back(SeriesSnapshot{{{"comm", "other"}}, 5, {}, 0, 0});
  MetricSnapshot h;
  h.name = "lat_seconds";
  h.help = "h";
  h.kind = MetricKind::kHistogram;
  h.bucket_bounds = {0.5};
  h.series.push_back(SeriesSnapshot{{{"cgroup", "/x"}}, 0, {2, 1}, 1.0, 3});
  h.series.push_back(SeriesSnapshot{{{"cgroup", "/x"}}, 0, {0, 4}, 4.0, 4});
  auto lines = SampleLines(SerializeText({c, h}));
  EXPECT_EQ(lines["calls_total{comm=\"" + fffd + "\"}"], "666");
  EXPECT_EQ(lines["calls_total{comm=\"other\"}"], "5");
  EXPECT_EQ(lines["lat_seconds_count{cgroup=\"/x\"}"], "7");
  EXPECT_EQ(lines["lat_seconds_sum{cgroup=\"/x\"}"], "5");
  EXPECT_EQ(lines["lat_seconds_bucket{cgroup=\"/x\",le=\"0.5\"}"], "2");
  EXPECT_EQ(lines["lat_seconds_bucket{cgroup=\"/x\",le=\"+Inf\"}"], "7");
  EXPECT_EQ(lines.size(), 2u + 4u);
}

}  // namespace
}  // namespace tpe
