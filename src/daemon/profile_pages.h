// Serving profiles: a profile's stacks, symbolized at request time, as pprof
// (perftools.profiles.Profile, gzip-compressed, as Go's /debug/pprof endpoints serve it) or as
// folded stacks (flamegraph.pl, speedscope), or drawn as a flame graph (profile/flame_graph.h, the
// /flamegraph/<name> page).
//
// Symbolization (profile/renderer.h, the pipeline's ProfileRenderer) runs per request:
// /proc/kallsyms for kernel frames, the ELF files user frames lie in (normalized to file and
// offset with the mappings of their time when the sample was read: process/process_images.h).
// No absolute kernel address and no process's address layout is served.
//
// Thread-safety: RenderProfile and ServeProfile read the pipeline under its lock and symbolize
// outside it; concurrent calls are safe (each has its own symbolizer), as are the `later` calls
// of ServeProfile's replies.
#pragma once

#include <string>

#include "daemon/pipeline.h"
#include "exporter/http_server.h"

namespace tpe {

// ?seconds=N: from 1 to this (10 minutes); "seconds" without a value is Go's default, 30.
inline constexpr int kMaxProfileSeconds = 600;
inline constexpr int kDefaultProfileSeconds = 30;

// The answer to GET /debug/pprof/<name>[?format=...] with every sample since the profile
// started (or changed at a reload): `format` "" or "pprof" (gzip-compressed protobuf,
// application/octet-stream), "folded" (text), or "flamegraph" (an SVG document, image/svg+xml,
// titled with the profile's name and when its samples were taken). 404 naming the profiles that exist for an
// unknown name; 400 naming the valid formats for another format.
HttpAnswer RenderProfile(const Pipeline& pipeline, const std::string& name, const std::string& format);

// The reply to GET /debug/pprof/<name>[?format=...][&seconds=N]. Without seconds: RenderProfile
// as the reply's `later` with no delay (on the server's delayed-answer thread, so a long render
// never holds an event loop that /metrics connections wait on); an unknown name or format is
// answered at once. With seconds: the reply's `start` (called when the server accepts the wait) marks the
// window's start and end in the reader's dispatch (Pipeline::AddMark: the profile exactly as it
// was after the last sample stamped before each bound; a bpf profile, which the kernel counts,
// is read at the start and, by `later`, at the end: StackProfile::stamped()), and its `later` (after N seconds, waits
// for the end mark up to 10 s, else 503) renders what the profile gained in between, with the
// pprof's time_nanos the window's start and duration_nanos N s; a profile replaced by a reload
// meanwhile gives its samples since the reload; one removed by a reload, 404. Errors answered at
// once: 400 for a seconds value that is not a whole number from 1 to kMaxProfileSeconds (naming
// it and the range) or a bad format, 404 for an unknown name. `pipeline` must outlive the
// reply's callables.
PprofReply ServeProfile(const Pipeline& pipeline, const PprofRequest& request);

}  // namespace tpe
