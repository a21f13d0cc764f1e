#include "config/config.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/file_util.h"
#include "filter/filter.h"

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
  EXPECT_EQ(NameOf(c->metrics[0].labels[1].decode), "hex");
  EXPECT_EQ(c->metrics[0].labels[1].json_path, "metrics[0].labels[1]");
  EXPECT_EQ(c->metrics[1].help, "sched:sched_switch counter");
}

TEST(ConfigTest, ShippedConfigsParse) {
  for (const char* f : {"default.json", "examples.json", "latency.json", "syscalls.json"}) {
    auto c = LoadConfig(std::string(TPE_SOURCE_DIR) + "/config/" + f);
    EXPECT_TRUE(c.ok()) << f << ": " << c.status().ToString();
  }
}

TEST(ConfigTest, EveryErrorNamesFilePathAndWhatIsValid) {
  EXPECT_NE(Err("{\"metrics\": [").find("cfg.json: malformed JSON"), std::string::npos);
  EXPECT_EQ(Err("[]"), "cfg.json: $: the config must be a JSON object with \"metrics\" (and optional \"settings\")");
  EXPECT_EQ(Err("{}"), "cfg.json: $: missing required key \"metrics\" (an array of metric objects) or \"profiles\"");
  EXPECT_EQ(Err(R"({"metrics": [], "extra": 1})"),
            "cfg.json: $: unknown key \"extra\" (valid keys: metrics, profiles, settings)");
  EXPECT_EQ(Err(R"({"metrics": []})"),
            "cfg.json: metrics: must be a non-empty array (a config needs a metric or a profile)");
  EXPECT_EQ(Err(R"({"settings": {"ring_buffer_pages": 3}, "metrics": [{}]})"),
            "cfg.json: settings.ring_buffer_pages: 3 is not a power of two (1, 2, 4, ..., 4096)");
  EXPECT_EQ(Err(R"({"settings": {"ring_buffer_pages": -1}, "metrics": [{}]})"),
            "cfg.json: settings.ring_buffer_pages: must be a whole number from 1 to 4096, not -1");
  EXPECT_EQ(
      Err(R"({"settings": {"ring_pages": 4}, "metrics": [{}]})"),
      "cfg.json: settings: unknown key \"ring_pages\" (valid keys: bpf_cost_period_seconds, "
      "bpf_cost_window_seconds, bpf_preallocate_max_bytes, debuginfod_urls, max_pid_perf_events, "
      "max_series_per_metric, "
      "max_stacks_per_profile, probe_refresh_seconds, profile_max_frames, profile_stack_bytes, ring_buffer_pages, "
      "series_idle_timeout_seconds)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "event": "s:e"}]})"),
            "cfg.json: metrics[0]: missing required key \"type\"");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "summary", "event": "s:e"}]})"),
            "cfg.json: metrics[0].type: \"summary\" is not one of counter, histogram, latency, gauge");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "engine": "ebpf"}]})"),
            "cfg.json: metrics[0].engine: \"ebpf\" is not one of auto, bpf, perf");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a-b_total", "type": "counter", "event": "s:e"}]})"),
            "cfg.json: metrics[0].name: \"a-b_total\" is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "calls", "type": "counter", "event": "s:e"}]})"),
            "cfg.json: metrics[0].name: counter \"calls\" must end in _total (e.g. \"calls_total\")");
  EXPECT_NE(Err(R"({"metrics": [{"name": "process_x_total", "type": "counter", "event": "s:e"}]})").find("reserved"),
            std::string::npos);
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "sched_switch"}]})"),
            "cfg.json: metrics[0].event: \"sched_switch\" is not of the form \"system:event\" (e.g. "
            "\"sched:sched_switch\") nor a probe (uprobe:, uretprobe:, usdt:, "
            "kprobe:, kretprobe:)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "lables": []}]})"),
            "cfg.json: metrics[0]: unknown key \"lables\" (valid keys: args, engine, event, filter, help, labels, "
            "maxactive, name, pid, type, value)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "kprobe:f", "pid": 5}]})"),
            "cfg.json: metrics[0].pid: \"pid\" limits a uprobe, uretprobe or usdt probe to one process; "
            "\"kprobe:f\" is not one");
  EXPECT_NE(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "uprobe:/x:f", "pid": 0}]})")
                .find("metrics[0].pid"),
            std::string::npos);
  // Probe events: the name and the args are checked here; the ELF and the kernel at planning.
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "args": {"x": "arg0"}}]})"),
            "cfg.json: metrics[0].args: args are for probe events (uprobe:, uretprobe:, usdt:, kprobe:, kretprobe:); "
            "\"s:e\" is a tracepoint, whose fields are in its format");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "uprobe:/bin/x:f",
                    "args": {"x": "retval"}}]})"),
            "cfg.json: metrics[0].args.x: args.x \"retval\": retval is only for uretprobe: and kretprobe: events");
  EXPECT_NE(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "uprobe:bin/x:f"}]})")
                .find("metrics[0].event: \"uprobe:bin/x:f\" needs an absolute PATH"),
            std::string::npos);
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "filter": 3}]})"),
            "cfg.json: metrics[0].filter: must be a string, not number");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e"},
                                {"name": "a_total", "type": "counter", "event": "s:f"}]})"),
            "cfg.json: metrics[1].name: duplicate metric name \"a_total\"");
}

TEST(ConfigTest, FilterLongerThanTheKernelTakesIsRefusedWithItsLength) {
  // perf_event_set_filter() copies at most a page (NUL included): 4095 bytes pass, 4096 do not.
  const std::string ok_filter = "common_pid != 1" + std::string(kMaxFilterBytes - 15, ' ');
  auto c = ParseConfig(
      R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "filter": ")" + ok_filter + R"("}]})",
      "cfg.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  const std::string long_filter = ok_filter + " ";
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "filter": ")" + long_filter +
                R"("}]})"),
            "cfg.json: metrics[0].filter: is 4096 bytes long; the kernel accepts at most 4095 (one page): shorten it, "
            "e.g. match a range instead of listing values");
  EXPECT_NE(
      Err(R"({"metrics": [{"name": "l_seconds", "type": "latency", "start": [{"event": "s:e", "key": ["pid"], "filter": ")" +
          long_filter + R"("}], "end": {"event": "s:f", "key": ["pid"]}}]})")
          .find("metrics[0].start[0].filter: is 4096 bytes long"),
      std::string::npos);
}

TEST(ConfigTest, LabelErrors) {
  auto metric = [](const std::string& labels) {
    return R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "labels": )" + labels + "}]}";
  };
  EXPECT_EQ(Err(metric("{}")), "cfg.json: metrics[0].labels: must be an array of label objects");
  EXPECT_EQ(Err(metric(R"([{"name": "x"}])")),
            "cfg.json: metrics[0].labels[0]: a label needs exactly one of \"field\" (a tracepoint field) or \"source\" "
            "(comm, pid, tid, cpu, cgroup)");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "field": "a", "source": "comm"}])")),
            "cfg.json: metrics[0].labels[0]: a label needs exactly one of \"field\" (a tracepoint field) or \"source\" "
            "(comm, pid, tid, cpu, cgroup)");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "source": "uid"}])")),
            "cfg.json: metrics[0].labels[0].source: \"uid\" is not one of comm, pid, tid, cpu, cgroup");
  EXPECT_EQ(Err(metric(R"([{"name": "x", "field": "a", "decode": "symbolc"}])")),
            "cfg.json: metrics[0].labels[0].decode: \"symbolc\" is not one of auto, hex, inet, symbolic, syscall, "
            "errno, blkdev, ksym");
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
  EXPECT_EQ(NameOf(l.labels[0].from), "end");
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
            "cfg.json: metrics[0].buckets.type: \"log\" is not one of exp2, linear, explicit, native");
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

