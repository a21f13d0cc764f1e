#include "daemon/pipeline.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>

#include "collectors/counter.h"
#include "collectors/latency.h"
#include "common/log.h"
#include "perf/perf_event.h"

#ifndef TPE_VERSION
#define TPE_VERSION "0.0.0"
#endif

namespace tpe {

Pipeline::Pipeline(std::unique_ptr<Plan> plan, const Tracefs* tracefs) : plan_(std::move(plan)), tracefs_(tracefs) {}

Pipeline::~Pipeline() { Stop(); }

Status Pipeline::OpenEventOnCpu(EventPlan* ep, int cpu, int ring_owner_fd, bool track_tasks) {
  TracepointEventOptions o;
  o.tracepoint_id = ep->tracepoint_id;
  o.sampled = ep->sampled;
  o.track_tasks = track_tasks;
  const uint64_t ring_bytes = static_cast<uint64_t>(plan_->settings.ring_buffer_pages) * ::sysconf(_SC_PAGESIZE);
  o.wakeup_watermark_bytes = static_cast<uint32_t>(ring_bytes / 4);
  TPE_ASSIGN_OR_RETURN(ScopedFd fd, OpenPerfEvent(MakeTracepointAttr(o), cpu));
  if (!ep->filter.empty()) {
    Status st = SetFilter(fd.get(), ep->filter);
    if (!st.ok()) {
      Status why = tracefs_ ? tracefs_->CheckFilter(ep->event, ep->filter) : st;
      return InvalidArgument(plan_->config_path + ": filter \"" + ep->filter + "\" on " + ep->event.ToString() + ": " +
                             (why.ok() ? st.message() : why.message()));
    }
  }
  if (ep->sampled && ring_owner_fd >= 0) TPE_RETURN_IF_ERROR(SetOutput(fd.get(), ring_owner_fd));
  TPE_ASSIGN_OR_RETURN(uint64_t id, ReadEventId(fd.get()));
  ep->ids.push_back(id);
  ep->fds.push_back(std::move(fd));
  return Status::Ok();
}

Status Pipeline::Open() {
  TPE_ASSIGN_OR_RETURN(std::vector<int> cpus, OnlineCpus());
  for (int cpu : cpus) {
    int owner = -1;
    for (auto& ep : plan_->events) {
      bool first_sampled = ep->sampled && owner < 0;
      TPE_RETURN_IF_ERROR(OpenEventOnCpu(ep.get(), cpu, owner, first_sampled && plan_->needs_comm));
      if (first_sampled) {
        owner = ep->fds.back().get();
        auto ring = RingBuffer::Map(owner, plan_->settings.ring_buffer_pages);
        if (!ring.ok()) return ring.status();
        CpuRing& r = rings_.emplace_back();
        r.cpu = cpu;
        r.ring = std::make_unique<RingBuffer>(std::move(*ring));
      }
    }
  }
  reader_ = std::make_unique<Reader>(plan_.get(), &rings_);
  for (auto& ep : plan_->events) {
    for (auto& fd : ep->fds) TPE_RETURN_IF_ERROR(EnableEvent(fd.get()));
  }
  size_t nfds = 0;
  for (auto& ep : plan_->events) nfds += ep->fds.size();
  TPE_LOG_INFO("opened {} perf events ({} tracepoints x {} CPUs), {} rings of {} pages", nfds, plan_->events.size(),
               cpus.size(), rings_.size(), plan_->settings.ring_buffer_pages);
  return Status::Ok();
}

Status Pipeline::Start() {
  if (rings_.empty()) return Status::Ok();
  epoll_fd_ = ScopedFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) return ErrnoStatus(errno, "epoll_create1");
  stop_fd_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_.valid()) return ErrnoStatus(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = stop_fd_.get();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, stop_fd_.get(), &ev) != 0) return ErrnoStatus(errno, "epoll_ctl");
  for (auto& r : rings_) {
    ev.data.fd = r.ring->fd();
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, r.ring->fd(), &ev) != 0)
      return ErrnoStatus(errno, "epoll_ctl ring");
  }
  running_ = true;
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void Pipeline::Run() {
  epoll_event events[64];
  while (running_.load(std::memory_order_relaxed)) {
    // Wake on a ring's watermark, or every 100 ms so that low-rate events are not held back.
    int n = ::epoll_wait(epoll_fd_.get(), events, 64, 100);
    if (n < 0 && errno != EINTR) {
      TPE_LOG_ERROR("epoll_wait: {}", std::strerror(errno));
      break;
    }
    wakeups_.Add(1);
    reader_->Round(/*flush_all=*/false);
  }
}

