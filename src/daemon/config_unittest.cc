#include "daemon/config.h"

#include <gtest/gtest.h>

#include "common/file_util.h"

namespace tpe {
namespace {

std::string Err(const std::string& json) {
  auto c = ParseConfig(json, "cfg.json");
  EXPECT_FALSE(c.ok()) << json;
  return c.ok() ? "" : c.status().message();
}

const char* kGood = R"({
  "settings": {"ring_buffer_pages": 16, "max_series_per_metric": 500},
  "metrics": [
    {"name": "a_total", "help": "h", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "filter": "common_pid != 1", "labels": [{"name": "comm", "source": "comm"},
                                               {"name": "nr", "field": "__syscall_nr", "decode": "hex"}]},
    {"name": "b_total", "type": "counter", "event": "sched:sched_switch"}
  ]})";

TEST(ConfigTest, ParsesAValidConfig) {
  auto c = ParseConfig(kGood, "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->settings.ring_buffer_pages, 16u);
  EXPECT_EQ(c->settings.max_series_per_metric, 500u);
  ASSERT_EQ(c->metrics.size(), 2u);
  EXPECT_EQ(c->metrics[0].filter, "common_pid != 1");
  ASSERT_EQ(c->metrics[0].labels.size(), 2u);
  EXPECT_EQ(c->metrics[0].labels[1].decode, "hex");
  EXPECT_EQ(c->metrics[0].labels[1].json_path, "metrics[0].labels[1]");
  EXPECT_EQ(c->metrics[1].help, "sched:sched_switch counter");
}

TEST(ConfigTest, ShippedConfigsParse) {
  for (const char* f : {"default.json", "examples.json", "latency.json"}) {
    auto c = LoadConfig(std::string(TPE_SOURCE_DIR) + "/config/" + f);
    EXPECT_TRUE(c.ok()) << f << ": " << c.status().ToString();
  }
}

TEST(ConfigTest, EveryErrorNamesFilePathAndWhatIsValid) {
  EXPECT_NE(Err("{\"metrics\": [").find("cfg.json: malformed JSON"), std::string::npos);
  EXPECT_EQ(Err("[]"), "cfg.json: $: the config must be a JSON object with \"metrics\" (and optional \"settings\")");
  EXPECT_EQ(Err("{}"), "cfg.json: $: missing required key \"metrics\" (an array of metric objects)");
  EXPECT_EQ(Err(R"({"metrics": [], "extra": 1})"),
            "cfg.json: $: unknown key \"extra\" (valid keys: metrics, settings)");
  EXPECT_EQ(Err(R"({"metrics": []})"), "cfg.json: metrics: must be a non-empty array of metric objects");
  EXPECT_EQ(Err(R"({"settings": {"ring_buffer_pages": 3}, "metrics": [{}]})"),
            "cfg.json: settings.ring_buffer_pages: 3 is not a power of two (1, 2, 4, ..., 4096)");
  EXPECT_EQ(Err(R"({"settings": {"ring_buffer_pages": -1}, "metrics": [{}]})"),
            "cfg.json: settings.ring_buffer_pages: must be a whole number from 1 to 4096");
  EXPECT_EQ(Err(R"({"settings": {"ring_pages": 4}, "metrics": [{}]})"),
            "cfg.json: settings: unknown key \"ring_pages\" (valid keys: max_series_per_metric, ring_buffer_pages)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "event": "s:e"}]})"),
            "cfg.json: metrics[0]: missing required key \"type\"");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "gauge", "event": "s:e"}]})"),
            "cfg.json: metrics[0].type: \"gauge\" is not one of counter, histogram, latency");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a-b_total", "type": "counter", "event": "s:e"}]})"),
            "cfg.json: metrics[0].name: \"a-b_total\" is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "calls", "type": "counter", "event": "s:e"}]})"),
            "cfg.json: metrics[0].name: counter \"calls\" must end in _total (e.g. \"calls_total\")");
  EXPECT_NE(Err(R"({"metrics": [{"name": "process_x_total", "type": "counter", "event": "s:e"}]})").find("reserved"),
            std::string::npos);
  EXPECT_EQ(
      Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "sched_switch"}]})"),
      "cfg.json: metrics[0].event: \"sched_switch\" is not of the form \"system:event\" (e.g. \"sched:sched_switch\")");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "lables": []}]})"),
            "cfg.json: metrics[0]: unknown key \"lables\" (valid keys: event, filter, help, labels, name, type)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "filter": 3}]})"),
            "cfg.json: metrics[0].filter: must be a string, not number");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e"},
                                {"name": "a_total", "type": "counter", "event": "s:f"}]})"),
            "cfg.json: metrics[1].name: duplicate metric name \"a_total\"");
}

