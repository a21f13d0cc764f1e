#include "exporter/exposition.h"

#include <google/protobuf/util/delimited_message_util.h>
#include <io/prometheus/client/metrics.pb.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <limits>
#include <mutex>
#include <set>
#include <sstream>

#include "collectors/native_buckets.h"
#include "common/log.h"

namespace tpe {
namespace {

namespace pb = io::prometheus::client;

// HELP text as the text exposition format wants it: `\` as `\\`, a line feed as `\n`.
void EscapeHelp(std::string* help) {
  if (help->find_first_of("\\\n") == std::string::npos) return;
  std::string out;
  out.reserve(help->size() + 8);
  for (char c : *help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  *help = std::move(out);
}

// One sign's native buckets as client_model's spans and deltas: a span per run of consecutive
// indexes (the first span's offset is its first index, a later one's the gap after the previous
// span), and each count as the difference from the previous bucket's (the first from 0).
template <typename AddSpan, typename AddDelta>
void EncodeNativeBuckets(const std::vector<std::pair<int32_t, uint64_t>>& buckets, AddSpan&& add_span,
                         AddDelta&& add_delta) {
  int64_t prev_count = 0;
  int32_t prev_index = 0;
  io::prometheus::client::BucketSpan* span = nullptr;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto& [index, count] = buckets[i];
    if (span == nullptr || index != prev_index + 1) {
      span = add_span();
      span->set_offset(i == 0 ? index : index - prev_index - 1);
      span->set_length(0);
    }
    span->set_length(span->length() + 1);
    add_delta(static_cast<int64_t>(count) - prev_count);
    prev_count = static_cast<int64_t>(count);
    prev_index = index;
  }
}

// Fills the native part of `h` from `n` (its schema already reduced to the metric's bound).
void ToProtoNative(const NativeSnapshot& n, io::prometheus::client::Histogram* h) {
  h->set_schema(n.schema);
  h->set_zero_threshold(n.zero_threshold);
  h->set_zero_count(n.zero_count);
  EncodeNativeBuckets(
      n.positive, [h] { return h->add_positive_span(); }, [h](int64_t d) { h->add_positive_delta(d); });
  EncodeNativeBuckets(
      n.negative, [h] { return h->add_negative_span(); }, [h](int64_t d) { h->add_negative_delta(d); });
  // A native histogram with no bucket and a zero threshold of 0 would read as a classic one
  // with no buckets: an empty span says it is native (as client_golang does).
  if (n.positive.empty() && n.negative.empty() && n.zero_threshold == 0 && n.zero_count == 0) {
    io::prometheus::client::BucketSpan* span = h->add_positive_span();
    span->set_offset(0);
    span->set_length(0);
  }
}

// Logs, once per metric, that a series of it had more than max_buckets native buckets and was
// exported at a lower schema (`steps` lower; client_golang's doubleBucketWidth).
void NoteReduction(const std::string& metric, int steps) {
  if (steps == 0) return;
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (!said.insert(metric).second) return;
  TPE_LOG_INFO(
      "metric {}: a series has more native buckets than max_buckets; it is exported {} schema step(s) lower (each "
      "step merges pairs of buckets), as Prometheus clients do",
      metric, steps);
}

// A histogram series' classic buckets as the pages show them, in order: (upper bound,
// cumulative count), the +Inf bucket last. A native-only histogram's series has the +Inf bucket
// alone (the text format's one required bucket).
template <typename Visit>
void ForEachBucket(const MetricSnapshot& m, const SeriesSnapshot& s, Visit&& visit) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < s.bucket_counts.size(); ++i) {
    cumulative += s.bucket_counts[i];
    visit(i < m.bucket_bounds.size() ? m.bucket_bounds[i] : std::numeric_limits<double>::infinity(), cumulative);
  }
}

}  // namespace

void PrepareForExposition(MetricSnapshot* m) { MergeSeriesByLabels(m); }