// ---- Input that must be an error, never an exception, a hang or unbounded memory ----------

using ::testing::HasSubstr;

// A one-histogram config with `buckets`, `value` and `labels` spliced in.
std::string Hist(const std::string& buckets, const std::string& value = R"({"field": "len"})",
                 const std::string& extra = "") {
  return R"({"metrics": [{"name": "h", "type": "histogram", "event": "net:net_dev_xmit", "value": )" + value +
         R"(, "buckets": )" + buckets + extra + "}]}";
}
// A one-latency config with `extra` keys spliced in.
std::string Lat(const std::string& extra) {
  return R"({"metrics": [{"name": "l_seconds", "type": "latency", "start": {"event": "a:b", "key": ["x"]},
             "end": {"event": "a:c", "key": ["x"]}, "buckets": {"type": "exp2", "min": 1, "max": 2})" +
         extra + "}]}";
}
const std::string kCounter = R"({"name": "c_total", "type": "counter", "event": "s:e"})";
// A config with kCounter and the settings `kv` (JSON members, e.g. "\"ring_buffer_pages\": 8").
std::string WithSettings(const std::string& kv) {
  return R"({"settings": {)" + kv + R"(}, "metrics": [)" + kCounter + "]}";
}

TEST(ConfigInputTest, NumberTooLargeForADoubleIsAnErrorWithItsPath) {
  EXPECT_EQ(Err(R"({"settings": {"ring_buffer_pages": 1e400}, "metrics": []})"),
            "cfg.json: settings.ring_buffer_pages: the number 1e400 (line 1, column 36) is too large; numbers must "
            "be within -1.7976931348623157e+308..1.7976931348623157e+308");
  EXPECT_THAT(Err(Hist(R"({"type": "exp2", "min": 1e400, "max": 2})")),
              HasSubstr("cfg.json: metrics[0].buckets.min: the number 1e400 "));
  EXPECT_THAT(Err(Hist(R"({"type": "exp2", "min": 1, "max": 2})", R"({"field": "len", "scale": -1e400})")),
              HasSubstr("cfg.json: metrics[0].value.scale: the number -1e400 "));
  EXPECT_THAT(Err(Hist(R"({"type": "explicit", "bounds": [1, 2, 1e400]})")),
              HasSubstr("cfg.json: metrics[0].buckets.bounds[2]: the number 1e400 "));
  EXPECT_THAT(Err("[[1], [2, 1E+999]]"), HasSubstr("cfg.json: $[1][1]: the number 1E+999 "));
  EXPECT_THAT(Err("1e400"), HasSubstr("cfg.json: $: the number 1e400 "));
  // A huge token is cut in the message.
  EXPECT_LT(Err("{\"x\": 1" + std::string(100000, '0') + "}").size(), 400u);
}

TEST(ConfigInputTest, MalformedJsonNamesLineColumnAndPath) {
  EXPECT_EQ(Err("{\"metrics\": [\n  {\"name\": }]}"),
            "cfg.json: malformed JSON at line 2, column 12 (at metrics[0].name): syntax error while parsing value - "
            "unexpected '}'; expected '[', '{', or a literal");
  EXPECT_THAT(Err("{\"metrics\": [1, 2,"), HasSubstr("(at metrics[2])"));
  EXPECT_THAT(Err(""), HasSubstr("cfg.json: malformed JSON at line 1, column 1 (at $)"));
}

TEST(ConfigInputTest, InvalidUtf8IsRejectedWithItsPathAndNeverEchoedRaw) {
  std::string e = Err("{\"metrics\": [{\"name\": \"a_total\", \"help\": \"caf\xc3\xa9 \xff\xfe\"}]}");
  EXPECT_THAT(e, HasSubstr("cfg.json: malformed JSON at line 1, column "));
  EXPECT_THAT(e, HasSubstr("(at metrics[0].help)"));
  EXPECT_THAT(e, HasSubstr("UTF-8"));
  for (unsigned char ch : e) EXPECT_LT(ch, 0x80) << e;  // the raw bytes are shown escaped
  // Overlong encodings and lone surrogates are not UTF-8 either.
  EXPECT_THAT(Err("{\"metrics\": [{\"help\": \"\xc0\xaf\"}]}"), HasSubstr("(at metrics[0].help)"));
  EXPECT_THAT(Err(R"({"metrics": [{"help": "\ud800"}]})"), HasSubstr("(at metrics[0].help)"));
  // Valid UTF-8 is kept as is.
  auto c = ParseConfig(
      R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "help": "caf\u00e9 \u2192 ok"}]})",
      "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->metrics[0].help, "caf\xc3\xa9 \xe2\x86\x92 ok");
}

TEST(ConfigInputTest, ControlCharactersAreRejected) {
  EXPECT_EQ(
      Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "filter": "pid == 1\u0000 || 1"}]})"),
      "cfg.json: metrics[0].filter: contains the control character U+0000 at byte 8; only tab and newline are "
      "allowed here");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e\u0000"}]})"),
            "cfg.json: metrics[0].event: contains the control character U+0000 at byte 3; control characters are "
            "not allowed here");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "help": "x\u001b[31m"}]})"),
            "cfg.json: metrics[0].help: contains the control character U+001B at byte 1; only tab and newline are "
            "allowed here");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "help": "x\u007f"}]})"),
            "cfg.json: metrics[0].help: contains the control character U+007F at byte 1; only tab and newline are "
            "allowed here");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "help": "x\u0085"}]})"),
            "cfg.json: metrics[0].help: contains the control character U+0085 at byte 1; only tab and newline are "
            "allowed here");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e",
                                  "labels": [{"name": "x", "field": "a\nb"}]}]})"),
            "cfg.json: metrics[0].labels[0].field: contains the control character U+000A at byte 1; control "
            "characters are not allowed here");
  EXPECT_EQ(Err(Lat("").replace(Lat("").find("[\"x\"]"), 5, "[\"x\\u0000\"]")),
            "cfg.json: metrics[0].start.key[0]: contains the control character U+0000 at byte 1; control characters "
            "are not allowed here");
  // Unknown keys are quoted with escapes in the message, not echoed raw.
  EXPECT_EQ(Err(R"({"metrics": [], "\u0007x": 1})"),
            "cfg.json: $: unknown key \"\\u0007x\" (valid keys: metrics, profiles, settings)");
  // Tab and newline are fine in help and filter.
  auto c = ParseConfig(
      R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "help": "a\tb\nc", "filter": "a == 1\n\t&& b == 2"}]})",
      "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->metrics[0].filter, "a == 1\n\t&& b == 2");
}

TEST(ConfigInputTest, EventNamesAreSystemColonEvent) {
  for (const char* bad : {"a b:c", "..:x", "x:..", ".:x", "a:b:c"}) {
    EXPECT_THAT(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": ")" + std::string(bad) + "\"}]}"),
                HasSubstr("is not of the form \"system:event\""))
        << bad;
  }
}