TEST(ConfigTest, LabelErrors) {
  auto metric = [](const std::string& labels) {
    return R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "labels": )" + labels + "}]}";
  };
  EXPECT_EQ(Err(metric("{}")), "cfg.json: metrics[0].labels: must be an array of label objects");
  EXPECT_EQ(Err(metric(R"([{"name": "x"}])")),
            "cfg.json: metrics[0].labels[0]: a label needs exactly one of \"field\" (a tracepoint field) or \"source\" "
            "(comm, pid, tid, cpu)");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "field": "a", "source": "comm"}])")),
            "cfg.json: metrics[0].labels[0]: a label needs exactly one of \"field\" (a tracepoint field) or \"source\" "
            "(comm, pid, tid, cpu)");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "source": "uid"}])")),
            "cfg.json: metrics[0].labels[0].source: \"uid\" is not one of comm, pid, tid, cpu");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "field": "a", "decode": "symbolc"}])")),
            "cfg.json: metrics[0].labels[0].decode: \"symbolc\" is not one of auto, hex, inet, symbolic, syscall");
  EXPECT_EQ(Err(metric(R"([{"name": "__x", "field": "a"}])")),
            "cfg.json: metrics[0].labels[0].name: \"__x\" is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, not "
            "starting with __)");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "field": "a"}, {"name": "x", "field": "b"}])")),
            "cfg.json: metrics[0].labels[1].name: duplicate label name \"x\"");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "source": "pid", "decode": "hex"}])")),
            "cfg.json: metrics[0].labels[0].decode: decode applies to \"field\" labels only; source \"pid\" has none");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "field": "a", "colour": 1}])")),
            "cfg.json: metrics[0].labels[0]: unknown key \"colour\" (valid keys: decode, field, name, source)");
}

TEST(ConfigTest, HistogramAndLatency) {
  auto c = ParseConfig(R"({"metrics": [
    {"name": "bytes", "type": "histogram", "event": "net:net_dev_xmit", "value": {"field": "len", "scale": 0.5},
     "buckets": {"type": "linear", "start": 0, "width": 100, "count": 5}},
    {"name": "lat_seconds", "type": "latency",
     "start": [{"event": "sched:sched_waking", "key": ["pid"]},
               {"event": "sched:sched_switch", "key": ["prev_pid"], "filter": "prev_state == 0"}],
     "end": {"event": "sched:sched_switch", "key": ["next_pid"]},
     "labels": [{"name": "comm", "field": "next_comm", "from": "end"}],
     "buckets": {"type": "exp2", "min": 1e-6, "max": 1}, "max_inflight": 500, "timeout_seconds": 2.5}]})",
                       "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->metrics[0].value.field, "len");
  EXPECT_EQ(c->metrics[0].value.scale, 0.5);
  EXPECT_EQ(c->metrics[0].buckets.count, 5u);
  const MetricConfig& l = c->metrics[1];
  ASSERT_EQ(l.starts.size(), 2u);
  EXPECT_EQ(l.starts[1].filter, "prev_state == 0");
  EXPECT_EQ(l.starts[1].json_path, "metrics[1].start[1]");
  EXPECT_EQ(l.end.key, std::vector<std::string>{"next_pid"});
  EXPECT_EQ(l.labels[0].from, "end");
  EXPECT_EQ(l.max_inflight, 500u);
  EXPECT_EQ(l.timeout_seconds, 2.5);
}