void WriteText(MetricSnapshot m, std::ostream* out) {
  PrepareForExposition(&m);
  prometheus::MetricFamily f;
  f.name = std::move(m.name);
  f.help = std::move(m.help);
  // The text format escapes a HELP's backslashes and line feeds; prometheus-cpp 1.0's serializer
  // writes it as it is (a config's help with a newline broke the page).
  EscapeHelp(&f.help);
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
  f.metric.reserve(m.series.size());
  for (SeriesSnapshot& s : m.series) {
    prometheus::ClientMetric cm;
    cm.label.reserve(s.labels.size());
    for (auto& [k, v] : s.labels) cm.label.push_back({std::move(k), std::move(v)});
    LabelPairs().swap(s.labels);  // the snapshot and the serializer's family are not both whole at once
    switch (m.kind) {
      case MetricKind::kCounter:
        cm.counter.value = s.value;
        break;
      case MetricKind::kGauge:
        cm.gauge.value = s.value;
        break;
      case MetricKind::kHistogram:
        cm.histogram.sample_count = s.count;
        cm.histogram.sample_sum = s.sum;
        cm.histogram.bucket.reserve(s.bucket_counts.size());
        ForEachBucket(m, s, [&](double upper_bound, uint64_t cumulative) {
          prometheus::ClientMetric::Bucket b;
          b.cumulative_count = cumulative;
          b.upper_bound = upper_bound;
          cm.histogram.bucket.push_back(b);
        });
        std::vector<uint64_t>().swap(s.bucket_counts);
        break;
    }
    f.metric.push_back(std::move(cm));
  }
  std::vector<prometheus::MetricFamily> one;
  one.push_back(std::move(f));
  prometheus::TextSerializer().Serialize(*out, one);
}

bool WriteProtobuf(MetricSnapshot m, std::ostream* out) {
  PrepareForExposition(&m);
  pb::MetricFamily f;
  f.set_name(std::move(m.name));
  f.set_help(std::move(m.help));
  switch (m.kind) {
    case MetricKind::kCounter:
      f.set_type(pb::COUNTER);
      break;
    case MetricKind::kGauge:
      f.set_type(pb::GAUGE);
      break;
    case MetricKind::kHistogram:
      f.set_type(pb::HISTOGRAM);
      break;
  }
  f.mutable_metric()->Reserve(static_cast<int>(m.series.size()));
  for (SeriesSnapshot& s : m.series) {
    pb::Metric* metric = f.add_metric();
    for (auto& [name, value] : s.labels) {
      pb::LabelPair* lp = metric->add_label();
      lp->set_name(std::move(name));
      lp->set_value(std::move(value));
    }
    LabelPairs().swap(s.labels);
    switch (m.kind) {
      case MetricKind::kCounter:
        metric->mutable_counter()->set_value(s.value);
        break;
      case MetricKind::kGauge:
        metric->mutable_gauge()->set_value(s.value);
        break;
      case MetricKind::kHistogram: {
        pb::Histogram* h = metric->mutable_histogram();
        h->set_sample_count(s.count);
        h->set_sample_sum(s.sum);
        // Buckets as on the text page, the +Inf one included (Prometheus accepts it; clients may
        // leave it implicit); a native-only histogram has none.
        if (m.classic) {
          ForEachBucket(m, s, [h](double upper_bound, uint64_t cumulative) {
            pb::Bucket* b = h->add_bucket();
            b->set_cumulative_count(cumulative);
            b->set_upper_bound(upper_bound);
          });
        }
        std::vector<uint64_t>().swap(s.bucket_counts);
        if (m.native_max_buckets > 0 && s.native) {
          NoteReduction(f.name(), ReduceToMaxBuckets(&*s.native, m.native_max_buckets));
          ToProtoNative(*s.native, h);
          s.native.reset();
        }
        break;
      }
    }
  }
  return google::protobuf::util::SerializeDelimitedToOstream(f, out);
}

std::string SerializeText(const std::vector<MetricSnapshot>& metrics) {
  std::ostringstream out;
  for (const MetricSnapshot& m : metrics) WriteText(m, &out);
  return std::move(out).str();
}

std::string SerializeProtobuf(const std::vector<MetricSnapshot>& metrics) {
  std::ostringstream out;
  for (const MetricSnapshot& m : metrics) WriteProtobuf(m, &out);
  return std::move(out).str();
}

}  // namespace tpe
