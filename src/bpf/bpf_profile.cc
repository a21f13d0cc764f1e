#include "bpf/bpf_profile.h"

#include <bpf/bpf.h>

#include <cstring>

#include "bpf/map_access.h"
#include "bpf/map_syscall_priority.h"

namespace tpe::bpf {

StatusOr<std::unique_ptr<BpfProfile>> BpfProfile::Create(BpfMetricSpec spec) {
  if (spec.kind != BpfMetricSpec::Kind::kProfile) return InvalidArgument(spec.name + ": not a profile spec");
  TPE_ASSIGN_OR_RETURN(std::unique_ptr<BpfMetric> m, BpfMetric::Create(std::move(spec)));
  return std::unique_ptr<BpfProfile>(new BpfProfile(std::move(m)));
}

StatusOr<std::unique_ptr<BpfProfile>> BpfProfile::CreateUnloaded(BpfMetricSpec spec) {
  if (spec.kind != BpfMetricSpec::Kind::kProfile) return InvalidArgument(spec.name + ": not a profile spec");
  TPE_ASSIGN_OR_RETURN(std::unique_ptr<BpfMetric> m, BpfMetric::CreateUnloaded(std::move(spec)));
  return std::unique_ptr<BpfProfile>(new BpfProfile(std::move(m)));
}

MetricSnapshot BpfProfile::Snapshot() const {
  MetricSnapshot m;
  m.name = metric_->spec().name;
  m.help = metric_->spec().help;
  return m;
}

std::string BpfProfile::LostReason(int32_t id) {
  switch (id) {
    case kStackMapFull:
      return "stack_map_full";
    case kStackCollision:
      return "hash_collision";
    case kStackEmpty:
      return "no_callchain";
    default:
      return "error " + std::to_string(-id);
  }
}

bool BpfProfile::Frames(int32_t id, std::vector<uint64_t>* out) const {
  auto it = frames_.find(id);
  if (it == frames_.end()) {
    std::vector<uint64_t> ips(metric_->spec().max_frames);
    const uint32_t key = static_cast<uint32_t>(id);
    {
      FifoMapSyscall fifo;
      if (bpf_map_lookup_elem(metric_->stacks_fd(), &key, ips.data()) != 0) return false;
    }
    // The kernel zero-fills the value past the stack's frames (stack_map_get_build_id_offset
    // aside, bpf_stackmap_copy: memset of the rest).
    while (!ips.empty() && ips.back() == 0) ips.pop_back();
    it = frames_.emplace(id, std::move(ips)).first;
  }
  *out = it->second;
  return true;
}

BpfProfile::Read BpfProfile::ReadAll(bool resolve) const {
  Read r;
  if (!metric_->loaded()) return r;
  const KeyLayout& layout = metric_->key_layout();
  const LabelSet& labels = metric_->spec().end.labels;
  MapShape shape;
  shape.key_size = metric_->key_size();
  shape.slots = 1;
  shape.cpus = static_cast<uint32_t>(PossibleCpus());
  shape.max_entries = static_cast<uint32_t>(metric_->spec().max_series);
  KernelMap map(metric_->values_fd());
  std::lock_guard<std::mutex> lock(mu_);
  for (MapEntry& e : ReadMap(&map, shape, &batch_)) {
    const size_t at = metric_->stack_key_offset();
    if (e.key.size() < at + sizeof(StackKey) || e.value.empty()) continue;
    StackKey sk;
    std::memcpy(&sk, e.key.data() + at, sizeof(sk));
    StackCount sc;
    sc.labels = labels.Render(ToLabelKey(layout, std::string_view(e.key).substr(0, layout.size)));
    sc.pid = sk.tgid;
    // Without the stamps (bpf/image_stamps.h), the process's latest image.
    sc.image_ns = metric_->spec().image_stamps_fd >= 0 ? sk.image_ns : ~0ull;
    sc.value = e.value[0];
    r.samples += sc.value;
    // A kernel thread has no user stack (-EFAULT: empty, not lost); an event's kernel stack
    // always has frames, so -EFAULT there is the kernel failing to take one (no_callchain),
    // except on a clock, whose samples in user mode have none.
    const bool clock = metric_->spec().end.clock;
    auto part = [&](const char* name, bool user, int32_t id, std::vector<uint64_t>* frames, std::string* lost) {
      if (id == kStackNotTaken || (id == kStackEmpty && (user || clock))) return;
      if (id >= 0 && !resolve) return;
      std::string reason = id >= 0 ? (Frames(id, frames) ? "" : "unreadable") : LostReason(id);
      if (reason.empty()) return;
      r.lost[{name, reason}] += sc.value;
      *lost = std::move(reason);
    };
    part("kernel", false, sk.kernel_id, &sc.kernel, &sc.kernel_lost);
    part("user", true, sk.user_id, &sc.user, &sc.user_lost);
    r.stacks.push_back(std::move(sc));
  }
  return r;
}

std::vector<StackCount> BpfProfile::Stacks() const { return ReadAll(/*resolve=*/true).stacks; }

std::vector<EngineStat> BpfProfile::EngineStats() const {
  std::vector<EngineStat> out = metric_->EngineStats();
  Read r = ReadAll(/*resolve=*/false);  // counts and reasons: no stack is copied for a scrape
  const std::string& name = metric_->spec().name;
  out.push_back({&kProfileSamplesTotalDesc,
                 {{"profile", name}},
                 static_cast<double>(off_cpu() ? metric_->stat(kBlocks) : r.samples)});
  if (off_cpu()) {
    const std::pair<const MetricDesc*, Stat> counts[] = {{&kProfileOffCpuShortBlocksTotalDesc, kShortBlocks},
                                                         {&kProfileOffCpuDroppedTotalDesc, kTableFull},
                                                         {&kProfileOffCpuUnpairedTotalDesc, kUnpaired}};
    for (const auto& [desc, slot] : counts) {
      out.push_back({desc, {{"profile", name}}, static_cast<double>(metric_->stat(slot))});
    }
  }
  out.push_back({&kProfileStacksDesc, {{"profile", name}}, static_cast<double>(r.stacks.size())});
  for (const char* part : {"kernel", "user"}) {
    const bool taken = std::string(part) == "kernel" ? metric_->spec().kernel_stack : metric_->spec().user_stack;
    if (!taken) continue;
    // Both reasons always (a 0 says the stack map has room), any other reason seen.
    for (const char* reason : {"stack_map_full", "hash_collision"}) r.lost.try_emplace({part, reason}, 0);
  }
  for (const auto& [key, n] : r.lost) {
    out.push_back({&kProfileStacksLostTotalDesc,
                   {{"profile", name}, {"part", key.first}, {"reason", key.second}},
                   static_cast<double>(n)});
  }
  return out;
}

}  // namespace tpe::bpf
