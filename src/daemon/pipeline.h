// The running pipeline: the plan's perf events on every online CPU, one ring per CPU (owned by a
// ring-owner event, MakeRingOwnerAttr; every sampled event of that CPU writes into it via
// PERF_EVENT_IOC_SET_OUTPUT), the reader thread (epoll over the ring fds with watermark
// wakeups), and the scrape-time snapshot of every metric plus the self-metrics.
//
// One pipeline lives as long as the daemon; a reload swaps its plan:
//  * Reload is exact: perf events are kept under their identity (event, filter, counting or
//    sampled — EventPlan::SamePerfEvents). A metric that is unchanged keeps its collector and
//    its very perf events and rings, so no event is counted twice (old and new events never both
//    count it) and none is missed (there is no gap between a disable and an enable). New events
//    are opened before anything changes (a failure leaves the old plan running untouched);
//    events no metric uses any more are closed. Latency starts in flight survive.
//  * Probe events of a replaced binary (Plan::probe_replaced): a kept metric keeps the perf
//    events (and bpf programs) of the events it still has, gets new ones on the events it did
//    not have, and the counts of events it no longer has (no process maps their file) carry on
//    (counting mode: MetricPlan::counting_carried; samples still in the rings: Plan::draining).
//  * "pid" events: a perf event per thread of the process (EventPlan::task_fds), inherited by
//    the threads it creates later; see OpenTaskEvents in pipeline.cc.
//  * CPU hotplug: a per-CPU perf event dies when its CPU goes offline and stays dead when the
//    CPU returns (the kernel detaches it; PERF_EVENT_IOC_ENABLE does not revive it). The reader
//    thread checks each CPU's events (their time_enabled stops advancing) every second and at
//    once on a kernel "cpu" uevent (CpuHotplugMonitor): an offline CPU is logged and shown in
//    tracepoint_exporter_cpu_online{cpu}; when it is back its ring and events are reopened
//    (their counts so far are kept: EventPlan::retired), logged, and counted in
//    tracepoint_exporter_cpu_reopens_total{cpu}; the time its events were not counting is
//    tracepoint_exporter_cpu_untraced_seconds_total{cpu}. A CPU offline at start is opened
//    when it comes online.
//
// Thread-safety: Open/Start/Reload/Stop from the owning (main) thread; Snapshot from any thread.
// `mu_` guards the plan pointer, the rings' list and the events' fds against scrapes; the
// reader thread takes it only to reopen a CPU, the main thread for the swap of a reload (with
// the reader thread stopped).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "collectors/profile.h"
#include "collectors/self_metrics.h"
#include "collectors/snapshot.h"
#include "collectors/sweeper.h"
#include "common/metric_desc.h"
#include "common/scoped_fd.h"
#include "daemon/reader.h"
#include "perf/cpu_hotplug.h"
#include "plan/bpf_parts.h"
#include "plan/plan.h"
#include "process/mapped_files.h"
#include "process/process_images.h"
#include "profile/renderer.h"
#include "tracefs/tracefs.h"
#include "unwind/cfi_cache.h"

namespace tpe {

class Pipeline {
 public:
  // `tracefs` (not owned, outlives the pipeline) explains rejected filters.
  explicit Pipeline(const Tracefs* tracefs);
  ~Pipeline();

  // Opens and enables every perf event of `plan` (counting and sampled) on every online CPU and
  // maps the rings. Errors: PermissionDenied (with what is missing), InvalidArgument for a
  // rejected filter (with the kernel's reason, naming the config file), Unavailable for mlock.
  Status Open(std::unique_ptr<Plan> plan);
  // Starts the reader thread (ring reading and CPU hotplug checks).
  Status Start();
  // Switches to `next` exactly (see above). On error (a new event cannot be opened, e.g. the
  // kernel rejects a filter) nothing changed and the current plan keeps running.
  Status Reload(std::unique_ptr<Plan> next);
  // Disables the events, stops the reader and dispatches everything still in the rings.
  // Idempotent: later calls do nothing.
  void Stop();