TEST(ConfigTest, HistogramAndLatencyErrors) {
  const std::string hist = R"({"name": "b", "type": "histogram", "event": "net:net_dev_xmit", )";
  EXPECT_EQ(Err("{\"metrics\": [" + hist + R"("buckets": {"type": "exp2", "min": 1, "max": 2}}]})"),
            "cfg.json: metrics[0]: missing required key \"value\" (e.g. {\"field\": \"len\"})");
  EXPECT_EQ(
      Err("{\"metrics\": [" + hist + R"("value": {"field": "len"}}]})"),
      "cfg.json: metrics[0]: missing required key \"buckets\" (e.g. {\"type\": \"exp2\", \"min\": 1, \"max\": 65536})");
  EXPECT_EQ(Err("{\"metrics\": [" + hist + R"("value": {"field": "len"}, "buckets": {"type": "log"}}]})"),
            "cfg.json: metrics[0].buckets.type: \"log\" is not one of exp2, linear, explicit");
  EXPECT_EQ(Err("{\"metrics\": [" + hist +
                R"("value": {"field": "len", "scale": 0}, "buckets": {"type": "exp2", "min": 1, "max": 2}}]})"),
            "cfg.json: metrics[0].value.scale: must be a finite non-zero number");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "b_total", "type": "histogram", "event": "a:b"}]})"),
            "cfg.json: metrics[0].name: histogram \"b_total\" must not end in _total (reserved for counters)");
  const std::string lat = R"({"metrics": [{"name": "l_seconds", "type": "latency", )";
  const std::string b = R"("buckets": {"type": "exp2", "min": 1e-6, "max": 1})";
  EXPECT_EQ(Err(lat + R"("end": {"event": "a:b", "key": ["x"]}, )" + b + "}]}"),
            "cfg.json: metrics[0]: missing required key \"start\" (e.g. {\"event\": \"sched:sched_waking\", \"key\": "
            "[\"pid\"]})");
  EXPECT_EQ(
      Err(lat + R"("start": {"event": "a:b", "key": ["x", "y"]}, "end": {"event": "a:c", "key": ["x"]}, )" + b + "}]}"),
      "cfg.json: metrics[0].start.key: has 2 fields but end.key has 1; start and end keys must match");
  EXPECT_EQ(Err(lat + R"("start": {"event": "a:b", "key": []}, "end": {"event": "a:c", "key": ["x"]}, )" + b + "}]}"),
            "cfg.json: metrics[0].start.key: must be an array of 1 to 4 field names");
  EXPECT_EQ(
      Err(lat +
          R"("start": {"event": "a:b", "key": ["x"]}, "end": {"event": "a:c", "key": ["x"]}, "labels": [{"name": "n", "source": "comm", "from": "middle"}], )" +
          b + "}]}"),
      "cfg.json: metrics[0].labels[0].from: \"middle\" is not one of start, end");
  EXPECT_EQ(
      Err(R"({"metrics": [{"name": "l", "type": "latency", "start": {"event": "a:b", "key": ["x"]}, "end": {"event": "a:c", "key": ["x"]}, )" +
          b + "}]}"),
      "cfg.json: metrics[0].name: latency \"l\" is in seconds and must end in _seconds");
  EXPECT_EQ(
      Err(R"({"metrics": [{"name": "c_total", "type": "counter", "event": "a:b", "labels": [{"name": "n", "source": "comm", "from": "end"}]}]})"),
      "cfg.json: metrics[0].labels[0]: unknown key \"from\" (valid keys: decode, field, name, source)");
}

TEST(ConfigTest, MissingFileNamesIt) {
  auto c = LoadConfig("/nonexistent/cfg.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "--config.file: cannot open /nonexistent/cfg.json: No such file or directory");
}

}  // namespace
}  // namespace tpe
