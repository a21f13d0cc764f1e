#include "daemon/config.h"

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

Status ParseLabel(const Checker& c, const json& j, const std::string& jp, LabelConfig* l) {
  if (!j.is_object()) return c.Error(jp, "a label must be an object like {\"name\": \"comm\", \"source\": \"comm\"}");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "field", "source", "decode"}));
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
  if (l->decode != "auto" && l->decode != "hex" && l->decode != "inet" && l->decode != "symbolic") {
    return c.Error(jp + ".decode", "\"" + l->decode + "\" is not one of auto, hex, inet, symbolic");
  }
  if (!l->source.empty() && l->decode != "auto") {
    return c.Error(jp + ".decode", "decode applies to \"field\" labels only; source \"" + l->source + "\" has none");
  }
  return Status::Ok();
}

Status ParseMetric(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  if (!j.is_object()) return c.Error(jp, "a metric must be an object");
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "type", true, &m->type));
  if (m->type == "histogram" || m->type == "latency") {
    return c.Error(jp + ".type", "\"" + m->type + "\" metrics are not supported by this version; use \"counter\"");
  }
  if (m->type != "counter")
    return c.Error(jp + ".type", "\"" + m->type + "\" is not one of counter, histogram, latency");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "help", "type", "event", "filter", "labels"}));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "name", true, &m->name));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "help", false, &m->help));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "event", true, &m->event));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "filter", false, &m->filter));
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
  if (m->help.empty()) m->help = m->event + " " + m->type;
  size_t colon = m->event.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == m->event.size() ||
      m->event.find('/') != std::string::npos) {
    return c.Error(jp + ".event",
                   "\"" + m->event + "\" is not of the form \"system:event\" (e.g. \"sched:sched_switch\")");
  }
  auto labels = j.find("labels");
  if (labels != j.end()) {
    if (!labels->is_array()) return c.Error(jp + ".labels", "must be an array of label objects");
    std::set<std::string> seen;
    for (size_t i = 0; i < labels->size(); ++i) {
      LabelConfig l;
      std::string lp = jp + ".labels[" + std::to_string(i) + "]";
      TPE_RETURN_IF_ERROR(ParseLabel(c, (*labels)[i], lp, &l));
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