TEST(ConfigInputTest, DuplicateKeysAreRejected) {
  EXPECT_EQ(Err(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "name": "b_total"}]})"),
            "cfg.json: metrics[0]: duplicate key \"name\"; a key may appear once in an object");
}

TEST(ConfigInputTest, DeepNestingIsAnErrorNotACrash) {
  EXPECT_THAT(Err(std::string(1000000, '[') + std::string(1000000, ']')), HasSubstr("must be a JSON object"));
  EXPECT_THAT(Err("{\"metrics\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}"),
              HasSubstr("cfg.json: metrics[0]: a metric must be an object"));
  EXPECT_THAT(Err(std::string(1000000, '[')), HasSubstr("malformed JSON"));
}

// ---- Numbers: ranges, whole numbers --------------------------------------------------------

TEST(ConfigRangeTest, WholeNumbers) {
  EXPECT_EQ(Err(WithSettings(R"("ring_buffer_pages": 64.5)")),
            "cfg.json: settings.ring_buffer_pages: must be a whole number from 1 to 4096, not 64.5");
  EXPECT_EQ(Err(WithSettings(R"("ring_buffer_pages": 0)")),
            "cfg.json: settings.ring_buffer_pages: 0 is out of range 1..4096");
  EXPECT_EQ(Err(WithSettings(R"("ring_buffer_pages": 8192)")),
            "cfg.json: settings.ring_buffer_pages: 8192 is out of range 1..4096");
  EXPECT_EQ(Err(WithSettings(R"("ring_buffer_pages": 1e20)")),
            "cfg.json: settings.ring_buffer_pages: 1e+20 is out of range 1..4096");
  EXPECT_EQ(Err(WithSettings(R"("ring_buffer_pages": 18446744073709551616)")),
            "cfg.json: settings.ring_buffer_pages: 1.8446744073709552e+19 is out of range 1..4096");
  EXPECT_EQ(Err(WithSettings(R"("ring_buffer_pages": "64")")),
            "cfg.json: settings.ring_buffer_pages: must be a whole number from 1 to 4096, not string");
  EXPECT_EQ(Err(WithSettings(R"("max_series_per_metric": 0)")),
            "cfg.json: settings.max_series_per_metric: 0 is out of range 1..1000000");
  EXPECT_EQ(Err(WithSettings(R"("max_series_per_metric": 1000001)")),
            "cfg.json: settings.max_series_per_metric: 1000001 is out of range 1..1000000");
  EXPECT_EQ(Err(WithSettings(R"("max_series_per_metric": 99.9)")),
            "cfg.json: settings.max_series_per_metric: must be a whole number from 1 to 1000000, not 99.9");
  EXPECT_EQ(Err(WithSettings(R"("max_series_per_metric": -5)")),
            "cfg.json: settings.max_series_per_metric: must be a whole number from 1 to 1000000, not -5");
  // A whole number written as a float is that number, not truncated and not an error.
  auto c = ParseConfig(WithSettings(R"("ring_buffer_pages": 64.0, "max_series_per_metric": 1e6)"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->settings.ring_buffer_pages, 64u);
  EXPECT_EQ(c->settings.max_series_per_metric, 1000000u);
  c = ParseConfig(WithSettings(R"("ring_buffer_pages": 4096, "max_series_per_metric": 1)"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->settings.ring_buffer_pages, 4096u);
}

TEST(ConfigRangeTest, SeriesIdleTimeout) {
  auto c = ParseConfig(WithSettings(""), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->settings.series_idle_timeout_seconds, 600);
  for (auto [text, want] :
       std::vector<std::pair<std::string, double>>{{"0", 0}, {"0.001", 0.001}, {"2.5", 2.5}, {"31536000", 31536000}}) {
    c = ParseConfig(WithSettings(R"("series_idle_timeout_seconds": )" + text), "cfg.json");
    ASSERT_TRUE(c.ok()) << text << ": " << c.status().ToString();
    EXPECT_EQ(c->settings.series_idle_timeout_seconds, want) << text;
  }
  for (const char* bad : {"-1", "0.0001", "31536001", "1e300"}) {
    EXPECT_EQ(Err(WithSettings(R"("series_idle_timeout_seconds": )" + std::string(bad))),
              "cfg.json: settings.series_idle_timeout_seconds: must be 0 (series never expire) or a number of "
              "seconds from 0.001 to 31536000 (365 days), not " +
                  std::string(bad == std::string("1e300") ? "1e+300" : bad));
  }
  EXPECT_EQ(Err(WithSettings(R"("series_idle_timeout_seconds": "10m")")),
            "cfg.json: settings.series_idle_timeout_seconds: must be a number, not string");
}

TEST(ConfigRangeTest, BpfCostWindows) {
  auto c = ParseConfig(WithSettings(""), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->settings.bpf_cost_window_seconds, 1);
  EXPECT_EQ(c->settings.bpf_cost_period_seconds, 60);
  c = ParseConfig(WithSettings(R"("bpf_cost_period_seconds": 0, "bpf_cost_window_seconds": 5)"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();  // off: any window
  EXPECT_EQ(c->settings.bpf_cost_period_seconds, 0);
  c = ParseConfig(WithSettings(R"("bpf_cost_period_seconds": 2, "bpf_cost_window_seconds": 0.5)"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->settings.bpf_cost_window_seconds, 0.5);
  EXPECT_EQ(Err(WithSettings(R"("bpf_cost_period_seconds": 100000)")),
            "cfg.json: settings.bpf_cost_period_seconds: must be 0 (no cost windows) or a number of seconds from "
            "0.01 to 86400, not 100000");
  EXPECT_EQ(Err(WithSettings(R"("bpf_cost_period_seconds": 10, "bpf_cost_window_seconds": 11)")),
            "cfg.json: settings.bpf_cost_window_seconds: must be a number of seconds from 0.01 up to "
            "settings.bpf_cost_period_seconds (10), not 11");
  EXPECT_EQ(Err(WithSettings(R"("bpf_cost_window_seconds": 0)")),
            "cfg.json: settings.bpf_cost_window_seconds: must be a number of seconds from 0.01 up to "
            "settings.bpf_cost_period_seconds (60), not 0");
}

TEST(ConfigRangeTest, LatencyMaxInflightAndTimeout) {
  EXPECT_EQ(Err(Lat(R"(, "max_inflight": 0)")), "cfg.json: metrics[0].max_inflight: 0 is out of range 1..1000000");
  EXPECT_EQ(Err(Lat(R"(, "max_inflight": 100000000)")),
            "cfg.json: metrics[0].max_inflight: 100000000 is out of range 1..1000000");
  EXPECT_EQ(Err(Lat(R"(, "max_inflight": 1e8)")),
            "cfg.json: metrics[0].max_inflight: 100000000 is out of range 1..1000000");
  EXPECT_EQ(Err(Lat(R"(, "max_inflight": 10.5)")),
            "cfg.json: metrics[0].max_inflight: must be a whole number from 1 to 1000000, not 10.5");
  EXPECT_EQ(Err(Lat(R"(, "max_inflight": -1)")),
            "cfg.json: metrics[0].max_inflight: must be a whole number from 1 to 1000000, not -1");
  for (const char* bad : {"0", "-1", "1e11", "86400.5", "1e-7"}) {
    EXPECT_THAT(Err(Lat(R"(, "timeout_seconds": )" + std::string(bad))),
                HasSubstr("cfg.json: metrics[0].timeout_seconds: must be a number of seconds from 0.000001 to 86400 "
                          "(1 day), not "))
        << bad;
  }
  auto c = ParseConfig(Lat(R"(, "max_inflight": 1e6, "timeout_seconds": 86400)"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->metrics[0].max_inflight, 1000000u);
  EXPECT_EQ(c->metrics[0].timeout_seconds, 86400);
  c = ParseConfig(Lat(R"(, "timeout_seconds": 0.000001)"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
}

TEST(ConfigRangeTest, Exp2Buckets) {
  EXPECT_EQ(Err(Hist(R"({"type": "exp2", "min": 0, "max": 2})")),
            "cfg.json: metrics[0].buckets.min: must be greater than 0, not 0");
  EXPECT_EQ(Err(Hist(R"({"type": "exp2", "min": -1, "max": 2})")),
            "cfg.json: metrics[0].buckets.min: must be greater than 0, not -1");
  EXPECT_EQ(Err(Hist(R"({"type": "exp2", "min": 4, "max": 4})")),
            "cfg.json: metrics[0].buckets.max: must be greater than min (4), not 4");
  EXPECT_EQ(Err(Hist(R"({"type": "exp2", "min": 1e-300, "max": 1e300})")),
            "cfg.json: metrics[0].buckets: exp2 from 1e-300 to 1e+300 makes more than 256 buckets; max/min must be at "
            "most 2^255");
  EXPECT_EQ(Err(Hist(R"({"type": "exp2", "min": 1e300, "max": 1.7e308})")),
            "cfg.json: metrics[0].buckets.max: the bounds min*2^k overflow before reaching 1.7e+308; use a smaller "
            "max");
  EXPECT_EQ(Err(Hist(R"({"type": "exp2", "min": "1", "max": 2})")),
            "cfg.json: metrics[0].buckets.min: must be a number, not string");
  // 256 bounds exactly (2^255) is the largest layout.
  auto c = ParseConfig(Hist(R"({"type": "exp2", "min": 1, "max": 5.7896044618658097e76})"), "cfg.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(ConfigRangeTest, LinearBuckets) {
  EXPECT_EQ(Err(Hist(R"({"type": "linear", "start": 0, "width": 0, "count": 5})")),
            "cfg.json: metrics[0].buckets.width: must be greater than 0, not 0");
  EXPECT_EQ(Err(Hist(R"({"type": "linear", "start": 0, "width": -1, "count": 5})")),
            "cfg.json: metrics[0].buckets.width: must be greater than 0, not -1");
  EXPECT_EQ(Err(Hist(R"({"type": "linear", "start": 0, "width": 1, "count": 0})")),
            "cfg.json: metrics[0].buckets.count: 0 is out of range 1..256");
  EXPECT_EQ(Err(Hist(R"({"type": "linear", "start": 0, "width": 1, "count": 257})")),
            "cfg.json: metrics[0].buckets.count: 257 is out of range 1..256");
  EXPECT_EQ(Err(Hist(R"({"type": "linear", "start": 0, "width": 1, "count": 2.5})")),
            "cfg.json: metrics[0].buckets.count: must be a whole number from 1 to 256, not 2.5");
  EXPECT_EQ(Err(Hist(R"({"type": "linear", "start": 1e17, "width": 1, "count": 3})")),
            "cfg.json: metrics[0].buckets: start + width*1 is not greater than start + width*0 (both 1e+17) in double "
            "precision; bounds must be strictly increasing: use a larger width or a smaller start");
  EXPECT_EQ(Err(Hist(R"({"type": "linear", "start": 1e308, "width": 1e308, "count": 3})")),
            "cfg.json: metrics[0].buckets: start + width*1 is not a finite number; use a smaller start, width or "
            "count");
  auto c = ParseConfig(Hist(R"({"type": "linear", "start": -10, "width": 0.5, "count": 256})"), "cfg.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(ConfigRangeTest, ExplicitBuckets) {
  EXPECT_EQ(Err(Hist(R"({"type": "explicit", "bounds": []})")),
            "cfg.json: metrics[0].buckets.bounds: must not be empty (1 to 256 strictly increasing numbers)");
  std::string many;
  for (int i = 0; i < 257; ++i) many += (i ? "," : "") + std::to_string(i);
  EXPECT_EQ(Err(Hist(R"({"type": "explicit", "bounds": [)" + many + "]}")),
            "cfg.json: metrics[0].buckets.bounds: has 257 bounds; at most 256");
  EXPECT_EQ(Err(Hist(R"({"type": "explicit", "bounds": [1, "2"]})")),
            "cfg.json: metrics[0].buckets.bounds[1]: must be a number");
}

TEST(ConfigRangeTest, ExplicitBoundsStrictlyIncreasing) {
  EXPECT_EQ(Err(Hist(R"({"type": "explicit", "bounds": [2, 1]})")),
            "cfg.json: metrics[0].buckets.bounds[1]: 1 is not greater than bounds[0] (2); bounds must be strictly "
            "increasing");
  EXPECT_EQ(Err(Hist(R"({"type": "explicit", "bounds": [0.5, 1, 1]})")),
            "cfg.json: metrics[0].buckets.bounds[2]: 1 is not greater than bounds[1] (1); bounds must be strictly "
            "increasing");
  auto c = ParseConfig(Hist(R"({"type": "explicit", "bounds": [-1, 0, 0.001, 1e300]})"), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->metrics[0].buckets.bounds, (std::vector<double>{-1, 0, 0.001, 1e300}));
}

TEST(ConfigRangeTest, ValueScale) {
  for (const char* bad : {"0", "-0", "0.0"}) {
    EXPECT_EQ(
        Err(Hist(R"({"type": "exp2", "min": 1, "max": 2})", std::string(R"({"field": "len", "scale": )") + bad + "}")),
        "cfg.json: metrics[0].value.scale: must be a finite non-zero number")
        << bad;
  }
}

// ---- Names that would make invalid or ambiguous output -------------------------------------

TEST(ConfigNamesTest, LeIsReservedOnHistogramAndLatency) {
  EXPECT_EQ(Err(Hist(R"({"type": "exp2", "min": 1, "max": 2})", R"({"field": "len"})",
                     R"(, "labels": [{"name": "le", "field": "len"}])")),
            "cfg.json: metrics[0].labels[0].name: \"le\" is reserved for the bucket bound of histogram and latency "
            "series; choose another name");
  EXPECT_EQ(Err(Lat(R"(, "labels": [{"name": "comm", "source": "comm"}, {"name": "le", "source": "pid"}])")),
            "cfg.json: metrics[0].labels[1].name: \"le\" is reserved for the bucket bound of histogram and latency "
            "series; choose another name");
  // A counter has no buckets: le is an ordinary label there (as in client_golang).
  auto c = ParseConfig(
      R"({"metrics": [{"name": "a_total", "type": "counter", "event": "s:e", "labels": [{"name": "le", "field": "x"}]}]})",
      "cfg.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(ConfigNamesTest, SeriesOfAHistogramCollideWithOtherMetricNames) {
  const std::string b = R"("value": {"field": "len"}, "buckets": {"type": "exp2", "min": 1, "max": 2}})";
  auto h = [&](const std::string& name) {
    return R"({"name": ")" + name + R"(", "type": "histogram", "event": "net:net_dev_xmit", )" + b;
  };
  EXPECT_EQ(Err(R"({"metrics": [)" + h("h") + "," + h("h_bucket") + "]}"),
            "cfg.json: metrics[1].name: \"h_bucket\" collides with a series of histogram \"h\" at metrics[0].name "
            "(it exports h_bucket, h_sum and h_count); rename one of them");
  EXPECT_EQ(Err(R"({"metrics": [)" + h("h_count") + "," + h("h") + "]}"),
            "cfg.json: metrics[1].name: histogram \"h\" exports h_bucket, h_sum and h_count; \"h_count\" collides "
            "with the histogram at metrics[0].name; rename one of them");
  EXPECT_EQ(
      Err(R"({"metrics": [)" + h("x_seconds_sum") + "," +
          R"({"name": "x_seconds", "type": "latency", "start": {"event": "a:b", "key": ["x"]}, "end": {"event": "a:c", "key": ["x"]}, "buckets": {"type": "exp2", "min": 1, "max": 2}}]})"),
      "cfg.json: metrics[1].name: latency \"x_seconds\" exports x_seconds_bucket, x_seconds_sum and "
      "x_seconds_count; \"x_seconds_sum\" collides with the histogram at metrics[0].name; rename one of them");
  // Distinct names that only share a prefix are fine.
  auto c = ParseConfig(R"({"metrics": [)" + h("h") + "," + h("h_buckets") + "," + h("hh") + "]}", "cfg.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(ConfigNamesTest, ReservedPrefixesForEveryType) {
  std::string h = Hist(R"({"type": "exp2", "min": 1, "max": 2})");
  h.replace(h.find("\"h\""), 3, "\"process_h\"");
  EXPECT_THAT(Err(h), HasSubstr("the prefixes tracepoint_exporter_ and process_ are reserved"));
  EXPECT_THAT(Err(R"({"metrics": [{"name": "tracepoint_exporter_x_seconds", "type": "latency"}]})"),
              HasSubstr("the prefixes tracepoint_exporter_ and process_ are reserved"));
  EXPECT_THAT(Err(R"({"metrics": [{"name": "tracepoint_exporter_samples_total", "type": "counter", "event": "s:e"}]})"),
              HasSubstr("the prefixes tracepoint_exporter_ and process_ are reserved"));
}

// ---- Canonical form: equal iff the metric counts and exports the same ----------------------

std::string Canonical(const std::string& metric, const std::string& settings = "{}") {
  auto c = ParseConfig(R"({"settings": )" + settings + R"(, "metrics": [)" + metric + "]}", "cfg.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? c->metrics[0].canonical : "";
}

TEST(ConfigCanonicalTest, EquivalentSpellingsAreEqual) {
  const std::string hist =
      R"({"name": "h", "type": "histogram", "event": "a:b", "value": {"field": "len"}, "buckets": {"type": "exp2", "min": 1, "max": 64}})";
  EXPECT_EQ(Canonical(hist),
            Canonical(R"({"buckets": {"max": 64.0, "min": 1e0, "type": "exp2"}, "value": {"scale": 1, "field": "len"},
                         "event": "a:b", "type": "histogram", "name": "h", "help": "a:b histogram", "labels": []})"));
  EXPECT_EQ(
      Canonical(R"({"name": "c_total", "type": "counter", "event": "a:b", "labels": [{"name": "x", "field": "f"}]})"),
      Canonical(R"({"name": "c_total", "type": "counter", "event": "a:b", "filter": "",
                         "labels": [{"name": "x", "field": "f", "decode": "auto"}]})"));
  const std::string lat = R"({"name": "l_seconds", "type": "latency", "end": {"event": "a:c", "key": ["x"]},
                              "buckets": {"type": "exp2", "min": 1, "max": 2}, )";
  EXPECT_EQ(Canonical(lat + R"("start": {"event": "a:b", "key": ["x"]}})"),
            Canonical(lat + R"("start": [{"event": "a:b", "key": ["x"], "filter": ""}], "max_inflight": 100000,
                                "timeout_seconds": 10})"));
  // Settings that no collector uses do not make a metric different.
  EXPECT_EQ(Canonical(hist), Canonical(hist, R"({"ring_buffer_pages": 128})"));
  EXPECT_EQ(Canonical(hist, R"({"max_series_per_metric": 10000, "series_idle_timeout_seconds": 600})"),
            Canonical(hist));
}

TEST(ConfigCanonicalTest, EveryFieldThatChangesCountingOrOutputMakesItDifferent) {
  const std::string base = R"({"name": "h", "type": "histogram", "event": "a:b", "filter": "x == 1",
      "value": {"field": "len", "scale": 2}, "buckets": {"type": "linear", "start": 0, "width": 10, "count": 5},
      "labels": [{"name": "c", "source": "comm"}, {"name": "d", "field": "dev", "decode": "hex"}]})";
  const std::string c0 = Canonical(base);
  auto differs = [&](const std::string& from, const std::string& to) {
    std::string m = base;
    size_t at = m.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    m.replace(at, from.size(), to);
    EXPECT_NE(Canonical(m), c0) << from << " -> " << to;
  };
  differs(R"("name": "h")", R"("name": "h2")");
  differs(R"("event": "a:b")", R"("event": "a:b", "help": "other help")");
  differs(R"("event": "a:b")", R"("event": "a:c")");
  differs(R"("x == 1")", R"("x == 2")");
  differs(R"("scale": 2)", R"("scale": 3)");
  differs(R"("field": "len")", R"("field": "size")");
  differs(R"("start": 0)", R"("start": 1)");
  differs(R"("width": 10)", R"("width": 20)");
  differs(R"("count": 5)", R"("count": 6)");
  differs(R"("name": "c")", R"("name": "cc")");
  differs(R"("decode": "hex")", R"("decode": "auto")");
  differs(R"({"name": "c", "source": "comm"}, {"name": "d", "field": "dev", "decode": "hex"})",
          R"({"name": "d", "field": "dev", "decode": "hex"}, {"name": "c", "source": "comm"})");
  EXPECT_NE(Canonical(base, R"({"max_series_per_metric": 5})"), c0);
  EXPECT_NE(Canonical(base, R"({"series_idle_timeout_seconds": 0})"), c0);

  const std::string lat = R"({"name": "l_seconds", "type": "latency", "start": {"event": "a:b", "key": ["x"]},
      "end": {"event": "a:c", "key": ["y"]}, "buckets": {"type": "exp2", "min": 1, "max": 2}})";
  const std::string l0 = Canonical(lat);
  auto lat_differs = [&](const std::string& from, const std::string& to) {
    std::string m = lat;
    m.replace(m.find(from), from.size(), to);
    EXPECT_NE(Canonical(m), l0) << from << " -> " << to;
  };
  lat_differs(R"("max": 2})", R"("max": 2}, "max_inflight": 5)");
  lat_differs(R"("max": 2})", R"("max": 2}, "timeout_seconds": 5)");
  lat_differs(R"("max": 2})", R"("max": 4})");
  lat_differs(R"("key": ["x"])", R"("key": ["x"], "filter": "x > 0")");
  lat_differs(R"("key": ["y"])", R"("key": ["z"])");
  lat_differs(R"("max": 2})", R"("max": 2}, "labels": [{"name": "c", "source": "comm", "from": "end"}])");
}

// ---- LoadConfig: only a regular file, of bounded size, and never blocking ------------------

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/config_file_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // Runs LoadConfig(path) in a child process with a deadline (and, outside sanitizer builds, an
  // address-space cap), so that a hang or unbounded growth fails the test instead of the machine.
  // Returns "ok", the error message, or how the child died.
  static std::string LoadInChild(const std::string& path) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return "pipe failed";
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      alarm(5);
#if !defined(__SANITIZE_ADDRESS__)
      long pages = 0;
      if (std::ifstream statm("/proc/self/statm"); statm >> pages) {
        rlim_t cap = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (512u << 20);
        struct rlimit rl = {cap, cap};
        setrlimit(RLIMIT_AS, &rl);
      }
#endif
      std::string out;
      try {  // an exception must not unwind into gtest, which would run the other tests in the child
        auto c = LoadConfig(path);
        out = c.ok() ? "ok" : c.status().message();
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
      } catch (...) {
        out = "exception";
      }
      (void)!write(fds[1], out.data(), out.size());
      _exit(0);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return std::string("child killed by ") + strsignal(WTERMSIG(status));
    return out;
  }

  std::string Write(const std::string& name, const std::string& text) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  std::string dir_;
};

TEST_F(ConfigFileTest, RefusesWhatIsNotARegularFile) {
  EXPECT_EQ(LoadInChild("/dev/zero"),
            "--config.file: /dev/zero: a character device, not a regular file; the config must be a regular file of "
            "at most 4194304 bytes");
  const std::string fifo = dir_ + "/fifo.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(LoadInChild(fifo), "--config.file: " + fifo +
                                   ": a FIFO (named pipe), not a regular file; the config must be a regular file of "
                                   "at most 4194304 bytes");
  EXPECT_EQ(LoadInChild(dir_), "--config.file: " + dir_ +
                                   ": a directory, not a regular file; the config must be a regular file of at most "
                                   "4194304 bytes");
}

TEST_F(ConfigFileTest, RefusesATooLargeFile) {
  const std::string big = Write("big.json", std::string(5000000, ' '));
  EXPECT_EQ(LoadInChild(big),
            "--config.file: " + big + ": 5000000 bytes; a config file may have at most 4194304 bytes (4 MiB)");
  // The limit itself is fine.
  const std::string body = R"({"metrics": [)" + kCounter + "]}";
  const std::string max = Write("max.json", body + std::string(4194304 - body.size(), ' '));
  EXPECT_EQ(LoadInChild(max), "ok");
  // So is a symlink to a regular file (Kubernetes ConfigMaps are symlinks).
  ASSERT_EQ(symlink(max.c_str(), (dir_ + "/link.json").c_str()), 0);
  EXPECT_EQ(LoadInChild(dir_ + "/link.json"), "ok");
  // ParseConfig applies the same limit to text.
  EXPECT_EQ(Err(std::string(4194305, ' ')), "cfg.json: 4194305 bytes; a config may have at most 4194304 bytes (4 MiB)");
}

TEST_F(ConfigFileTest, NumberTooLargeInAFileIsAnError) {
  const std::string p = Write("c.json", R"({"settings": {"ring_buffer_pages": 1e400}, "metrics": [])");
  EXPECT_THAT(LoadInChild(p), HasSubstr(p + ": settings.ring_buffer_pages: the number 1e400 "));
}

TEST(ConfigInputTest, CounterValue) {
  auto ok = ParseConfig(
      R"({"metrics": [{"name": "c_total", "type": "counter", "event": "s:e", "value": {"field": "ret", "scale": 512}}]})",
      "cfg.json");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->metrics[0].value.field, "ret");
  EXPECT_EQ(ok->metrics[0].value.scale, 512);
  auto plain = ParseConfig(R"({"metrics": [)" + kCounter + "]}", "cfg.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->metrics[0].value.field.empty());
  EXPECT_NE(plain->metrics[0].canonical, ok->metrics[0].canonical);  // a reload sees the change
  auto Err = [](const std::string& value) {
    return ParseConfig(
               R"({"metrics": [{"name": "c_total", "type": "counter", "event": "s:e", "value": )" + value + "}]}",
               "cfg.json")
        .status()
        .message();
  };
  EXPECT_EQ(Err(R"({"field": "ret", "scale": -1})"),
            "cfg.json: metrics[0].value.scale: must be positive: a counter never decreases");
  EXPECT_THAT(Err(R"({"field": "ret", "scale": 0})"), HasSubstr("metrics[0].value.scale: must be a finite non-zero"));
  EXPECT_THAT(Err(R"({"scale": 2})"), HasSubstr("metrics[0].value"));
  EXPECT_THAT(Err(R"("ret")"), HasSubstr("metrics[0].value: must be an object"));
}

// "profiles" beside "metrics": metrics' keys but "type" and "buckets", plus "stack".
TEST(ConfigTest, Profiles) {
  auto c = ParseConfig(R"({"settings": {"max_stacks_per_profile": 500, "profile_max_frames": 64},
      "profiles": [{"name": "retransmit_stacks", "event": "tcp:tcp_retransmit_skb",
                    "labels": [{"name": "comm", "source": "comm"}]},
                   {"name": "read_bytes", "event": "syscalls:sys_exit_read", "stack": "user",
                    "value": {"field": "ret"}, "filter": "ret > 0"}]})",
                       "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->metrics.size(), 2u);
  EXPECT_EQ(NameOf(c->metrics[0].type), "profile");
  EXPECT_EQ(NameOf(c->metrics[0].stack), "both");
  EXPECT_EQ(c->metrics[0].json_path, "profiles[0]");
  EXPECT_EQ(c->metrics[0].help, "tcp:tcp_retransmit_skb profile");
  EXPECT_EQ(NameOf(c->metrics[1].stack), "user");
  EXPECT_EQ(c->metrics[1].value.field, "ret");
  EXPECT_EQ(c->settings.max_stacks_per_profile, 500u);
  EXPECT_EQ(c->settings.profile_max_frames, 64u);
  // A change of stack or of the profile settings is a changed profile at a reload.
  auto d = ParseConfig(R"({"profiles": [{"name": "p", "event": "s:e", "stack": "kernel"}]})", "cfg.json");
  auto e = ParseConfig(R"({"profiles": [{"name": "p", "event": "s:e"}]})", "cfg.json");
  ASSERT_TRUE(d.ok() && e.ok());
  EXPECT_NE(d->metrics[0].canonical, e->metrics[0].canonical);
}

TEST(ConfigTest, DebuginfodUrls) {
  auto unset = ParseConfig(R"({"profiles": [{"name": "p", "event": "s:e"}]})", "cfg.json");
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->settings.debuginfod_urls.has_value()) << "DEBUGINFOD_URLS from the environment";
  auto two = ParseConfig(
      R"({"settings": {"debuginfod_urls": "https://debuginfod.debian.net http://127.0.0.1:8002"},
          "profiles": [{"name": "p", "event": "s:e"}]})",
      "cfg.json");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->settings.debuginfod_urls, "https://debuginfod.debian.net http://127.0.0.1:8002");
  auto none =
      ParseConfig(R"({"settings": {"debuginfod_urls": ""}, "profiles": [{"name": "p", "event": "s:e"}]})", "cfg.json");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->settings.debuginfod_urls, "");
  EXPECT_EQ(
      Err(R"({"settings": {"debuginfod_urls": "debuginfod.debian.net"}, "profiles": [{"name": "p", "event": "s:e"}]})"),
      "cfg.json: settings.debuginfod_urls: \"debuginfod.debian.net\" is not an http:// or https:// URL "
      "(space-separated base URLs, as DEBUGINFOD_URLS; e.g. \"https://debuginfod.debian.net\"; \"\" for none)");
  EXPECT_EQ(Err(R"({"settings": {"debuginfod_urls": 1}, "profiles": [{"name": "p", "event": "s:e"}]})"),
            "cfg.json: settings.debuginfod_urls: must be a string, not number");
}

