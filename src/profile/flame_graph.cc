#include "profile/flame_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <queue>
#include <string_view>
#include <utility>
#include <vector>

#include "common/html_escape.h"
#include "common/utf8.h"
#include "profile/pprof_builder.h"

namespace tpe {
namespace {

constexpr double kFrameHeight = 16;  // a row, pixels (the frame 15, one between)
constexpr double kTop = 62;          // title, subtitle and legend above the frames
constexpr double kBottom = 10;
constexpr double kSide = 10;
constexpr double kCharWidth = 7.2;  // of the 12 px monospace font the labels use

struct Node {
  std::string name;
  FrameKind kind = FrameKind::kUnknown;
  int64_t value = 0;
  std::map<std::pair<std::string, FrameKind>, size_t> children;  // in name order
};

// At most `chars` characters of `name` (well-formed UTF-8), ending in ".." when cut; "" when not
// even 3 fit.
std::string Label(std::string_view name, size_t chars) {
  if (chars < 3) return "";
  std::vector<size_t> starts;  // byte offset of each character
  for (size_t i = 0; i < name.size(); ++i) {
    if ((static_cast<unsigned char>(name[i]) & 0xc0) != 0x80) starts.push_back(i);
  }
  if (starts.size() <= chars) return std::string(name);
  return std::string(name.substr(0, starts[chars - 2])) + "..";
}

uint32_t NameHash(std::string_view s) {  // FNV-1a: a function keeps its shade
  uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h;
}

std::string Rgb(int r, int g, int b) {
  return "rgb(" + std::to_string(r) + "," + std::to_string(g) + "," + std::to_string(b) + ")";
}

std::string Fill(FrameKind kind, std::string_view name) {
  const uint32_t h = NameHash(name);
  const double v1 = static_cast<double>(h & 0xff) / 255, v2 = static_cast<double>((h >> 8) & 0xff) / 255;
  const double v3 = static_cast<double>((h >> 16) & 0xff) / 255;
  auto c = [](double base, double span, double v) { return static_cast<int>(base + span * v); };
  switch (kind) {
    case FrameKind::kUser:  // flamegraph.pl's "hot"
      return Rgb(c(205, 50, v3), c(0, 230, v1), c(0, 55, v2));
    case FrameKind::kKernel:
      return Rgb(c(70, 60, v1), c(130, 60, v1), c(205, 50, v2));
    case FrameKind::kJit:
      return Rgb(c(50, 60, v1), c(170, 60, v2), c(50, 60, v1));
    case FrameKind::kUnknown:
      break;
  }
  const int grey = c(165, 40, v1);
  return Rgb(grey, grey, grey);
}

const char* KindName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kUser:
      return "user";
    case FrameKind::kKernel:
      return "kernel";
    case FrameKind::kJit:
      return "jit";
    case FrameKind::kUnknown:
      break;
  }
  return "unknown";
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string Percent(int64_t part, int64_t total) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", 100.0 * static_cast<double>(part) / static_cast<double>(total));
  return buf;
}

struct Drawn {
  const Node* node;
  double x, width;
  int depth;
  bool operator<(const Drawn& o) const { return width < o.width; }  // the widest first
};

// a + b (b > 0), at most INT64_MAX: a value profile's sums may pass it.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

}  // namespace

