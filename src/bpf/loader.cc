#include "bpf/loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "bpf/assembler.h"

namespace tpe::bpf {
namespace {

const char* kCapsHint =
    "the bpf engine needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); grant them (systemd "
    "AmbientCapabilities, Kubernetes securityContext.capabilities.add) or use \"engine\": \"perf\"";

Status BpfError(int err, const std::string& what) {
  if (err == EPERM || err == EACCES) return PermissionDenied(what + ": " + std::strerror(err) + "; " + kCapsHint);
  if (err == ENOMEM || err == E2BIG) return Unavailable(what + ": " + std::strerror(err));
  return Internal(what + ": " + std::strerror(err));
}

// The first online CPU (from /sys/devices/system/cpu/online, "0-1,3"), or 0.
int FirstOnlineCpu() {
  std::ifstream f("/sys/devices/system/cpu/online");
  int cpu = 0;
  if (f >> cpu) return cpu;
  return 0;
}

}  // namespace

BpfSupport ProbeBpf() {
  BpfSupport out;
  auto map = CreateMap(BPF_MAP_TYPE_ARRAY, "tpe_probe", 4, 8, 1);
  if (!map.ok()) {
    out.reason = map.status().message();
    return out;
  }
  Assembler a;
  a.Mov(R0, 1);
  a.Exit();
  auto prog = LoadTracepointProgram("tpe_probe", *a.Finish());
  if (!prog.ok()) {
    out.reason = prog.status().message();
    return out;
  }
  out.available = true;
  return out;
}

StatusOr<ScopedFd> CreateMap(bpf_map_type type, const std::string& name, uint32_t key_size, uint32_t value_size,
                             uint32_t max_entries, uint32_t flags) {
  LIBBPF_OPTS(bpf_map_create_opts, opts);
  opts.map_flags = flags;
  const std::string short_name = name.substr(0, BPF_OBJ_NAME_LEN - 1);
  int fd = bpf_map_create(type, short_name.c_str(), key_size, value_size, max_entries, &opts);
  if (fd < 0) {
    return BpfError(-fd, "creating BPF map " + short_name + " (key " + std::to_string(key_size) + " bytes, value " +
                             std::to_string(value_size) + " bytes, " + std::to_string(max_entries) + " entries)");
  }
  return ScopedFd(fd);
}

StatusOr<ScopedFd> LoadTracepointProgram(const std::string& name, const std::vector<bpf_insn>& insns) {
  const std::string short_name = name.substr(0, BPF_OBJ_NAME_LEN - 1);
  int fd = bpf_prog_load(BPF_PROG_TYPE_TRACEPOINT, short_name.c_str(), "GPL", insns.data(), insns.size(), nullptr);
  if (fd >= 0) return ScopedFd(fd);
  const int err = -fd;
  // Load again with the verifier's log: EACCES is both "no privilege" and "the verifier said no".
  std::string log(1 << 20, '\0');
  LIBBPF_OPTS(bpf_prog_load_opts, opts);
  opts.log_buf = log.data();
  opts.log_size = static_cast<uint32_t>(log.size());
  opts.log_level = 1;
  fd = bpf_prog_load(BPF_PROG_TYPE_TRACEPOINT, short_name.c_str(), "GPL", insns.data(), insns.size(), &opts);
  if (fd >= 0) return ScopedFd(fd);
  log.resize(std::strlen(log.c_str()));
  if (log.empty()) return BpfError(err, "loading BPF program " + short_name);
  if (log.size() > 4096) log = "..." + log.substr(log.size() - 4096);
  return Internal("the kernel's verifier rejected BPF program " + short_name + " (" + std::to_string(insns.size()) +
                  " instructions): " + std::strerror(err) + "; verifier log:\n" + log);
}

StatusOr<ScopedFd> AttachTracepoint(int prog_fd, uint64_t tracepoint_id) {
  perf_event_attr attr{};
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.size = sizeof(attr);
  attr.config = tracepoint_id;
  attr.disabled = 1;  // never counts or samples: the program runs regardless (see the header)
  const int cpu = FirstOnlineCpu();
  int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) {
      return PermissionDenied("perf_event_open(tracepoint " + std::to_string(tracepoint_id) +
                              ") to attach a BPF program: " + std::strerror(err) + "; " + kCapsHint);
    }
    return ErrnoStatus(err, "perf_event_open(tracepoint " + std::to_string(tracepoint_id) + ")");
  }
  ScopedFd event(fd);
  if (ioctl(event.get(), PERF_EVENT_IOC_SET_BPF, prog_fd) != 0) {
    return BpfError(errno, "PERF_EVENT_IOC_SET_BPF on tracepoint " + std::to_string(tracepoint_id));
  }
  return event;
}

ProgramStats ReadProgramStats(int prog_fd) {
  ProgramStats out;
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return out;
  out.run_time_ns = info.run_time_ns;
  out.run_cnt = info.run_cnt;
  out.recursion_misses = info.recursion_misses;
  out.id = info.id;
  return out;
}

int PossibleCpus() {
  static const int n = [] {
    int c = libbpf_num_possible_cpus();
    return c > 0 ? c : 1;
  }();
  return n;
}

}  // namespace tpe::bpf