  // User metrics (config order) then self-metrics.
  std::vector<MetricSnapshot> Snapshot() const;
  // Profile `name` so far (collectors/profile.h), or nullopt when the running plan has no
  // profile of that name. Any thread.
  struct ProfileData {
    std::string value_type;  // "samples", the value field's name, or "cpu"
    std::string value_unit;  // "count", or "nanoseconds" (a CPU profile)
    double scale = 1;        // multiplies a value profile's raw integers
    uint64_t instance = 0;   // StackProfile::instance(): changes when a reload replaces it
    std::vector<StackCount> stacks;
  };
  // The start of a window on a profile: its instance and its series then.
  struct ProfileStart {
    uint64_t instance = 0;
    std::shared_ptr<const StackBaseline> baseline;  // never null
  };
  // Profile `name` of the running plan, or nullopt; with `since` (a ProfileStart of the same
  // profile), its stacks are what it gained since then (StackProfile::StacksSince) — all of them
  // when a reload replaced the profile meanwhile (another instance). Any thread.
  std::optional<ProfileData> Profile(const std::string& name, const ProfileStart* since = nullptr) const;
  // Profile `name` of `plan`, or nullopt (`since` as Profile's). Whoever may read `plan` (the
  // reader thread in a mark).
  static std::optional<ProfileData> ProfileOf(const Plan& plan, const std::string& name,
                                              const ProfileStart* since = nullptr);
  // The start of a window on profile `name` of the running plan / of `plan`, or nullopt when
  // there is no such profile. Threads as Profile / ProfileOf.
  std::optional<ProfileStart> StartProfile(const std::string& name) const;
  static std::optional<ProfileStart> StartProfileOf(const Plan& plan, const std::string& name);
  // Calls `fn` on the reader thread with the running plan exactly at `at_ns` (CLOCK_MONOTONIC):
  // after every record stamped before it was dispatched, before any stamped at or after it
  // (Reader::AddMark; kept across reloads, run at Stop). Before Start and after Stop: at once.
  // Any thread.
  void AddMark(uint64_t at_ns, std::function<void(const Plan&)> fn) const;
  // Whether the running plan's profile `name` is stamped (StackProfile::stamped(); a window's
  // bounds are then reader marks), or nullopt when there is none. Any thread.
  std::optional<bool> ProfileStamped(const std::string& name) const;
  // The names of the running plan's profiles, in config order. Any thread.
  std::vector<std::string> ProfileNames() const;
  // What the last render of profile `name` (daemon/profile_pages.h) made of its frames
  // (Symbolizer::Stats: all, no symbol in a known mapping, in no known mapping), for the
  // self-metric tracepoint_exporter_profile_render_frames{profile, frames}. Any thread.
  // `cpu_ns`: the rendering thread's CPU time for it (CLOCK_THREAD_CPUTIME_ID: symbolization,
  // pprof, gzip), added to tracepoint_exporter_profile_render_cpu_seconds_total{profile}.
  struct RenderFrames {
    uint64_t frames = 0, no_symbol = 0, unknown_mapping = 0, file_changed = 0;
  };
  void RecordRender(const std::string& name, const RenderFrames& frames, uint64_t cpu_ns = 0) const;
  // CPU time spent rendering profile `name` so far, ns (0 when never rendered). Any thread.
  uint64_t RenderCpuNs(const std::string& name) const;
  // What the reader learnt of processes' mappings, over time (profiles' user frames are
  // normalized with it). Any thread.
  const ProcessImages& process_images() const { return process_images_; }
  // Renders profiles (daemon/profile_pages.h): its caches live as long as the pipeline. Any thread.
  ProfileRenderer& renderer() const { return renderer_; }

  // Main thread only (a reload replaces it).
  const Plan& plan() const { return *plan_; }
  size_t ring_count() const;

  // Checks every CPU now (as the reader thread does each second); for tests and for --print.
  void CheckCpusNow();

 private:
  struct CpuState {
    std::atomic<bool> open{false};  // its ring (if any) and events are open and enabled
    bool logged_offline = false;
    uint64_t enabled_ns = 0;     // time_enabled of its probe event at the last check
    uint64_t dead_since_ns = 0;  // CLOCK_MONOTONIC when it was found offline or dead
    RelaxedCounter reopens;
    std::atomic<double> untraced_seconds{0};
  };

