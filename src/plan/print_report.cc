#include "plan/print_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "bpf/bpf_metric.h"
#include "collectors/profile.h"

namespace tpe {
namespace {

std::string Labels(const LabelPairs& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    out += (i ? "," : "") + labels[i].first + "=\"" + labels[i].second + "\"";
  }
  return out + "}";
}

std::string Bound(double v, bool seconds) {
  char buf[32];
  if (std::isinf(v)) return "+Inf";
  if (!seconds) {
    std::snprintf(buf, sizeof(buf), "%g", v);
  } else if (v < 1e-6) {
    std::snprintf(buf, sizeof(buf), "%gns", v * 1e9);
  } else if (v < 1e-3) {
    std::snprintf(buf, sizeof(buf), "%gus", v * 1e6);
  } else if (v < 1) {
    std::snprintf(buf, sizeof(buf), "%gms", v * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%gs", v);
  }
  return buf;
}

}  // namespace

StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  double ms = -1;
  if (end == text.c_str() || !(v >= 0))
    ms = -1;
  else if (unit.empty() || unit == "s")
    ms = v * 1e3;
  else if (unit == "ms")
    ms = v;
  else if (unit == "m")
    ms = v * 60e3;
  else if (unit == "h")
    ms = v * 3600e3;
  constexpr double kMaxMs = 365.0 * 86400e3;  // a year: far beyond any report, far below overflow
  if (!(ms >= 0) || !std::isfinite(ms) || ms > kMaxMs) {
    return InvalidArgument("--print=" + text + " is not a duration such as 500ms, 10s, 2m (0 to 8760h)");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

void PrintReport(const std::vector<MetricSnapshot>& metrics, std::ostream& out) {
  for (const auto& m : metrics) {
    if (m.kind != MetricKind::kHistogram) {
      if (m.series.empty()) out << m.name << " (no samples)\n";
      for (const auto& s : m.series) {
        out << m.name << Labels(s.labels) << " ";
        if (m.kind == MetricKind::kGauge) {
          out << s.value << "\n";  // may be negative or fractional
        } else {
          out << static_cast<uint64_t>(s.value) << "\n";
        }
      }
      continue;
    }
    const bool seconds = m.name.ends_with("_seconds");
    if (m.series.empty()) out << m.name << " (no samples)\n";
    for (const auto& s : m.series) {
      out << "\n" << m.name << Labels(s.labels) << "  count=" << s.count << " sum=" << Bound(s.sum, seconds) << "\n";
      size_t first = s.bucket_counts.size(), last = 0;
      uint64_t peak = 0;
      for (size_t i = 0; i < s.bucket_counts.size(); ++i) {
        if (s.bucket_counts[i] == 0) continue;
        first = std::min(first, i);
        last = i;
        peak = std::max(peak, s.bucket_counts[i]);
      }
      for (size_t i = first; i <= last && i < s.bucket_counts.size(); ++i) {
        double lo = i == 0 ? -INFINITY : m.bucket_bounds[i - 1];
        double hi = i < m.bucket_bounds.size() ? m.bucket_bounds[i] : INFINITY;
        std::string range = "(" + (i == 0 ? std::string("-Inf") : Bound(lo, seconds)) + ", " + Bound(hi, seconds) + "]";
        const int width = peak ? static_cast<int>(50 * s.bucket_counts[i] / peak) : 0;
        char line[160];
        std::snprintf(line, sizeof(line), "%-22s %10llu |%-50s|\n", range.c_str(),
                      static_cast<unsigned long long>(s.bucket_counts[i]), std::string(width, '@').c_str());
        out << line;
      }
    }
  }
}

void PrintCosts(const std::vector<MetricCost>& costs, double seconds, const std::string& why_no_stats,
                std::ostream& out) {
  out << "\ncost over " << Bound(seconds, true) << ":\n";
  char line[256];
  for (const MetricCost& c : costs) {
    const double rate = seconds > 0 ? static_cast<double>(c.events) / seconds : 0;
    std::snprintf(line, sizeof(line), "  %-40s %-4s %12llu %s (%.1f/s)", c.name.c_str(),
                  std::string(NameOf(c.engine)).c_str(), static_cast<unsigned long long>(c.events),
                  c.engine == Engine::kBpf ? "runs" : "events", rate);
    out << line;
    if (c.profile_sample_ns || c.profile_render_ns) {
      // A profile: the exporter's own time on it (on bpf its programs' time comes on top).
      const double ns = c.profile_sample_ns.value_or(0) + c.profile_render_ns.value_or(0);
      std::snprintf(line, sizeof(line), ", exporter %.1f ms (samples %.1f ms, rendering %.1f ms), %.4f%% of a CPU",
                    ns * 1e-6, c.profile_sample_ns.value_or(0) * 1e-6, c.profile_render_ns.value_or(0) * 1e-6,
                    seconds > 0 ? 100 * ns * 1e-9 / seconds : 0.0);
      out << line;
    }
    if (c.engine != Engine::kBpf) {
      out << ", ns/event: see docs/PERFORMANCE.md \"Cost per event\" (perf output is not timed per event)\n";
    } else if (!c.kernel_ns) {
      out << ", ns/event unknown: " << why_no_stats << "\n";
    } else if (c.events == 0) {
      out << ", no runs\n";
    } else {
      std::snprintf(line, sizeof(line), ", %.0f ns/event, %.4f%% of a CPU\n",
                    *c.kernel_ns / static_cast<double>(c.events),
                    seconds > 0 ? 100 * *c.kernel_ns * 1e-9 / seconds : 0.0);
      out << line;
    }
  }
}

std::vector<MetricCost> MetricCosts(const Plan& plan, bool stats_on) {
  std::vector<MetricCost> out;
  for (const MetricPlan& metric : plan.metrics) {
    MetricCost c;
    const Collector* collector = metric.collector.get();
    c.name = collector->name();
    c.engine = metric.engine;
    if (c.engine == Engine::kBpf) {
      double ns = 0;
      for (const EngineStat& st : collector->EngineStats()) {
        if (st.desc == &bpf::kBpfProgramRunsTotalDesc) c.events += static_cast<uint64_t>(st.value);
        if (st.desc == &bpf::kBpfProgramRunSecondsTotalDesc) ns += st.value * 1e9;
      }
      if (stats_on) c.kernel_ns = ns;
      if (collector->is_profile()) c.profile_sample_ns = 0;
    } else if (!metric.counting_events.empty()) {
      for (const EventPlan* ep : metric.counting_events) c.events += ep->ReadCounts().count;
    } else {
      for (const auto& ep : plan.events) {
        for (const auto& consumer : ep->consumers) {
          if (consumer.first == collector) c.events += ep->samples.Get();
        }
      }
      for (const EngineStat& st : collector->EngineStats()) {
        if (st.desc == &kProfileSampleSecondsTotalDesc) c.profile_sample_ns = st.value * 1e9;
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

void PrintTopStacks(const std::string& name, const std::string& folded, size_t top, std::ostream& out) {
  std::vector<std::pair<int64_t, std::string>> stacks;  // (count, folded stack)
  int64_t samples = 0;
  for (size_t at = 0; at < folded.size();) {
    size_t nl = folded.find('\n', at);
    if (nl == std::string::npos) nl = folded.size();
    const std::string line = folded.substr(at, nl - at);
    at = nl + 1;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    const int64_t n = std::strtoll(line.c_str() + sp + 1, nullptr, 10);
    samples += n;
    stacks.emplace_back(n, line.substr(0, sp));
  }
  std::stable_sort(stacks.begin(), stacks.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  out << "\n" << name << ": " << stacks.size() << " stacks, " << samples << " samples";
  if (stacks.size() > top) out << " (the " << top << " heaviest)";
  out << "\n";
  for (size_t i = 0; i < stacks.size() && i < top; ++i) {
    std::vector<std::string> frames;
    for (size_t a = 0, b; a <= stacks[i].second.size(); a = b + 1) {
      b = stacks[i].second.find(';', a);
      if (b == std::string::npos) b = stacks[i].second.size();
      frames.push_back(stacks[i].second.substr(a, b - a));
    }
    out << "@[\n";
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) out << "    " << *f << "\n";
    out << "]: " << stacks[i].first << "\n";
  }
}

}  // namespace tpe
