#include "daemon/profile_pages.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/heap_trim.h"
#include "profile/flame_graph.h"
#include "profile/renderer.h"

namespace tpe {
namespace {

int64_t NowNs() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
}

// `ns` since the epoch as "2026-11-26 06:30:00 UTC".
std::string WallClockText(int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// This thread's CPU time (clock_gettime(2) CLOCK_THREAD_CPUTIME_ID), ns.
uint64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

HttpAnswer BadRequest(std::string body) { return HttpAnswer{400, "text/plain; charset=utf-8", std::move(body)}; }

HttpAnswer UnknownProfile(const Pipeline& pipeline, const std::string& name) {
  std::string names;
  for (const std::string& n : pipeline.ProfileNames()) names += (names.empty() ? "" : ", ") + n;
  return HttpAnswer{404, "text/plain; charset=utf-8",
                    "no profile \"" + name + "\"; the config's profiles: " + (names.empty() ? "none" : names) + "\n"};
}

bool KnownFormat(const std::string& format) {
  return format.empty() || format == "pprof" || format == "folded" || format == "flamegraph";
}

HttpAnswer UnknownFormat(const std::string& format) {
  return BadRequest("format=" + format + " is not one of pprof (the default), folded, flamegraph\n");
}

// Symbolizes `data`'s stacks (the pipeline's ProfileRenderer) and renders them in `format`
// (checked by the caller).
HttpAnswer Render(const Pipeline& pipeline, const std::string& name, Pipeline::ProfileData data,
                  const std::string& format, int64_t time_ns, int64_t duration_ns) {
  HttpAnswer a;
  const uint64_t cpu_at_start = ThreadCpuNs();
  ProfileRenderer::Rendered r = pipeline.renderer().Render(std::move(data.stacks), data.value_type, data.value_unit,
                                                           data.scale, time_ns, duration_ns);
  const Symbolizer::Stats& st = r.stats;
  // Recorded when the render is done, whichever the format: its frames and its CPU time.
  struct Record {
    const Pipeline& pipeline;
    const std::string& name;
    Pipeline::RenderFrames frames;
    uint64_t cpu_at_start;
    ~Record() {
      pipeline.RecordRender(name, frames, ThreadCpuNs() - cpu_at_start);
      // A render of many stacks allocates tens of MB that the heap keeps after it is freed
      // (20 renders of 126k stacks held 953 MB): give them back to the system, at most every 30 s
      // (renders run on one thread: the next reuses what the last freed).
      TrimHeapAtMostEvery(kHeapTrimIntervalNs);
    }
  } record{pipeline, name, Pipeline::RenderFrames{st.frames, st.unsymbolized, st.unknown_mapping, st.file_changed},
           cpu_at_start};
  const auto& profile = r.builder->profile();
  if (format == "folded") {
    a.body = FoldedStacks(profile);
    return a;
  }
  if (format == "flamegraph") {
    a.content_type = "image/svg+xml";
    const std::string when =
        duration_ns > 0 ? ": the " + std::to_string(duration_ns / 1000000000) + " s from " + WallClockText(time_ns)
                        : ": since start, at " + WallClockText(time_ns);
    a.body = FlameGraphSvg(profile, FlameGraphOptions{name + when});
    return a;
  }
  auto gz = r.builder->Gzipped();
  if (!gz.ok()) {
    a.status = 500;
    a.body = gz.status().ToString() + "\n";
    return a;
  }
  a.content_type = "application/octet-stream";
  a.body = std::move(gz).value();
  return a;
}

// "seconds" as sent: "" is the default; else only digits, 1..kMaxProfileSeconds.
bool ParseSeconds(const std::string& text, int* seconds) {
  if (text.empty()) {
    *seconds = kDefaultProfileSeconds;
    return true;
  }
  if (text.size() > 4) return false;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > kMaxProfileSeconds) return false;
  *seconds = v;
  return true;
}

// Waits (at most 10 s) until the reader has dispatched every record stamped before now: a perf
// profile's samples until now are counted (the last ones may wait in a ring under its wakeup
// watermark), and the mappings processes made until now are learnt (a bpf profile's counts are
// current at once, the records naming its processes' frames come through the reader: without
// this a process that exited an instant before the request would be [unknown]). A mark at now
// (Pipeline::AddMark).
void CatchUpWithTheReader(const Pipeline& pipeline) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto d = std::make_shared<Done>();
  pipeline.AddMark(MonotonicNs(), [d](const Plan&) {
    std::lock_guard<std::mutex> lock(d->mu);
    d->done = true;
    d->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(d->mu);
  d->cv.wait_for(lock, std::chrono::seconds(10), [&] { return d->done; });
}

}  // namespace

HttpAnswer RenderProfile(const Pipeline& pipeline, const std::string& name, const std::string& format) {
  if (!KnownFormat(format)) return UnknownFormat(format);
  // Every record stamped before the request dispatched first (the mark wakes the reader; it runs
  // a quiet slack, 1 ms, after now):
  // a perf profile's last samples may wait in a ring under its wakeup watermark, and a bpf
  // profile's processes' mappings come through the reader.
  if (pipeline.ProfileStamped(name).has_value()) CatchUpWithTheReader(pipeline);
  auto data = pipeline.Profile(name);
  if (!data) return UnknownProfile(pipeline, name);
  return Render(pipeline, name, std::move(*data), format, NowNs(), 0);
}

PprofReply ServeProfile(const Pipeline& pipeline, const PprofRequest& request) {
  PprofReply reply;
  if (!request.seconds) {
    const std::vector<std::string> names = pipeline.ProfileNames();
    if (!KnownFormat(request.format)) {
      reply.answer = UnknownFormat(request.format);
    } else if (std::find(names.begin(), names.end(), request.name) == names.end()) {
      reply.answer = UnknownProfile(pipeline, request.name);
    } else {
      // Rendered on the server's delayed-answer thread, not on an event loop's: a render of many
      // stacks takes ~150 ms, and the /metrics connections of that loop would wait behind it.
      reply.later = [&pipeline, name = request.name, format = request.format] {
        return RenderProfile(pipeline, name, format);
      };
    }
    return reply;
  }
  if (!KnownFormat(request.format)) {
    reply.answer = UnknownFormat(request.format);
    return reply;
  }
  int seconds = 0;
  if (!ParseSeconds(*request.seconds, &seconds)) {
    // What the client sent, cut: it is echoed into the answer.
    reply.answer = BadRequest("seconds=" + request.seconds->substr(0, 32) +
                              " is not a whole number of seconds from 1 to " + std::to_string(kMaxProfileSeconds) +
                              " (without a value: " + std::to_string(kDefaultProfileSeconds) + ")\n");
    return reply;
  }
  const std::vector<std::string> names = pipeline.ProfileNames();
  if (std::find(names.begin(), names.end(), request.name) == names.end()) {
    reply.answer = UnknownProfile(pipeline, request.name);
    return reply;
  }
  // The window's bounds are marks in the reader's dispatch: the profile exactly as it was after
  // the last sample stamped before each bound (samples of the instant before the request that
  // the reader had not dispatched yet are not the window's). A profile the kernel counts (bpf:
  // not stamped) is read at each bound's moment instead: the start when the wait is accepted,
  // the end when `later` runs (each hit is in exactly one of two adjacent windows).
  struct Window {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Pipeline::ProfileStart> start;  // the profile at the window's start
    std::optional<Pipeline::ProfileData> end;     // what it gained by the window's end
    bool done[2] = {false, false};
    bool read_now = false;  // not stamped: the end is read by `later`, at end_ns at the earliest
    uint64_t end_ns = 0;    // CLOCK_MONOTONIC
    int64_t start_ns = 0;   // wall clock at the window's start (pprof time_nanos)
  };
  auto w = std::make_shared<Window>();
  const int64_t duration_ns = int64_t{seconds} * 1000000000;
  // Once the server accepted the wait (a refused request holds no snapshot).
  reply.start = [&pipeline, w, duration_ns, name = request.name] {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->start_ns = NowNs();
    }
    if (pipeline.ProfileStamped(name) == false) {
      auto start = pipeline.StartProfile(name);
      std::lock_guard<std::mutex> lock(w->mu);
      w->start = std::move(start);
      w->done[0] = true;
      w->read_now = true;
      w->end_ns = MonotonicNs() + static_cast<uint64_t>(duration_ns);
      return;
    }
    const uint64_t t0 = MonotonicNs();
    // The start mark runs first (marks run in time order): the end mark finds its start.
    pipeline.AddMark(t0, [w, name](const Plan& plan) {
      auto start = Pipeline::StartProfileOf(plan, name);
      std::lock_guard<std::mutex> lock(w->mu);
      w->start = std::move(start);
      w->done[0] = true;
      w->cv.notify_all();
    });
    pipeline.AddMark(t0 + static_cast<uint64_t>(duration_ns), [w, name](const Plan& plan) {
      std::optional<Pipeline::ProfileStart> start;
      {
        std::lock_guard<std::mutex> lock(w->mu);
        start = w->start;
      }
      auto data = Pipeline::ProfileOf(plan, name, start ? &*start : nullptr);
      std::lock_guard<std::mutex> lock(w->mu);
      w->end = std::move(data);
      w->done[1] = true;
      w->cv.notify_all();
    });
  };
  reply.delay = std::chrono::seconds(seconds);
  reply.later = [&pipeline, name = request.name, format = request.format, w, duration_ns] {
    std::unique_lock<std::mutex> lock(w->mu);
    if (w->read_now && !w->done[1]) {
      const uint64_t end_ns = w->end_ns;
      lock.unlock();
      if (const uint64_t now = MonotonicNs(); now < end_ns) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(end_ns - now));
      }
      CatchUpWithTheReader(pipeline);
      lock.lock();
      std::optional<Pipeline::ProfileStart> start = w->start;
      lock.unlock();
      auto data = pipeline.Profile(name, start ? &*start : nullptr);
      lock.lock();
      w->end = std::move(data);
      w->done[1] = true;
    }
    // The reader wakes for the mark at the window's end; a stopped or paused reader (a reload)
    // answers later.
    if (!w->cv.wait_for(lock, std::chrono::seconds(10), [&] { return w->done[0] && w->done[1]; })) {
      return HttpAnswer{503, "text/plain; charset=utf-8",
                        "profile \"" + name +
                            "\": the window's end was not reached (the daemon is stopping or "
                            "reloading); retry\n"};
    }
    // What the profile gained in the window (ProfileOf with the start; all of it when a reload
    // replaced the profile meanwhile: its samples since then are all this window has of it).
    if (!w->end) {
      return HttpAnswer{404, "text/plain; charset=utf-8",
                        "profile \"" + name + "\" was removed by a reload during the request\n"};
    }
    Pipeline::ProfileData data = std::move(*w->end);
    const int64_t start_ns = w->start_ns;
    lock.unlock();
    return Render(pipeline, name, std::move(data), format, start_ns, duration_ns);
  };
  return reply;
}

}  // namespace tpe