  void Run();
  // Snapshot's self-metrics, appended to `out` by job (under mu_, with a plan). Per event: hits,
  // samples, lost and unaccounted samples, pid perf events, kprobe misses.
  void AppendEventMetrics(SelfMetrics* m) const;
  // Per metric: decode errors, series dropped and removed, latency pairs unmatched and in flight.
  void AppendCollectorMetrics(SelfMetrics* m) const;
  // The engines: metric_info{metric,engine} and the bpf programs' runs, misses and run time.
  void AppendEngineMetrics(SelfMetrics* m) const;
  // Per CPU ring: bytes read, lost samples, garbled batches.
  void AppendRingMetrics(SelfMetrics* m) const;
  // Per CPU: online, reopens after hotplug, untraced seconds.
  void AppendCpuMetrics(SelfMetrics* m) const;
  // With profiles: learnt processes and images, refused files, unwind tables, debug info, renders.
  void AppendProfileMetrics(SelfMetrics* m) const;
  // The reader's other records and wakeups, build information, kernel features.
  void AppendReaderAndKernelMetrics(SelfMetrics* m) const;
  void StopThread();
  Status StartThread();
  // Reload's steps (pipeline_reload.cc), under mu_ with the reader paused. `kept[i]`: the running
  // event whose perf events next's event i takes over (null: opened anew); `taken[j]`: running
  // event j is kept.
  // 1. Opens (disabled) next's events that are not kept, on every traced CPU.
  Status OpenReloadEvents(std::unique_ptr<Plan>* next, const std::vector<EventPlan*>& kept);
  // 2. Detaches the programs of running bpf metrics that `next` drops or replaces, so that old
  //    and new programs are never attached at once (the kernel caps one tracepoint's programs:
  //    BPF_TRACE_MAX_PROGS, 64, E2BIG); their counts freeze. Returns them.
  std::vector<Collector*> DetachDroppedPrograms(const Plan& next);
  // 3. Attaches the programs of next's new bpf metrics; a kept metric on probe events gets
  //    programs on the events it did not have (a binary replaced since). The first error.
  Status AttachNewPrograms(Plan* next);
  // After a failed step: next's programs detached, `detached` attached again (logged if not).
  static void UndoAttach(Plan* next, const std::vector<Collector*>& detached);
  // 4. The swap: kept events move with their fds and counts, kept metrics with their collectors,
  //    new events are enabled and the running ones disabled. Returns the plan that ran (closing
  //    its perf events nothing uses any more when destroyed).
  std::unique_ptr<Plan> SwapPlans(std::unique_ptr<Plan> next, const std::vector<EventPlan*>& kept,
                                  const std::vector<bool>& taken);
  // Opens `ep`'s perf event on `cpu` (disabled; filter set; SET_OUTPUT to the CPU's ring); for a
  // sampled "pid" event, one per thread of the process (OpenTaskEvents); a counting "pid" event
  // is opened by OpenTaskEvents(ep, -1) instead.
  Status OpenEvent(EventPlan* ep, int cpu);
  // One perf event of `ep` on `cpu` for task `tid` (-1: every task; > 0: that thread, with
  // attr.inherit); *id is its PERF_EVENT_IOC_ID. A bpf CPU profile's clock event
  // (EventPlan::bpf_profile) gets its profile's program attached.
  StatusOr<ScopedFd> OpenFd(EventPlan* ep, int cpu, int tid, uint64_t* id);
  // The fd of the loaded program of the bpf profile `ep` runs (EventPlan::bpf_profile), looked
  // up in plan_ by identity. Internal when plan_ has no such loaded profile. Under mu_.
  StatusOr<int> BpfProgramOf(const EventPlan& ep) const;
  // A "pid" event's perf events on `cpu` (-1: every CPU, counting mode), one per thread of the
  // process, into ep->task_fds (disabled). Errors: the process does not exist (when
  // `must_exist`; else nothing is opened), more events than settings.max_pid_perf_events, a
  // process that kept creating threads while they were opened; each names the config file and
  // the metric's JSON path.
  Status OpenTaskEvents(EventPlan* ep, int cpu, bool must_exist);
  // The error for a "pid" whose process is gone: the config file, the JSON path, the pid, what to do.
  Status VanishedProcess(const EventPlan& ep) const;
  // PERF_EVENT_IOC_ENABLE on `ep`'s perf events on `cpu` (-1: all of them).
  Status EnableAll(EventPlan* ep, int cpu);
  // PERF_EVENT_IOC_DISABLE on all of `ep`'s perf events.
  static void DisableAll(EventPlan* ep);
  // One log line per "pid" event: its threads and perf events.
  void LogPidEvents() const;
  // Opens r->cpu's ring-owner event, maps its ring and adds it to epoll (when running).
  Status MapRing(CpuRing* r);
  // The ring of `cpu`, opening its ring-owner event and mapping it when there is none.
  StatusOr<CpuRing*> EnsureRing(int cpu);
  CpuRing* FindRing(int cpu);
  // Opens `cpu`'s ring and every event of the plan on it, and enables them. Under mu_.
  // `reopen`: after the CPU came back (a "pid" process that exited meanwhile is no error).
  Status OpenCpu(int cpu, bool reopen);
  // Closes `cpu`'s dead events (keeping their final counts) and ring, then OpenCpu. Under mu_.
  Status ReopenCpu(int cpu);
  // The fd whose time_enabled tells whether `cpu`'s events are alive, or -1.
  int ProbeFd(int cpu) const;
  void CheckCpus();
  CpuState& Cpu(int cpu);

