#include "daemon/config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "common/file_util.h"

namespace tpe {
namespace {

using json = nlohmann::json;

class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  Status Error(const std::string& json_path, const std::string& what) const {
    return InvalidArgument(path_ + ": " + json_path + ": " + what);
  }

  Status OnlyKeys(const json& obj, const std::string& json_path, const std::set<std::string>& allowed) const {
    for (const auto& [k, v] : obj.items()) {
      if (!allowed.count(k)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return Error(json_path, "unknown key \"" + k + "\" (valid keys: " + list + ")");
      }
    }
    return Status::Ok();
  }

  Status GetString(const json& obj, const std::string& json_path, const std::string& key, bool required,
                   std::string* out) const {
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Error(json_path, "missing required key \"" + key + "\"") : Status::Ok();
    if (!it->is_string()) return Error(json_path + "." + key, "must be a string, not " + std::string(it->type_name()));
    *out = it->get<std::string>();
    return Status::Ok();
  }

  Status GetNumber(const json& obj, const std::string& json_path, const std::string& key, bool required,
                   double* out) const {
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Error(json_path, "missing required key \"" + key + "\"") : Status::Ok();
    if (!it->is_number()) return Error(json_path + "." + key, "must be a number, not " + std::string(it->type_name()));
    *out = it->get<double>();
    return Status::Ok();
  }

  Status GetUint(const json& obj, const std::string& json_path, const std::string& key, uint64_t lo, uint64_t hi,
                 uint64_t* out) const {
    auto it = obj.find(key);
    if (it == obj.end()) return Status::Ok();
    if (!it->is_number_unsigned()) {
      return Error(json_path + "." + key,
                   "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    }
    uint64_t v = it->get<uint64_t>();
    if (v < lo || v > hi) {
      return Error(json_path + "." + key,
                   std::to_string(v) + " is out of range " + std::to_string(lo) + ".." + std::to_string(hi));
    }
    *out = v;
    return Status::Ok();
  }

 private:
  std::string path_;
};

Status ParseLabel(const Checker& c, const json& j, const std::string& jp, bool latency, LabelConfig* l) {
  if (!j.is_object()) return c.Error(jp, "a label must be an object like {\"name\": \"comm\", \"source\": \"comm\"}");
  if (latency) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "field", "source", "decode", "from"}));
    TPE_RETURN_IF_ERROR(c.GetString(j, jp, "from", false, &l->from));
    if (l->from != "start" && l->from != "end") {
      return c.Error(jp + ".from", "\"" + l->from + "\" is not one of start, end");
    }
  } else {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "field", "source", "decode"}));
  }
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "name", true, &l->name));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "field", false, &l->field));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "source", false, &l->source));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "decode", false, &l->decode));
  l->json_path = jp;
  if (!IsValidLabelName(l->name)) {
    return c.Error(jp + ".name",
                   "\"" + l->name + "\" is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)");
  }
  if (l->field.empty() == l->source.empty()) {
    return c.Error(jp,
                   "a label needs exactly one of \"field\" (a tracepoint field) or \"source\" (comm, pid, tid, cpu)");
  }
  if (!l->source.empty() && l->source != "comm" && l->source != "pid" && l->source != "tid" && l->source != "cpu") {
    return c.Error(jp + ".source", "\"" + l->source + "\" is not one of comm, pid, tid, cpu");
  }
  if (l->decode != "auto" && l->decode != "hex" && l->decode != "inet" && l->decode != "symbolic" &&
      l->decode != "syscall") {
    return c.Error(jp + ".decode", "\"" + l->decode + "\" is not one of auto, hex, inet, symbolic, syscall");
  }
  if (!l->source.empty() && l->decode != "auto") {
    return c.Error(jp + ".decode", "decode applies to \"field\" labels only; source \"" + l->source + "\" has none");
  }
  return Status::Ok();
}