TEST(ConfigTest, ProfileErrors) {
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "s:e", "stack": "all"}]})"),
            "cfg.json: profiles[0].stack: \"all\" is not one of kernel, user, both");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "s:e", "unwind": "lbr"}]})"),
            "cfg.json: profiles[0].unwind: \"lbr\" is not one of dwarf (the default: the code's unwind tables, whole "
            "on binaries built without frame pointers), frame_pointer (the kernel's frame-pointer walk: cheaper)");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "s:e", "stack": "kernel", "unwind": "dwarf"}]})"),
            "cfg.json: profiles[0].unwind: is for user stacks; this profile takes the kernel's stack only "
            "(\"stack\": \"kernel\"), which the kernel walks itself");
  EXPECT_EQ(Err(R"({"settings": {"profile_stack_bytes": 100}, "profiles": [{"name": "p", "event": "s:e"}]})"),
            "cfg.json: settings.profile_stack_bytes: 100 is out of range 512..65528");
  EXPECT_EQ(Err(R"({"settings": {"profile_stack_bytes": 4100}, "profiles": [{"name": "p", "event": "s:e"}]})"),
            "cfg.json: settings.profile_stack_bytes: 4100 is not a multiple of 8 (bytes; e.g. 8192, perf's default)");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "s:e", "kind": "counter"}]})"),
            "cfg.json: profiles[0]: unknown key \"kind\" (valid keys: args, engine, event, filter, frequency_hz, help, "
            "include_idle, labels, maxactive, min_block_seconds, name, period, pid, stack, type, unwind, value)");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "p_total", "type": "counter", "event": "s:e"}],
                    "profiles": [{"name": "p_total", "event": "s:e"}]})"),
            "cfg.json: profiles[0].name: duplicate metric name \"p_total\"");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "s:e", "value": {"field": "x", "scale": -1}}]})"),
            "cfg.json: profiles[0].value.scale: must be positive: a profile never decreases");
  EXPECT_EQ(Err(R"({"settings": {"profile_max_frames": 128}, "profiles": [{"name": "p", "event": "s:e"}]})"),
            "cfg.json: settings.profile_max_frames: 128 is out of range 1..127");
  EXPECT_EQ(Err(R"({"profiles": []})"),
            "cfg.json: profiles: must be a non-empty array (a config needs a metric or a profile)");
}