  const Tracefs* tracefs_;  // not owned
  mutable std::mutex mu_;
  std::unique_ptr<Plan> plan_;
  std::deque<CpuRing> rings_;
  std::deque<CpuState> cpus_;  // by CPU number (deque: stable addresses, atomics inside)
  std::unique_ptr<Reader> reader_;
  // What processes map, from the profiles' PERF_RECORD_MMAP2 and the task records, and the files
  // their frames lie in (kept across reloads: a profile kept by a reload keeps naming its stacks).
  MappedFiles mapped_files_;
  ProcessImages process_images_{&mapped_files_};
  unwind::CfiCache cfi_tables_{&mapped_files_};  // "dwarf" profiles' unwind tables
  mutable ProfileRenderer renderer_{&process_images_, &mapped_files_};
  mutable std::mutex render_mu_;                           // guards renders_
  mutable std::map<std::string, RenderFrames> renders_;    // by profile: its last render
  mutable std::map<std::string, uint64_t> render_cpu_ns_;  // by profile: all its renders
  Sweeper sweeper_;                                        // sweeps the bpf metrics' maps; runs while thread_ does
  std::unique_ptr<CpuHotplugMonitor> hotplug_;             // null when uevents cannot be received
  ScopedFd epoll_fd_;
  // eventfd that wakes the reader: to stop, or for a mark (AddMark) that a sleeping reader would
  // otherwise run only at its next watermark or timeout (Reader::idle_ns).
  ScopedFd wake_fd_;
  int RoundTimeoutMs(uint64_t now_ns) const;  // reader thread: epoll_wait's timeout before the next round
  std::thread thread_;
  std::atomic<bool> running_{false};
  bool stopped_ = false;
  bool flushed_ = false;  // Stop's final rounds began: marks run at once (guarded by mu_)
  uint64_t last_cpu_check_ns_ = 0;
  bool any_cpu_down_ = false;  // reader thread: a CPU traced before is offline now
  RelaxedCounter wakeups_;
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kRingBufferReadBytesTotalDesc{"tracepoint_exporter_ring_buffer_read_bytes_total",
                                                          "Bytes read from each CPU's perf ring buffer.",
                                                          MetricKind::kCounter};
inline constexpr MetricDesc kRingLostSamplesTotalDesc{
    "tracepoint_exporter_ring_lost_samples_total",
    "Samples reported lost by PERF_RECORD_LOST/PERF_RECORD_LOST_SAMPLES, per CPU ring.", MetricKind::kCounter};
inline constexpr MetricDesc kRingErrorsTotalDesc{"tracepoint_exporter_ring_errors_total",
                                                 "Garbled ring buffer batches that were skipped, per CPU ring.",
                                                 MetricKind::kCounter};
inline constexpr MetricDesc kCpuOnlineDesc{
    "tracepoint_exporter_cpu_online",
    "Whether the CPU's perf events are open and counting (0: offline, or its events are being "
    "reopened after it came back).",
    MetricKind::kGauge};
inline constexpr MetricDesc kCpuReopensTotalDesc{
    "tracepoint_exporter_cpu_reopens_total",
    "Times the CPU's ring and perf events were (re)opened after it came online.", MetricKind::kCounter};
inline constexpr MetricDesc kCpuUntracedSecondsTotalDesc{
    "tracepoint_exporter_cpu_untraced_seconds_total",
    "Seconds the CPU's perf events were dead, from finding it offline to reopening them once "
    "it was back (events it ran in that time after coming back were not seen).",
    MetricKind::kCounter};
inline constexpr MetricDesc kProfileRenderFramesDesc{
    "tracepoint_exporter_profile_render_frames",
    "Frames of a profile's last render (/debug/pprof/<profile>): all, and those left as an "
    "offset: no_symbol (a known mapping, no ELF or perf-map symbol holds it), unknown_mapping "
    "(no mapping known for the process: exited before its mappings were learnt, or not "
    "readable); file_changed counts the files not read because they are no longer the ones "
    "sampled (replaced or overwritten since) or are gone. Absent until the profile is "
    "rendered.",
    MetricKind::kGauge};
inline constexpr MetricDesc kProfileRenderCpuSecondsTotalDesc{
    "tracepoint_exporter_profile_render_cpu_seconds_total",
    "CPU time the exporter spent rendering a profile for its requests (symbolization, "
    "pprof, flame graph, gzip), by profile. Its sample handling is "
    "tracepoint_exporter_profile_sample_seconds_total (perf engine) or "
    "tracepoint_exporter_bpf_program_cpu_seconds_total (bpf).",
    MetricKind::kCounter};
inline constexpr MetricDesc kBuildInfoDesc{"tracepoint_exporter_build_info", "Build and kernel information; always 1.",
                                           MetricKind::kGauge};
inline constexpr MetricDesc kReaderWakeupsTotalDesc{
    "tracepoint_exporter_reader_wakeups_total",
    "Reader thread wakeups (watermark, mark, or timeout: 100 ms while a metric counts ring samples, else 1 s).",
    MetricKind::kCounter};

}  // namespace tpe