std::string FlameGraphSvg(const perftools::profiles::Profile& p, const FlameGraphOptions& options) {
  auto str = [&](int64_t i) -> std::string {
    return i >= 0 && i < p.string_table_size() ? p.string_table(static_cast<int>(i)) : std::string();
  };
  // What a value is: "samples" for counts, else the unit ("bytes", "nanoseconds").
  std::string what = "samples";
  if (p.sample_type_size() > 0) {
    const std::string type = str(p.sample_type(0).type()), unit = str(p.sample_type(0).unit());
    what = SanitizeUtf8(unit == "count" || unit.empty() ? type : unit);
  }
  // Each location's name made well-formed UTF-8 once (symbol names are bytes; the document must
  // parse).
  // A location with inlined functions is a frame per function, the holder below them.
  std::map<uint64_t, std::vector<std::pair<std::string, FrameKind>>> keys;
  for (auto& [id, n] : NameLocations(p)) {
    auto& k = keys[id];
    k.emplace_back(SanitizeUtf8(n.name), n.kind);
    for (const std::string& in : n.inlined) k.emplace_back(SanitizeUtf8(in), n.kind);
  }
  std::vector<Node> nodes(1);
  nodes[0].name = "all";
  size_t stacks = 0;
  for (const auto& s : p.sample()) {
    const int64_t v = s.value_size() > 0 ? s.value(0) : 0;
    if (v <= 0) continue;
    ++stacks;
    size_t at = 0;
    nodes[0].value = SaturatingAdd(nodes[0].value, v);
    for (int i = s.location_id_size() - 1; i >= 0; --i) {  // root first
      auto it = keys.find(s.location_id(i));
      const std::vector<std::pair<std::string, FrameKind>> unknown = {
          std::make_pair("location " + std::to_string(s.location_id(i)), FrameKind::kUnknown)};
      for (const auto& key : it != keys.end() ? it->second : unknown) {
        const auto [child, added] = nodes[at].children.try_emplace(key, nodes.size());
        const size_t index = child->second;  // before nodes grows
        if (added) nodes.push_back(Node{key.first, key.second, 0, {}});
        at = index;
        nodes[at].value = SaturatingAdd(nodes[at].value, v);
      }
    }
  }
  const int64_t total = nodes[0].value;
  const double width = std::max(options.width_px, 200.0);
  const double scale = total > 0 ? (width - 2 * kSide) / static_cast<double>(total) : 0;
  // Lay out first (the height depends on the deepest frame drawn), the widest frames first: a
  // frame is never wider than its caller, so the max_frames drawn are the widest, each with the
  // frames below it.
  std::vector<Drawn> drawn;
  size_t left_out = 0;
  int depth_max = 0;
  std::priority_queue<Drawn> todo;
  if (total > 0) todo.push(Drawn{&nodes[0], kSide, static_cast<double>(total) * scale, 0});
  while (!todo.empty()) {
    if (drawn.size() >= options.max_frames) {
      left_out += todo.size();
      break;
    }
    Drawn d = todo.top();
    todo.pop();
    drawn.push_back(d);
    depth_max = std::max(depth_max, d.depth);
    double x = d.x;
    for (const auto& [key, index] : d.node->children) {
      const Node& child = nodes[index];
      const double w = static_cast<double>(child.value) * scale;
      if (w < options.min_frame_px) {
        ++left_out;
      } else {
        todo.push(Drawn{&child, x, w, d.depth + 1});
      }
      x += w;
    }
  }
  const double height = kTop + kBottom + kFrameHeight * (depth_max + 1) + (total > 0 ? 0 : kFrameHeight);
  std::string out;
  out.reserve(256 + drawn.size() * 160);
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + Num(width) + "\" height=\"" +
         Num(height) + "\" viewBox=\"0 0 " + Num(width) + " " + Num(height) +
         "\" font-family=\"monospace\" font-size=\"12\">\n";
  out += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"rgb(248,248,244)\"/>\n";
  out += "<text x=\"" + Num(width / 2) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"16\">" +
         HtmlEscaped(SanitizeUtf8(options.title), MarkupDialect::kXml) + "</text>\n";
  std::string subtitle = std::to_string(total) + " " + what + " in " + std::to_string(stacks) + " stacks";
  if (left_out > 0) {
    subtitle += "; " + std::to_string(left_out) + " frames left out with the frames above them (narrower than " +
                Num(options.min_frame_px) + " px, or past the " + std::to_string(options.max_frames) + " widest)";
  }
  out += "<text x=\"" + Num(kSide) + "\" y=\"40\">" + HtmlEscaped(subtitle, MarkupDialect::kXml) + "</text>\n";
  // The legend, right-aligned on the subtitle's line.
  const std::pair<const char*, FrameKind> legend[] = {{"user", FrameKind::kUser},
                                                      {"kernel", FrameKind::kKernel},
                                                      {"JIT", FrameKind::kJit},
                                                      {"unknown", FrameKind::kUnknown}};
  double lx = width - kSide - 4 * 80;
  for (const auto& [label, kind] : legend) {
    out += "<rect x=\"" + Num(lx) + "\" y=\"30\" width=\"12\" height=\"12\" fill=\"" + Fill(kind, "") +
           "\"/><text x=\"" + Num(lx + 16) + "\" y=\"40\">" + label + "</text>\n";
    lx += 80;
  }
  if (total <= 0) {
    out += "<text x=\"" + Num(width / 2) + "\" y=\"" + Num(kTop + 12) +
           "\" text-anchor=\"middle\">no samples</text>\n</svg>\n";
    return out;
  }
  std::sort(drawn.begin(), drawn.end(),
            [](const Drawn& a, const Drawn& b) { return a.depth != b.depth ? a.depth < b.depth : a.x < b.x; });
  for (const Drawn& d : drawn) {
    const Node& n = *d.node;
    const double y = height - kBottom - kFrameHeight * (d.depth + 1);
    const std::string name = HtmlEscaped(n.name, MarkupDialect::kXml);
    out += "<g class=\"" + std::string(d.depth == 0 ? "root" : KindName(n.kind)) + "\"><title>" + name + " (" +
           std::to_string(n.value) + " " + HtmlEscaped(what, MarkupDialect::kXml) + ", " + Percent(n.value, total) +
           ")</title><rect x=\"" + Num(d.x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(d.width) + "\" height=\"" +
           Num(kFrameHeight - 1) + "\" rx=\"2\" fill=\"" + (d.depth == 0 ? Rgb(200, 200, 200) : Fill(n.kind, n.name)) +
           "\"/>";
    const std::string label = Label(n.name, static_cast<size_t>(std::max(0.0, (d.width - 6) / kCharWidth)));
    if (!label.empty())
      out += "<text x=\"" + Num(d.x + 3) + "\" y=\"" + Num(y + 11.5) + "\">" + HtmlEscaped(label, MarkupDialect::kXml) +
             "</text>";
    out += "</g>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace tpe
