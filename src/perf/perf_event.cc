#include "perf/perf_event.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <mutex>

#include "common/file_util.h"

namespace tpe {
namespace {

std::mutex fault_mu;
PerfOpenFault* fault_hook = nullptr;  // owned; guarded by fault_mu

// perf_event_open(2) through the fault seam: the fd, or -errno.
long PerfEventOpen(const perf_event_attr& attr, int pid, int cpu) {
  {
    std::lock_guard<std::mutex> lock(fault_mu);
    if (fault_hook != nullptr) {
      const int err = (*fault_hook)(attr, pid, cpu);
      if (err != 0) return -err;
    }
  }
  long fd = ::syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

uint64_t ReadFormat(bool format_lost) { return PERF_FORMAT_TOTAL_TIME_ENABLED | (format_lost ? PERF_FORMAT_LOST : 0); }

// Whether the kernel accepts `attr` on a per-task event: false only on EINVAL; another error
// goes to *probe_error (the feature is then assumed present).
bool Accepts(perf_event_attr attr, const char* what, std::string* probe_error) {
  long fd = PerfEventOpen(attr, /*pid=*/0, /*cpu=*/-1);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return true;
  }
  if (fd == -EINVAL) return false;
  *probe_error += std::string(probe_error->empty() ? "" : "; ") + what + ": " + std::strerror(static_cast<int>(-fd));
  return true;
}

}  // namespace

void SetPerfOpenFaultForTesting(PerfOpenFault fault) {
  std::lock_guard<std::mutex> lock(fault_mu);
  delete fault_hook;
  fault_hook = fault ? new PerfOpenFault(std::move(fault)) : nullptr;
}

PerfFeatures DetectPerfFeatures() {
  PerfFeatures out;
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_DUMMY;
  attr.disabled = 1;
  attr.exclude_kernel = 1;  // allowed at perf_event_paranoid 2
  attr.read_format = ReadFormat(true);
  out.format_lost = Accepts(attr, "PERF_FORMAT_LOST probe", &out.probe_error);
  attr.read_format = ReadFormat(false);
  attr.sample_period = 1;
  attr.sample_type = kSampleTypeCgroup;
  out.sample_cgroup = Accepts(attr, "PERF_SAMPLE_CGROUP probe", &out.probe_error);
  attr.sample_period = 0;
  attr.sample_type = 0;
  attr.inherit = 1;
  attr.inherit_thread = 1;
  out.inherit_thread = Accepts(attr, "inherit_thread probe", &out.probe_error);
  out.max_stack = ReadPerfEventMaxStack();
  return out;
}

int ReadPerfEventMaxStack(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return -1;
  char buf[32] = {};
  const ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return -1;
  int value = -1;
  auto [end, ec] = std::from_chars(buf, buf + n, value);
  if (ec != std::errc() || value < 0 || (end != buf + n && *end != '\n')) return -1;
  return value;
}

perf_event_attr MakeTracepointAttr(const TracepointEventOptions& opts) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  const bool clock = opts.software_clock != TracepointEventOptions::kSoftwareClockNone;
  attr.type =
      opts.dummy || clock ? static_cast<uint32_t>(PERF_TYPE_SOFTWARE) : static_cast<uint32_t>(PERF_TYPE_TRACEPOINT);
  attr.config = opts.dummy ? static_cast<uint64_t>(PERF_COUNT_SW_DUMMY)
                : clock    ? static_cast<uint64_t>(opts.software_clock)
                           : opts.tracepoint_id;
  attr.disabled = 1;
  attr.read_format = ReadFormat(opts.format_lost);
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  attr.inherit = opts.inherit;
  attr.inherit_thread = opts.inherit && opts.inherit_thread;
  if (clock && opts.bpf_overflow && !opts.sampled) {
    attr.sample_period = ClockSamplePeriodNs(opts.frequency_hz, opts.period_ns);
    attr.exclude_idle = opts.exclude_idle;
  }
  if (opts.sampled) {
    attr.sample_period = 1;
    attr.sample_type = opts.cgroup ? kSampleTypeCgroup : kSampleType;
    if (clock) {
      attr.sample_type |= PERF_SAMPLE_PERIOD;
      attr.exclude_idle = opts.exclude_idle;
      // A frequency as the fixed period the kernel would make of it (perf_swevent_init_hrtimer:
      // NSEC_PER_SEC / freq): attr.freq would be refused (EINVAL) above
      // kernel.perf_event_max_sample_rate, which the kernel lowers by itself under load, also
      // at a reopen after CPU hotplug.
      attr.sample_period = ClockSamplePeriodNs(opts.frequency_hz, opts.period_ns);
    }
    if (opts.callchain_kernel || opts.callchain_user) {
      attr.sample_type |= PERF_SAMPLE_CALLCHAIN;
      attr.exclude_callchain_kernel = !opts.callchain_kernel;
      attr.exclude_callchain_user = !opts.callchain_user;
      attr.sample_max_stack = opts.max_stack;
    }
    if (opts.stack_user_bytes > 0) {
      attr.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
      attr.sample_regs_user = kSampleRegsUser;
      attr.sample_stack_user = opts.stack_user_bytes;
    }
    attr.sample_id_all = 1;
    if (opts.wakeup_watermark_bytes > 0) {
      attr.watermark = 1;
      attr.wakeup_watermark = opts.wakeup_watermark_bytes;
    } else {
      attr.wakeup_events = 1;
    }
    if (opts.track_tasks) {
      attr.comm = 1;
      attr.task = 1;
    }
    if (opts.track_mmap) {
      attr.mmap = 1;
      attr.mmap2 = 1;
    }
  }
  return attr;
}