// A CPU profile: a profile on "cpu-clock" or "task-clock", 19 Hz unless told otherwise.
TEST(ConfigTest, CpuProfiles) {
  auto c = ParseConfig(R"({"profiles": [{"name": "cpu", "event": "cpu-clock"},
                   {"name": "cpu99", "event": "task-clock", "frequency_hz": 99, "include_idle": true},
                   {"name": "cpu_ms", "event": "cpu-clock", "period": 1e6, "labels": [{"name": "comm", "source": "comm"}]}]})",
                       "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->metrics[0].frequency_hz, 19u);
  EXPECT_EQ(c->metrics[0].period_ns, 0u);
  EXPECT_FALSE(c->metrics[0].include_idle);
  EXPECT_EQ(c->metrics[0].help, "cpu-clock profile");
  EXPECT_EQ(c->metrics[1].frequency_hz, 99u);
  EXPECT_TRUE(c->metrics[1].include_idle);
  EXPECT_EQ(c->metrics[2].frequency_hz, 0u);
  EXPECT_EQ(c->metrics[2].period_ns, 1000000u);
  // The sampling is part of the profile's identity at a reload.
  auto d = ParseConfig(R"({"profiles": [{"name": "cpu", "event": "cpu-clock", "frequency_hz": 20}]})", "cfg.json");
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->metrics[0].canonical, c->metrics[0].canonical);
}

