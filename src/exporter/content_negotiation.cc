#include "exporter/content_negotiation.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace tpe {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// A quality value (RFC 9110 12.4.2: 0 to 1, at most 3 decimals); malformed: 0.
double ParseQuality(std::string_view v) {
  v = Trim(v);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  double q = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), q);
  if (ec != std::errc() || end != v.data() + v.size() || !(q >= 0) || q > 1) return 0;
  return q;
}

std::string_view Unquote(std::string_view v) {
  v = Trim(v);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

}  // namespace

ExpositionFormat NegotiateExposition(std::string_view accept) {
  double best_protobuf = 0, best_text = 0;
  while (!accept.empty()) {
    const size_t comma = accept.find(',');
    std::string_view range = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    const size_t semi = range.find(';');
    const std::string_view type = Trim(range.substr(0, semi));
    std::string_view params = semi == std::string_view::npos ? std::string_view() : range.substr(semi + 1);
    double q = 1;
    bool proto_ok = false, encoding_ok = true;
    while (!params.empty()) {
      const size_t next = params.find(';');
      const std::string_view param = params.substr(0, next);
      params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view key = Trim(param.substr(0, eq)), value = param.substr(eq + 1);
      if (EqualsNoCase(key, "q")) {
        q = ParseQuality(value);
      } else if (EqualsNoCase(key, "proto")) {
        proto_ok = Unquote(value) == "io.prometheus.client.MetricFamily";
      } else if (EqualsNoCase(key, "encoding")) {
        encoding_ok = Unquote(value) == "delimited";
      }
    }
    if (EqualsNoCase(type, "application/vnd.google.protobuf")) {
      if (proto_ok && encoding_ok) best_protobuf = std::max(best_protobuf, q);
    } else if (EqualsNoCase(type, "text/plain") || EqualsNoCase(type, "text/*") || type == "*/*") {
      best_text = std::max(best_text, q);
    }
  }
  return best_protobuf > 0 && best_protobuf >= best_text ? ExpositionFormat::kProtobuf : ExpositionFormat::kText;
}

}  // namespace tpe
