#include "plan/kernel_features.h"

#include <sstream>

#include "common/file_util.h"
#include "profile/kallsyms.h"

namespace tpe {

CgroupFacts DetectCgroupFacts(const std::string& mountinfo, const std::string& proc_self_cgroup) {
  CgroupFacts out;
  // mountinfo(5): "... mount-point ... - fstype source options"
  bool v2_mounted = false;
  std::istringstream mi(mountinfo);
  for (std::string line; std::getline(mi, line);) {
    const size_t dash = line.find(" - ");
    if (dash != std::string::npos && line.compare(dash + 3, 8, "cgroup2 ") == 0) v2_mounted = true;
  }
  if (!v2_mounted) {
    out.v2_labels = false;
    out.why = "no cgroup2 filesystem is mounted (a cgroup-v1-only host)";
    return out;
  }
  // /proc/self/cgroup: "hierarchy-ID:controller-list:cgroup-path"; v2 is "0::path".
  std::string v2_path;
  bool v1_elsewhere = false;
  std::istringstream pc(proc_self_cgroup);
  for (std::string line; std::getline(pc, line);) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {
      v2_path = path;
    } else if (!controllers.empty() && !controllers.starts_with("name=") && path != "/") {
      v1_elsewhere = true;
    }
  }
  if (v2_path == "/" && v1_elsewhere) {
    out.v2_labels = false;
    out.why =
        "cgroup2 is mounted but holds no tasks: this process is in the v2 root while the v1 hierarchies "
        "place it elsewhere (a cgroup-v1 host)";
  }
  return out;
}

KernelFeatures DetectKernelFeatures(const std::string& tracefs_root) {
  KernelFeatures f;
  f.perf = DetectPerfFeatures();
  f.bpf = bpf::DetectBpfFeatures();
  auto mi = ReadFileToString("/proc/self/mountinfo");
  auto pc = ReadFileToString("/proc/self/cgroup");
  if (mi.ok() && pc.ok()) f.cgroup = DetectCgroupFacts(*mi, *pc);
  if (!tracefs_root.empty()) {
    if (auto readme = ReadFileToString(tracefs_root + "/README"); readme.ok())
      f.probe_readme = ParseProbeReadme(*readme);
  }
  RefreshRuntimeFacts(&f);
  return f;
}

void RefreshRuntimeFacts(KernelFeatures* f, const std::string& kallsyms_path) {
  f->perf.max_stack = ReadPerfEventMaxStack();
  auto hidden = KallsymsHidden(kallsyms_path);
  f->kallsyms_hidden = hidden.ok() ? std::optional<bool>(*hidden) : std::nullopt;
}