void Pipeline::Stop() {
  // Once only: after a reload moved collectors to the next pipeline, this one must never
  // dispatch again (its destructor calls Stop too).
  if (stopped_) return;
  stopped_ = true;
  for (auto& ep : plan_->events) {
    for (auto& fd : ep->fds) (void)DisableEvent(fd.get());
  }
  if (running_.exchange(false)) {
    uint64_t one = 1;
    (void)!::write(stop_fd_.get(), &one, sizeof(one));
    thread_.join();
  }
  if (reader_) {
    reader_->Round(/*flush_all=*/true);
    reader_->Round(/*flush_all=*/true);
  }
}

void Pipeline::AdoptFrom(Pipeline& old) {
  for (size_t i = 0; i < plan_->collectors.size(); ++i) {
    for (size_t j = 0; j < old.plan_->collectors.size(); ++j) {
      if (!old.plan_->collectors[j] || old.plan_->identities[j] != plan_->identities[i]) continue;
      Collector* fresh = plan_->collectors[i].get();
      std::unique_ptr<Collector> kept = std::move(old.plan_->collectors[j]);
      for (auto& ep : plan_->events) {
        for (auto& consumer : ep->consumers) {
          if (consumer.first == fresh) consumer.first = kept.get();
        }
      }
      if (EventPlan* ep = plan_->counting_events[i]) {
        static_cast<CounterCollector*>(kept.get())->Rebase([ep] { return ep->ReadKernelCounts().count; });
      }
      plan_->collectors[i] = std::move(kept);
      break;
    }
  }
  for (auto& ep : plan_->events) {
    for (auto& oep : old.plan_->events) {
      if (oep->event == ep->event && oep->filter == ep->filter) {
        ep->base = oep->ReadCounts();
        ep->samples.Add(oep->samples.Get());
        ep->ring_lost.Add(oep->ring_lost.Get());
        break;
      }
    }
  }
  if (reader_ && old.reader_) reader_->comms() = std::move(old.reader_->comms());
}

namespace {

MetricSnapshot Family(const std::string& name, const std::string& help, MetricKind kind) {
  MetricSnapshot m;
  m.name = name;
  m.help = help;
  m.kind = kind;
  return m;
}

void Add(MetricSnapshot* m, LabelPairs labels, double v) {
  SeriesSnapshot s;
  s.labels = std::move(labels);
  s.value = v;
  m->series.push_back(std::move(s));
}

}  // namespace

