// Serving profiles (issue 23): a profile's stacks, symbolized at request time, as pprof
// (perftools.profiles.Profile, gzip-compressed, as Go's /debug/pprof endpoints serve it) or as
// folded stacks (flamegraph.pl, speedscope).
//
// Symbolization (profile/symbolizer.h) runs per request: /proc/kallsyms for kernel frames, each
// sampled process's /proc/PID/maps and the ELF files it maps (through /proc/PID/map_files or its
// root) for user frames. A process that exited before the request, or that the daemon may not
// read (after --drop-capabilities), keeps its frames' addresses under the "[unknown]" mapping;
// kernel frames stay addresses where kptr_restrict hides kallsyms.
//
// Thread-safety: RenderProfile reads the pipeline under its lock and symbolizes outside it;
// concurrent calls are safe (each has its own symbolizer).
#pragma once

#include <string>

#include "daemon/pipeline.h"
#include "exporter/http_server.h"

namespace tpe {

// The answer to GET /debug/pprof/<name>[?format=...]: `format` "" or "pprof" (gzip-compressed
// protobuf, application/octet-stream), or "folded" (text). 404 naming the profiles that exist
// for an unknown name; 400 naming the valid formats for another format.
HttpAnswer RenderProfile(const Pipeline& pipeline, const std::string& name, const std::string& format);

}  // namespace tpe