perf_event_attr MakeRingOwnerAttr(bool track_tasks, uint32_t wakeup_watermark_bytes, bool format_lost) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_DUMMY;
  attr.read_format = ReadFormat(format_lost);
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  attr.sample_type = kSampleType;
  attr.sample_id_all = 1;
  if (wakeup_watermark_bytes > 0) {
    attr.watermark = 1;
    attr.wakeup_watermark = wakeup_watermark_bytes;
  } else {
    attr.wakeup_events = 1;
  }
  attr.comm = track_tasks;
  attr.task = track_tasks;
  return attr;
}

std::string DescribePerfPrivileges() {
  std::string paranoid = "?";
  auto p = ReadFileToString("/proc/sys/kernel/perf_event_paranoid");
  if (p.ok()) paranoid = Trim(*p);
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  bool perfmon = false, sys_admin = false;
  if (::syscall(SYS_capget, &hdr, data) == 0) {
    auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1U; };
    perfmon = has(38 /* CAP_PERFMON */);
    sys_admin = has(CAP_SYS_ADMIN);
  }
  return "kernel.perf_event_paranoid=" + paranoid + ", CAP_PERFMON " + (perfmon ? "held" : "missing") +
         ", CAP_SYS_ADMIN " + (sys_admin ? "held" : "missing") +
         "; tracepoint events on all tasks need CAP_PERFMON (or CAP_SYS_ADMIN), or "
         "perf_event_paranoid <= -1 — run as root or grant AmbientCapabilities=CAP_PERFMON";
}

StatusOr<ScopedFd> OpenPerfEvent(const perf_event_attr& attr, int cpu, int pid) {
  long fd = PerfEventOpen(attr, pid, cpu);
  if (fd < 0) {
    const int err = static_cast<int>(-fd);
    std::string what = "perf_event_open(tracepoint id " + std::to_string(attr.config) + ", cpu " + std::to_string(cpu) +
                       (pid > 0 ? ", pid " + std::to_string(pid) : std::string()) + ")";
    if (err == ESRCH) return NotFound(what + ": no process " + std::to_string(pid));
    if (err == EACCES || err == EPERM)
      return PermissionDenied(what + ": " + std::strerror(err) + "; " + DescribePerfPrivileges());
    if (err == ENOENT) return NotFound(what + ": no such tracepoint id in this kernel");
    if (err == EMFILE) return Unavailable(what + ": too many open files; raise LimitNOFILE / ulimit -n");
    if (err == EINVAL && (attr.read_format & PERF_FORMAT_LOST)) {
      return InvalidArgument(what + ": " + std::strerror(err) +
                             "; read_format has PERF_FORMAT_LOST, which needs Linux 6.0 (DetectPerfFeatures decides "
                             "whether to set it)");
    }
    if (err == EINVAL && (attr.sample_type & PERF_SAMPLE_CGROUP)) {
      return InvalidArgument(what + ": " + std::strerror(err) +
                             "; sample_type has PERF_SAMPLE_CGROUP, which needs "
                             "Linux 5.7 and CONFIG_CGROUP_PERF");
    }
    return ErrnoStatus(err, what);
  }
  return ScopedFd(static_cast<int>(fd));
}