Status CheckEventName(const Checker& c, const std::string& jp, const std::string& event) {
  size_t colon = event.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == event.size() || event.find('/') != std::string::npos) {
    return c.Error(jp, "\"" + event + "\" is not of the form \"system:event\" (e.g. \"sched:sched_switch\")");
  }
  return Status::Ok();
}

Status ParseEndpoint(const Checker& c, const json& j, const std::string& jp, EndpointConfig* e) {
  if (!j.is_object())
    return c.Error(jp, "must be an object like {\"event\": \"sched:sched_waking\", \"key\": [\"pid\"]}");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"event", "key", "filter"}));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "event", true, &e->event));
  TPE_RETURN_IF_ERROR(CheckEventName(c, jp + ".event", e->event));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "filter", false, &e->filter));
  e->json_path = jp;
  auto key = j.find("key");
  if (key == j.end())
    return c.Error(jp, "missing required key \"key\" (the fields that match start to end, e.g. [\"pid\"])");
  if (!key->is_array() || key->empty() || key->size() > 4) {
    return c.Error(jp + ".key", "must be an array of 1 to 4 field names");
  }
  for (size_t i = 0; i < key->size(); ++i) {
    if (!(*key)[i].is_string())
      return c.Error(jp + ".key[" + std::to_string(i) + "]", "must be a field name (a string)");
    e->key.push_back((*key)[i].get<std::string>());
  }
  return Status::Ok();
}

Status ParseLatency(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  auto start = j.find("start");
  if (start == j.end())
    return c.Error(jp, "missing required key \"start\" (e.g. {\"event\": \"sched:sched_waking\", \"key\": [\"pid\"]})");
  if (start->is_array()) {
    if (start->empty()) return c.Error(jp + ".start", "must not be an empty array");
    for (size_t i = 0; i < start->size(); ++i) {
      EndpointConfig e;
      TPE_RETURN_IF_ERROR(ParseEndpoint(c, (*start)[i], jp + ".start[" + std::to_string(i) + "]", &e));
      m->starts.push_back(std::move(e));
    }
  } else {
    EndpointConfig e;
    TPE_RETURN_IF_ERROR(ParseEndpoint(c, *start, jp + ".start", &e));
    m->starts.push_back(std::move(e));
  }
  auto end = j.find("end");
  if (end == j.end())
    return c.Error(jp,
                   "missing required key \"end\" (e.g. {\"event\": \"sched:sched_switch\", \"key\": [\"next_pid\"]})");
  TPE_RETURN_IF_ERROR(ParseEndpoint(c, *end, jp + ".end", &m->end));
  for (const auto& s : m->starts) {
    if (s.key.size() != m->end.key.size()) {
      return c.Error(s.json_path + ".key", "has " + std::to_string(s.key.size()) + " fields but end.key has " +
                                               std::to_string(m->end.key.size()) + "; start and end keys must match");
    }
  }
  TPE_RETURN_IF_ERROR(c.GetUint(j, jp, "max_inflight", 1, 100000000, &m->max_inflight));
  TPE_RETURN_IF_ERROR(c.GetNumber(j, jp, "timeout_seconds", false, &m->timeout_seconds));
  if (!(m->timeout_seconds > 0) || !std::isfinite(m->timeout_seconds)) {
    return c.Error(jp + ".timeout_seconds", "must be a positive number of seconds");
  }
  return Status::Ok();
}

