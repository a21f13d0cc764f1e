// A profile drawn as a flame graph: one self-contained SVG document (no script, no style sheet,
// image or font from elsewhere), as flamegraph.pl draws one. The root ("all") at the bottom, each
// frame above the frame it was called from; a frame's width is its share of the profile's first
// sample value (its samples, or the value a value profile sums), siblings in name order; a frame's
// <title> (the browser's hover text) names it with its value and share. Colours by what the code
// is (FrameKind): user frames warm (red to yellow), kernel frames blue, JIT frames green, unknown
// and lost frames grey, with a legend; the shade within a colour comes from the name, so a
// function keeps its colour across renders. Each frame is a <g class="root|user|kernel|jit|unknown">
// holding its <title>, <rect> and (when it fits) <text>.
//
// Frames narrower than FlameGraphOptions::min_frame_px, and frames past the max_frames widest, are
// left out with everything above them and counted in the subtitle: the document's size is bounded
// (about 200 bytes a frame) whatever the profile. Values summing past INT64_MAX saturate.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "pprof/profile.pb.h"

namespace tpe {

struct FlameGraphOptions {
  std::string title;          // the heading, e.g. "tcp_retransmits: since start"
  double width_px = 1200;     // the document's width, pixels
  double min_frame_px = 0.1;  // narrower frames are left out (flamegraph.pl's --minwidth)
  size_t max_frames = 20000;  // at most this many frames drawn, the widest (~4 MB of SVG)
};

// The SVG document (UTF-8, starting "<?xml") of `profile`'s samples. A profile without samples
// gives a document that says so. Names are XML-escaped; a name too long for its frame is cut and
// ends in "..".
std::string FlameGraphSvg(const perftools::profiles::Profile& profile, const FlameGraphOptions& options);

}  // namespace tpe