std::vector<MetricSnapshot> Pipeline::Snapshot() const {
  std::vector<MetricSnapshot> out;
  for (const auto& c : plan_->collectors) out.push_back(c->Snapshot());

  auto hits = Family("tracepoint_exporter_event_hits_total",
                     "Times the tracepoint fired (after its filter), counted by the kernel.", MetricKind::kCounter);
  auto samples = Family("tracepoint_exporter_samples_total", "Samples decoded, per event.", MetricKind::kCounter);
  auto lost = Family("tracepoint_exporter_samples_lost_total",
                     "Samples the kernel dropped because the ring buffer was full, per event (PERF_FORMAT_LOST).",
                     MetricKind::kCounter);
  for (const auto& ep : plan_->events) {
    LabelPairs l = {{"event", ep->event.ToString()}, {"filter", ep->filter}};
    EventCount c = ep->ReadCounts();
    Add(&hits, l, static_cast<double>(c.count));
    if (!ep->sampled) continue;
    Add(&samples, l, static_cast<double>(ep->samples.Get()));
    Add(&lost, l, static_cast<double>(std::max(c.lost, ep->ring_lost.Get())));
  }
  out.push_back(std::move(hits));
  out.push_back(std::move(samples));
  out.push_back(std::move(lost));

  auto decode = Family("tracepoint_exporter_decode_errors_total",
                       "Samples a metric could not decode (a field outside the record).", MetricKind::kCounter);
  auto dropped =
      Family("tracepoint_exporter_series_dropped_total",
             "Samples not counted because the metric reached settings.max_series_per_metric.", MetricKind::kCounter);
  for (const auto& c : plan_->collectors) {
    Add(&decode, {{"metric", c->name()}}, static_cast<double>(c->decode_errors()));
    Add(&dropped, {{"metric", c->name()}}, static_cast<double>(c->series_dropped()));
  }
  out.push_back(std::move(decode));
  out.push_back(std::move(dropped));

  auto unmatched = Family("tracepoint_exporter_latency_unmatched_total",
                          "Latency starts or ends that made no observation, by reason (replaced, no_start, "
                          "table_full, expired, series_limit).",
                          MetricKind::kCounter);
  auto inflight =
      Family("tracepoint_exporter_latency_inflight",
             "Latency starts waiting for their end (at most the metric's max_inflight).", MetricKind::kGauge);
  for (const auto& c : plan_->collectors) {
    const auto* l = dynamic_cast<const LatencyCollector*>(c.get());
    if (l == nullptr) continue;
    for (int r = 0; r < LatencyCollector::kReasonCount; ++r) {
      auto reason = static_cast<LatencyCollector::Reason>(r);
      Add(&unmatched, {{"metric", c->name()}, {"reason", LatencyCollector::ReasonName(reason)}},
          static_cast<double>(l->unmatched(reason)));
    }
    Add(&inflight, {{"metric", c->name()}}, static_cast<double>(l->inflight()));
  }
  if (!unmatched.series.empty()) {
    out.push_back(std::move(unmatched));
    out.push_back(std::move(inflight));
  }

  auto bytes = Family("tracepoint_exporter_ring_buffer_read_bytes_total",
                      "Bytes read from each CPU's perf ring buffer.", MetricKind::kCounter);
  auto ring_lost =
      Family("tracepoint_exporter_ring_lost_samples_total",
             "Samples reported lost by PERF_RECORD_LOST/PERF_RECORD_LOST_SAMPLES, per CPU ring.", MetricKind::kCounter);
  auto ring_err = Family("tracepoint_exporter_ring_errors_total",
                         "Garbled ring buffer batches that were skipped, per CPU ring.", MetricKind::kCounter);
  for (const auto& r : rings_) {
    LabelPairs l = {{"cpu", std::to_string(r.cpu)}};
    Add(&bytes, l, static_cast<double>(r.bytes_read.Get()));
    Add(&ring_lost, l, static_cast<double>(r.lost_samples.Get()));
    Add(&ring_err, l, static_cast<double>(r.errors.Get()));
  }
  out.push_back(std::move(bytes));
  out.push_back(std::move(ring_lost));
  out.push_back(std::move(ring_err));

  auto other = Family("tracepoint_exporter_ring_other_records_total",
                      "Ring records of types not used (stepped over) or samples of unknown ids.", MetricKind::kCounter);
  Add(&other, {}, reader_ ? static_cast<double>(reader_->other_records() + reader_->sample_errors()) : 0.0);
  out.push_back(std::move(other));
  auto wake = Family("tracepoint_exporter_reader_wakeups_total", "Reader thread wakeups (watermark or 100 ms timeout).",
                     MetricKind::kCounter);
  Add(&wake, {}, static_cast<double>(wakeups_.Get()));
  out.push_back(std::move(wake));

  utsname u{};
  ::uname(&u);
  auto info = Family("tracepoint_exporter_build_info", "Build and kernel information; always 1.", MetricKind::kGauge);
  Add(&info, {{"version", TPE_VERSION}, {"kernel", u.release}}, 1);
  out.push_back(std::move(info));
  return out;
}

}  // namespace tpe