// An off-CPU profile: "type": "off_cpu", its event sched:sched_switch (implied).
TEST(ConfigTest, OffCpuProfiles) {
  auto c = ParseConfig(R"({"profiles": [{"name": "off", "type": "off_cpu", "min_block_seconds": 0.001},
                   {"name": "off2", "type": "off_cpu", "event": "sched:sched_switch"}]})",
                       "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->metrics[0].off_cpu);
  EXPECT_EQ(c->metrics[0].event, "sched:sched_switch");
  EXPECT_EQ(c->metrics[0].min_block_seconds, 0.001);
  EXPECT_EQ(c->metrics[1].min_block_seconds, 0);
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "type": "off_cpu", "event": "sched:sched_wakeup"}]})"),
            "cfg.json: profiles[0].event: an off_cpu profile is made of sched:sched_switch, not "
            "\"sched:sched_wakeup\" (leave \"event\" out)");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "type": "off_cpu", "min_block_seconds": -1}]})"),
            "cfg.json: profiles[0].min_block_seconds: -1 is out of range 0..3600 (seconds)");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "type": "off_cpu", "filter": "prev_pid == 1"}]})"),
            "cfg.json: profiles[0].filter: \"filter\" does not apply to an off_cpu profile (every task's switches "
            "are paired; use labels such as comm, pid or cgroup to tell tasks apart)");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "s:e", "min_block_seconds": 1}]})"),
            "cfg.json: profiles[0].min_block_seconds: is for an off-CPU profile (\"type\": \"off_cpu\")");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "type": "counter", "event": "s:e"}]})"),
            "cfg.json: profiles[0].type: \"counter\" is not one of profile (the default: stacks of an event's hits), "
            "off_cpu (time tasks spend switched out, by stack)");
}