Status ParseBuckets(const Checker& c, const json& j, const std::string& jp, BucketsConfig* b) {
  auto it = j.find("buckets");
  const std::string bp = jp + ".buckets";
  if (it == j.end())
    return c.Error(jp, "missing required key \"buckets\" (e.g. {\"type\": \"exp2\", \"min\": 1, \"max\": 65536})");
  if (!it->is_object()) return c.Error(bp, "must be an object");
  b->json_path = bp;
  TPE_RETURN_IF_ERROR(c.GetString(*it, bp, "type", true, &b->type));
  if (b->type == "exp2") {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*it, bp, {"type", "min", "max"}));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "min", true, &b->min));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "max", true, &b->max));
  } else if (b->type == "linear") {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*it, bp, {"type", "start", "width", "count"}));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "start", true, &b->start));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "width", true, &b->width));
    if (!it->contains("count")) return c.Error(bp, "missing required key \"count\"");
    TPE_RETURN_IF_ERROR(c.GetUint(*it, bp, "count", 1, 256, &b->count));
  } else if (b->type == "explicit") {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*it, bp, {"type", "bounds"}));
    auto bounds = it->find("bounds");
    if (bounds == it->end() || !bounds->is_array())
      return c.Error(bp + ".bounds", "must be an array of increasing numbers");
    for (size_t i = 0; i < bounds->size(); ++i) {
      if (!(*bounds)[i].is_number()) return c.Error(bp + ".bounds[" + std::to_string(i) + "]", "must be a number");
      b->bounds.push_back((*bounds)[i].get<double>());
    }
  } else {
    return c.Error(bp + ".type", "\"" + b->type + "\" is not one of exp2, linear, explicit");
  }
  return Status::Ok();
}

Status ParseMetric(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  if (!j.is_object()) return c.Error(jp, "a metric must be an object");
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "type", true, &m->type));
  const bool latency = m->type == "latency";
  if (m->type == "counter") {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "help", "type", "event", "filter", "labels"}));
  } else if (m->type == "histogram") {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "help", "type", "event", "filter", "labels", "value", "buckets"}));
  } else if (latency) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(
        j, jp, {"name", "help", "type", "start", "end", "labels", "buckets", "max_inflight", "timeout_seconds"}));
  } else {
    return c.Error(jp + ".type", "\"" + m->type + "\" is not one of counter, histogram, latency");
  }
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "name", true, &m->name));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "help", false, &m->help));
  if (!latency) {
    TPE_RETURN_IF_ERROR(c.GetString(j, jp, "event", true, &m->event));
    TPE_RETURN_IF_ERROR(c.GetString(j, jp, "filter", false, &m->filter));
  }
  m->json_path = jp;
  if (!IsValidMetricName(m->name)) {
    return c.Error(jp + ".name", "\"" + m->name + "\" is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  if (m->name.starts_with("tracepoint_exporter_") || m->name.starts_with("process_")) {
    return c.Error(jp + ".name",
                   "\"" + m->name + "\": the prefixes tracepoint_exporter_ and process_ are reserved for self-metrics");
  }
  if (m->type == "counter" && !m->name.ends_with("_total")) {
    return c.Error(jp + ".name", "counter \"" + m->name + "\" must end in _total (e.g. \"" + m->name + "_total\")");
  }
  if (m->type != "counter" && m->name.ends_with("_total")) {
    return c.Error(jp + ".name", m->type + " \"" + m->name + "\" must not end in _total (reserved for counters)");
  }
  if (latency && !m->name.ends_with("_seconds")) {
    return c.Error(jp + ".name", "latency \"" + m->name + "\" is in seconds and must end in _seconds");
  }
  if (!latency) {
    TPE_RETURN_IF_ERROR(CheckEventName(c, jp + ".event", m->event));
  } else {
    TPE_RETURN_IF_ERROR(ParseLatency(c, j, jp, m));
  }
  if (m->help.empty()) m->help = (latency ? m->starts[0].event + " to " + m->end.event : m->event) + " " + m->type;
  if (m->type == "histogram") {
    auto v = j.find("value");
    if (v == j.end()) return c.Error(jp, "missing required key \"value\" (e.g. {\"field\": \"len\"})");
    if (!v->is_object()) return c.Error(jp + ".value", "must be an object like {\"field\": \"len\", \"scale\": 1}");
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*v, jp + ".value", {"field", "scale"}));
    TPE_RETURN_IF_ERROR(c.GetString(*v, jp + ".value", "field", true, &m->value.field));
    TPE_RETURN_IF_ERROR(c.GetNumber(*v, jp + ".value", "scale", false, &m->value.scale));
    if (!(m->value.scale != 0) || !std::isfinite(m->value.scale)) {
      return c.Error(jp + ".value.scale", "must be a finite non-zero number");
    }
  }
  if (m->type != "counter") TPE_RETURN_IF_ERROR(ParseBuckets(c, j, jp, &m->buckets));
  auto labels = j.find("labels");
  if (labels != j.end()) {
    if (!labels->is_array()) return c.Error(jp + ".labels", "must be an array of label objects");
    std::set<std::string> seen;
    for (size_t i = 0; i < labels->size(); ++i) {
      LabelConfig l;
      std::string lp = jp + ".labels[" + std::to_string(i) + "]";
      TPE_RETURN_IF_ERROR(ParseLabel(c, (*labels)[i], lp, latency, &l));
      if (!seen.insert(l.name).second) return c.Error(lp + ".name", "duplicate label name \"" + l.name + "\"");
      m->labels.push_back(std::move(l));
    }
  }
  return Status::Ok();
}

}  // namespace