std::vector<FeatureRow> DescribeFeatures(const KernelFeatures& f) {
  std::vector<FeatureRow> rows = {
      {"perf_format_lost", "6.0", f.perf.format_lost,
       "per-event lost samples are not counted: tracepoint_exporter_samples_lost_total is not exported (never a "
       "false 0); the rings' PERF_RECORD_LOST still count them per CPU (tracepoint_exporter_ring_lost_samples_total) "
       "and tracepoint_exporter_samples_unaccounted_total includes them"},
      {"perf_sample_cgroup", "5.7", f.perf.sample_cgroup,
       "cgroup labels on the perf engine are refused; the bpf engine gives them (bpf_get_current_cgroup_id)"},
      {"perf_inherit_thread", "5.13", f.perf.inherit_thread,
       "a \"pid\" probe metric also counts the child processes its process forks after the metric started "
       "(perf events are inherited by every child task, not only by new threads); a child that execs another "
       "program no longer runs the probed code"},
      {"bpf_probe_read_kernel_str", "5.5", f.bpf.probe_read_kernel_str,
       "programs call bpf_probe_read(_str) instead: the same reads of tracepoint records"},
      {"bpf_runtime_alloc_safe", "6.1 (not PREEMPT_RT)", f.bpf.runtime_alloc_safe,
       "bpf hash maps are preallocated: each costs max_entries x (key + value) bytes of kernel memory up front "
       "(max_entries x (key + value x possible CPUs) for the per-CPU series map), whatever the series count"},
      {"bpf_tracepoint_misses", "6.7", f.bpf.tracepoint_misses,
       "the kernel does not count skipped runs of tracepoint programs: tracepoint_exporter_bpf_program_misses_total "
       "is not exported (never a false 0); runs skipped while another BPF program runs on the CPU go uncounted"},
      {"bpf_skipped_runs_counted", "6.7 (or kernel code not preemptible, or map syscalls at SCHED_FIFO)",
       f.bpf.tracepoint_misses || !f.bpf.preemptible_syscalls || f.bpf.fifo_map_syscalls,
       "the kernel skips bpf programs on a CPU, uncounted, while one of the exporter's map syscalls (a scrape's "
       "read, a sweep) is preempted there (bpf_prog_active under a preemptible migrate_disable), and this process "
       "cannot run them at SCHED_FIFO 99 (CAP_SYS_NICE or RLIMIT_RTPRIO 99, no RestrictRealtime=yes): \"auto\" puts "
       "metrics on the perf engine, which accounts every sample; \"engine\": \"bpf\" runs with that loss"},
      {"bpf_atomic_xchg", "5.12", f.bpf.atomic_xchg,
       "probe programs (uprobes, USDT, kprobes) take their record's guard with a plain load and store, which is "
       "enough where their runs cannot nest (before 5.12 the kernel ran them under bpf_prog_active)"},
      {"bpf_map_lookup_and_delete", "5.14", f.bpf.map_lookup_and_delete,
       "a sweep that finds an expired latency start takes the starts map a chunk at a time "
       "(BPF_MAP_LOOKUP_AND_DELETE_BATCH) and puts the fresh starts back: an end arriving in those microseconds "
       "counts no_start and its start later expired (every start still counted once); idle series leave the "
       "map by lookup then delete, so an increment between the two syscalls is lost"},
      {"bpf_map_batch_ops", "5.6", f.bpf.map_batch_ops,
       "maps are read key by key (BPF_MAP_GET_NEXT_KEY); a sweep that finds an expired latency start deletes it "
       "after checking it is unchanged, and a start written between that check and the delete is lost"},
      {"bpf_memlock_uncharged", "5.11", !f.bpf.memlock_charged,
       "BPF memory is charged to RLIMIT_MEMLOCK: " +
           (f.bpf.memlock_note.empty() ? std::string("not raised") : f.bpf.memlock_note)},
      {"cgroup_v2_labels", "a cgroup2 mount holding tasks", f.cgroup.v2_labels,
       "cgroup labels are left out of the metrics that have them (a warning names each): " +
           (f.cgroup.why.empty() ? std::string("cgroup v2 unused") : f.cgroup.why)},
  };
  if (f.probe_readme.probe_synopsis) {  // the tracefs README says which probe syntax the kernel takes
    rows.push_back({"uprobe_ref_ctr_offset", "4.20", f.probe_readme.uprobe_ref_ctr,
                    "USDT probes with a semaphore are refused (the kernel cannot set it, so the program would skip "
                    "them); probes without one run"});
    rows.push_back({"kprobe_ustring", "5.4", f.probe_readme.HasType("ustring"),
                    "kprobe args of type ustring (user-space strings) are refused; uprobes read strings as "
                    "\"string\""});
  }
  return rows;
}

bpf::LoadOptions ChooseLoadOptions(const KernelFeatures& f) {
  bpf::LoadOptions o;
  o.preallocate_maps = !f.bpf.runtime_alloc_safe;
  o.probe_read_fallback = !f.bpf.probe_read_kernel_str;
  o.memlock_charged = f.bpf.memlock_charged;
  o.atomic_xchg = f.bpf.atomic_xchg;
  o.map_lookup_and_delete = f.bpf.map_lookup_and_delete;
  o.map_batch_ops = f.bpf.map_batch_ops;
  return o;
}

}  // namespace tpe