TEST(ConfigTest, CpuProfileErrors) {
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "cpu-clock", "frequency_hz": 19, "period": 1e6}]})"),
            "cfg.json: profiles[0]: give \"frequency_hz\" (samples per second on each CPU) or \"period\" (ns of the "
            "clock between samples), not both");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "cpu-clock", "frequency_hz": 0}]})"),
            "cfg.json: profiles[0].frequency_hz: 0 is out of range 1..10000");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "cpu-clock", "period": 5000}]})"),
            "cfg.json: profiles[0].period: 5000 is out of range 10000..10000000000");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "cpu-clock", "include_idle": 1}]})"),
            "cfg.json: profiles[0].include_idle: must be true or false, not number");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "cpu-clock", "filter": "pid == 1"}]})"),
            "cfg.json: profiles[0].filter: \"filter\" is for tracepoints and probes; \"cpu-clock\" is a perf software "
            "clock with no fields (a CPU profile samples every task on every CPU; use labels such as comm, pid or "
            "cgroup to tell them apart)");
  EXPECT_EQ(Err(R"({"profiles": [{"name": "p", "event": "sched:sched_switch", "frequency_hz": 19}]})"),
            "cfg.json: profiles[0].frequency_hz: \"frequency_hz\" is for a CPU profile (\"event\": \"cpu-clock\" or "
            "\"task-clock\"); \"sched:sched_switch\" is sampled at every hit");
  EXPECT_EQ(Err(R"({"metrics": [{"name": "c_total", "type": "counter", "event": "cpu-clock"}]})"),
            "cfg.json: metrics[0].event: \"cpu-clock\" is a perf software clock, for a CPU profile (a \"profiles\" "
            "entry); a metric counts a tracepoint (\"system:event\") or a probe");
  EXPECT_EQ(
      Err(R"({"profiles": [{"name": "p", "event": "cycles"}]})"),
      "cfg.json: profiles[0].event: \"cycles\" is not of the form \"system:event\" (e.g. \"sched:sched_switch\") "
      "nor a probe (uprobe:, uretprobe:, usdt:, kprobe:, kretprobe:) nor a clock (\"cpu-clock\", \"task-clock\")");
}

}  // namespace
}  // namespace tpe