Status SetFilter(int fd, const std::string& filter) {
  if (::ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter.c_str()) != 0) {
    return ErrnoStatus(errno, "PERF_EVENT_IOC_SET_FILTER \"" + filter + "\"");
  }
  return Status::Ok();
}

Status SetOutput(int fd, int target_fd) {
  if (::ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, target_fd) != 0) return ErrnoStatus(errno, "PERF_EVENT_IOC_SET_OUTPUT");
  return Status::Ok();
}

Status AttachBpfProgram(int fd, int prog_fd) {
  if (::ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog_fd) != 0) return ErrnoStatus(errno, "PERF_EVENT_IOC_SET_BPF");
  return Status::Ok();
}

StatusOr<uint64_t> ReadEventId(int fd) {
  uint64_t id = 0;
  if (::ioctl(fd, PERF_EVENT_IOC_ID, &id) != 0) return ErrnoStatus(errno, "PERF_EVENT_IOC_ID");
  return id;
}

Status EnableEvent(int fd) {
  if (::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) return ErrnoStatus(errno, "PERF_EVENT_IOC_ENABLE");
  return Status::Ok();
}

Status DisableEvent(int fd) {
  if (::ioctl(fd, PERF_EVENT_IOC_DISABLE, 0) != 0) return ErrnoStatus(errno, "PERF_EVENT_IOC_DISABLE");
  return Status::Ok();
}

StatusOr<EventCount> ReadEventCount(int fd) {
  uint64_t buf[3] = {0, 0, 0};  // value, time_enabled, lost (perf_event_open(2) "Reading results")
  ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n < 0) return ErrnoStatus(errno, "read(perf event)");
  // 16 bytes: opened without PERF_FORMAT_LOST (a kernel before 6.0).
  if (n != 24 && n != 16) {
    return Internal("read(perf event) returned " + std::to_string(n) + " bytes, expected 24 (or 16 without lost)");
  }
  return EventCount{buf[0], buf[2], buf[1], /*lost_known=*/n == 24};
}

StatusOr<std::vector<int>> PossibleCpus() {
  TPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString("/sys/devices/system/cpu/possible"));
  return ParseCpuList(text);
}

StatusOr<uint64_t> ReadEnabledTime(int fd) {
  TPE_ASSIGN_OR_RETURN(EventCount c, ReadEventCount(fd));
  return c.enabled_ns;
}

StatusOr<std::vector<int>> ParseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::string t = Trim(text);
  size_t pos = 0;
  while (pos < t.size()) {
    size_t comma = t.find(',', pos);
    std::string part = t.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? t.size() : comma + 1;
    int a = 0, b = 0;
    char extra = 0;
    if (std::sscanf(part.c_str(), "%d-%d%c", &a, &b, &extra) == 2 && a <= b && a >= 0) {
      for (int c = a; c <= b; ++c) cpus.push_back(c);
    } else if (std::sscanf(part.c_str(), "%d%c", &a, &extra) == 1 && a >= 0) {
      cpus.push_back(a);
    } else {
      return InvalidArgument("CPU list \"" + t + "\" has a malformed part \"" + part + "\"");
    }
  }
  if (cpus.empty()) return InvalidArgument("CPU list \"" + t + "\" is empty");
  return cpus;
}

StatusOr<std::vector<int>> OnlineCpus() {
  TPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString("/sys/devices/system/cpu/online"));
  return ParseCpuList(text);
}

}  // namespace tpe