bool IsValidMetricName(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    bool ok = std::isalpha(static_cast<unsigned char>(ch)) || ch == '_' || ch == ':' ||
              (i > 0 && std::isdigit(static_cast<unsigned char>(ch)));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& s) {
  if (s.empty() || s.starts_with("__")) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    bool ok = std::isalpha(static_cast<unsigned char>(ch)) || ch == '_' ||
              (i > 0 && std::isdigit(static_cast<unsigned char>(ch)));
    if (!ok) return false;
  }
  return true;
}

StatusOr<Config> ParseConfig(const std::string& text, const std::string& path) {
  Checker c(path);
  json root;
  try {
    root = json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    return InvalidArgument(path + ": malformed JSON: " + e.what());
  }
  if (!root.is_object())
    return c.Error("$", "the config must be a JSON object with \"metrics\" (and optional \"settings\")");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(root, "$", {"settings", "metrics"}));
  Config cfg;
  cfg.path = path;
  auto settings = root.find("settings");
  if (settings != root.end()) {
    if (!settings->is_object()) return c.Error("settings", "must be an object");
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*settings, "settings", {"ring_buffer_pages", "max_series_per_metric"}));
    uint64_t pages = cfg.settings.ring_buffer_pages;
    TPE_RETURN_IF_ERROR(c.GetUint(*settings, "settings", "ring_buffer_pages", 1, 4096, &pages));
    if ((pages & (pages - 1)) != 0) {
      return c.Error("settings.ring_buffer_pages",
                     std::to_string(pages) + " is not a power of two (1, 2, 4, ..., 4096)");
    }
    cfg.settings.ring_buffer_pages = static_cast<uint32_t>(pages);
    TPE_RETURN_IF_ERROR(
        c.GetUint(*settings, "settings", "max_series_per_metric", 1, 10000000, &cfg.settings.max_series_per_metric));
  }
  auto metrics = root.find("metrics");
  if (metrics == root.end()) return c.Error("$", "missing required key \"metrics\" (an array of metric objects)");
  if (!metrics->is_array() || metrics->empty())
    return c.Error("metrics", "must be a non-empty array of metric objects");
  std::set<std::string> names;
  for (size_t i = 0; i < metrics->size(); ++i) {
    MetricConfig m;
    std::string jp = "metrics[" + std::to_string(i) + "]";
    TPE_RETURN_IF_ERROR(ParseMetric(c, (*metrics)[i], jp, &m));
    m.canonical = (*metrics)[i].dump() + "|max_series=" + std::to_string(cfg.settings.max_series_per_metric);
    if (!names.insert(m.name).second) return c.Error(jp + ".name", "duplicate metric name \"" + m.name + "\"");
    cfg.metrics.push_back(std::move(m));
  }
  return cfg;
}

StatusOr<Config> LoadConfig(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext("--config.file");
  return ParseConfig(*text, path);
}

}  // namespace tpe