namespace tpe {
namespace {

TEST(ConfigNativeTest, NativeBucketsAloneOrBesideClassic) {
  auto c = ParseConfig(
      R"({"metrics": [{"name": "h", "type": "histogram", "event": "net:net_dev_xmit", "value": {"field": "len"},
          "buckets": {"type": "native"}},
         {"name": "g", "type": "histogram", "event": "net:net_dev_xmit", "value": {"field": "len"},
          "buckets": {"type": "native", "schema": 8, "zero_threshold": 0.5, "max_buckets": 32}},
         {"name": "l_seconds", "type": "latency", "start": {"event": "a:b", "key": ["x"]},
          "end": {"event": "a:c", "key": ["x"]}, "buckets": {"type": "exp2", "min": 1, "max": 2}, "native": true},
         {"name": "k_seconds", "type": "latency", "start": {"event": "a:b", "key": ["x"]},
          "end": {"event": "a:c", "key": ["x"]}, "buckets": {"type": "exp2", "min": 1, "max": 2},
          "native": {"schema": 0}}]})",
      "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const BucketsConfig& a = c->metrics[0].buckets;
  EXPECT_TRUE(a.native);
  EXPECT_FALSE(a.classic());
  EXPECT_EQ(a.schema, 3u);  // defaults: client_golang's zero threshold, 160 buckets
  EXPECT_EQ(a.zero_threshold, 0x1p-128);
  EXPECT_EQ(a.max_buckets, 160u);
  const BucketsConfig& b = c->metrics[1].buckets;
  EXPECT_EQ(b.schema, 8u);
  EXPECT_EQ(b.zero_threshold, 0.5);
  EXPECT_EQ(b.max_buckets, 32u);
  EXPECT_TRUE(c->metrics[2].buckets.native);
  EXPECT_TRUE(c->metrics[2].buckets.classic());
  EXPECT_EQ(c->metrics[3].buckets.schema, 0u);
}

TEST(ConfigNativeTest, ErrorsNameTheKey) {
  EXPECT_EQ(Err(Hist(R"({"type": "native", "schema": 9})")),
            "cfg.json: metrics[0].buckets.schema: 9 is out of range 0..8");
  EXPECT_EQ(Err(Hist(R"({"type": "native", "schema": -1})")),
            "cfg.json: metrics[0].buckets.schema: must be a whole number from 0 to 8, not -1");
  EXPECT_THAT(Err(Hist(R"({"type": "native", "zero_threshold": -1})")),
              HasSubstr("cfg.json: metrics[0].buckets.zero_threshold: must be a number >= 0"));
  EXPECT_EQ(Err(Hist(R"({"type": "native", "max_buckets": 0})")),
            "cfg.json: metrics[0].buckets.max_buckets: 0 is out of range 1..65536");
  EXPECT_THAT(Err(Hist(R"({"type": "native", "min": 1})")), HasSubstr("metrics[0].buckets"));
  EXPECT_THAT(Err(Hist(R"({"type": "native"})", R"({"field": "len"})", R"(, "native": true)")),
              HasSubstr("metrics[0].native: is for classic buckets"));
  EXPECT_THAT(Err(Lat(R"(, "native": 3)")), HasSubstr("metrics[0].native: must be true, false or an object"));
  EXPECT_THAT(Err(Lat(R"(, "native": {"scheme": 3})")), HasSubstr("metrics[0].native"));
}

}  // namespace
}  // namespace tpe

namespace tpe {
namespace {

TEST(ConfigGaugeTest, KindsAndErrors) {
  auto c = ParseConfig(
      R"({"metrics": [
        {"name": "a", "type": "gauge", "inflight": {"start": {"event": "a:b", "key": ["x"]},
                                                    "end": {"event": "a:c", "key": ["x"]}}, "max_inflight": 10},
        {"name": "b", "type": "gauge", "up": {"event": "a:b"}, "down": {"event": "a:c", "value": {"field": "n"}}},
        {"name": "c", "type": "gauge", "max": {"event": "a:b", "field": "len", "scale": 2}}]})",
      "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(NameOf(c->metrics[0].gauge), "inflight");
  EXPECT_EQ(c->metrics[0].starts[0].event, "a:b");
  EXPECT_EQ(c->metrics[0].max_inflight, 10u);
  EXPECT_EQ(NameOf(c->metrics[1].gauge), "updown");
  EXPECT_EQ(c->metrics[1].down.value.field, "n");
  EXPECT_EQ(NameOf(c->metrics[2].gauge), "max");
  EXPECT_EQ(c->metrics[2].event, "a:b");
  EXPECT_EQ(c->metrics[2].value.scale, 2);
  const std::string g = R"({"metrics": [{"name": "g", "type": "gauge", )";
  EXPECT_THAT(Err(g + R"("max": {"event": "a:b", "field": "x"}, "min": {"event": "a:b", "field": "x"}}]})"),
              HasSubstr("metrics[0]: a gauge takes exactly one of"));
  EXPECT_THAT(Err(g + R"("labels": []}]})"), HasSubstr("a gauge takes exactly one of"));
  EXPECT_THAT(Err(g + R"("up": {"event": "a:b"}}]})"), HasSubstr("metrics[0].up: needs \"down\" beside it"));
  EXPECT_THAT(Err(g + R"("down": {"event": "a:b"}}]})"), HasSubstr("metrics[0].down: needs \"up\" beside it"));
  EXPECT_THAT(Err(g + R"("max": {"event": "a:b"}}]})"), HasSubstr("metrics[0].max: missing required key \"field\""));
  EXPECT_THAT(Err(g + R"("last": {"event": "a:b", "field": "x"}, "timeout_seconds": 1}]})"),
              HasSubstr("metrics[0].timeout_seconds: is for an inflight gauge"));
  EXPECT_THAT(Err(g + R"("inflight": {"start": {"event": "a:b", "key": ["x"]}}}]})"),
              HasSubstr("metrics[0].inflight: missing required key \"end\""));
  EXPECT_THAT(Err(g + R"("inflight": {"start": {"event": "a:b", "key": ["x"]}, "end": {"event": "a:c", "key": ["x"]}},
                  "labels": [{"name": "c", "source": "comm", "from": "end"}]}]})"),
              HasSubstr("an inflight gauge's labels are read at the start"));
  EXPECT_THAT(Err(R"({"metrics": [{"name": "g_total", "type": "gauge", "last": {"event": "a:b", "field": "x"}}]})"),
              HasSubstr("must not end in _total"));
}

}  // namespace
}  // namespace tpe
