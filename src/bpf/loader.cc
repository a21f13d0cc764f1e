#include "bpf/loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/membarrier.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "bpf/assembler.h"
#include "bpf/map_syscall_priority.h"

namespace tpe::bpf {
namespace {

const char* kCapsHint =
    "the bpf engine needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); grant them (systemd "
    "AmbientCapabilities, Kubernetes securityContext.capabilities.add) or use \"engine\": \"perf\"";

std::mutex mu;                   // guards the two below
LoadOptions load_options;        // SetLoadOptions
BpfFault* fault_hook = nullptr;  // owned; SetBpfFaultForTesting

// CAP_BPF (39) or CAP_SYS_ADMIN in the effective set.
bool Privileged() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1U; };
  return has(39 /* CAP_BPF */) || has(CAP_SYS_ADMIN);
}

Status BpfError(int err, const std::string& what) {
  return BpfErrnoStatus(err, what, (err == EPERM || err == EACCES) && Privileged(), GetLoadOptions().memlock_charged);
}

// The injected errno for `call`, kInjectSuccess, or 0 (make the call).
int Injected(const BpfCall& call) {
  std::lock_guard<std::mutex> lock(mu);
  return fault_hook != nullptr ? (*fault_hook)(call) : 0;
}

// An fd standing for an object an injected success created (/dev/null: closing it is all the
// probes do).
int FakeFd() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

// bpf_prog_load() through the fault seam: the fd or -errno.
// BPF_PROG_TYPE_KPROBE programs carry the running kernel's version: kernels before 5.0 refused
// any other kern_version for them (kernel/bpf/syscall.c bpf_prog_load); later ones ignore it.
uint32_t KernelVersionCode() {
  utsname u{};
  if (::uname(&u) != 0) return 0;
  unsigned major = 0, minor = 0, patch = 0;
  std::sscanf(u.release, "%u.%u.%u", &major, &minor, &patch);
  return major << 16 | minor << 8 | std::min(patch, 255u);
}

int ProgLoad(const std::string& name, const std::vector<bpf_insn>& insns, bpf_prog_load_opts* opts,
             bpf_prog_type type = BPF_PROG_TYPE_TRACEPOINT) {
  BpfCall call;
  call.cmd = BPF_PROG_LOAD;
  call.name = name;
  call.insns = &insns;
  call.prog_type = type;
  if (int err = Injected(call); err == kInjectSuccess) {
    return FakeFd();
  } else if (err != 0) {
    return -err;
  }
  LIBBPF_OPTS(bpf_prog_load_opts, plain);
  if (opts == nullptr) opts = &plain;
  if (type == BPF_PROG_TYPE_KPROBE) opts->kern_version = KernelVersionCode();
  return bpf_prog_load(type, name.c_str(), "GPL", insns.data(), insns.size(), opts);
}

// The first online CPU (from /sys/devices/system/cpu/online, "0-1,3"), or 0.
int FirstOnlineCpu() {
  std::ifstream f("/sys/devices/system/cpu/online");
  int cpu = 0;
  if (f >> cpu) return cpu;
  return 0;
}

}  // namespace

void SetLoadOptions(const LoadOptions& options) {
  std::lock_guard<std::mutex> lock(mu);
  load_options = options;
}

LoadOptions GetLoadOptions() {
  std::lock_guard<std::mutex> lock(mu);
  return load_options;
}

void SetBpfFaultForTesting(BpfFault fault) {
  std::lock_guard<std::mutex> lock(mu);
  delete fault_hook;
  fault_hook = fault ? new BpfFault(std::move(fault)) : nullptr;
}

bool BpfCall::CallsHelper(int helper) const {
  if (insns == nullptr) return false;
  for (const auto& i : *insns) {
    if (i.code == (BPF_JMP | BPF_CALL) && i.src_reg == 0 && i.imm == helper) return true;
  }
  return false;
}

std::string BpfObjectName(const std::string& name) {
  std::string out = name.substr(0, BPF_OBJ_NAME_LEN - 1);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
    if (!ok) c = '_';
  }
  return out;
}

Status BpfErrnoStatus(int err, const std::string& what, bool privileged, bool memlock_charged) {
  const std::string head = what + ": " + std::strerror(err);
  if (err == EPERM || err == EACCES) {
    if (privileged && memlock_charged) {
      rlimit rl{};
      std::string limit = "?";
      if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        limit = rl.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(rl.rlim_cur / 1024) + " KiB";
      }
      return PermissionDenied(head + "; CAP_BPF/CAP_SYS_ADMIN are held, so this is RLIMIT_MEMLOCK (" + limit +
                              "): before Linux 5.11 BPF maps and programs are charged to it; raise it "
                              "(systemd LimitMEMLOCK=infinity, ulimit -l unlimited) or lower "
                              "max_series_per_metric");
    }
    return PermissionDenied(head + "; " + kCapsHint);
  }
  if (err == ENOMEM) {
    return Unavailable(head + " (kernel memory: the memory cgroup's limit" +
                       std::string(memlock_charged ? ", or RLIMIT_MEMLOCK before Linux 5.11" : "") +
                       "); lower max_series_per_metric or use \"engine\": \"perf\"");
  }
  if (err == E2BIG) {
    return Unavailable(head +
                       " (larger than this kernel allows: a program over its instruction limit or a "
                       "bpf_attr this kernel does not know); use \"engine\": \"perf\"");
  }
  return Internal(head);
}

BpfFeatures BpfFeaturesFromUname(const std::string& release, const std::string& version, const std::string& realtime) {
  BpfFeatures f;
  f.release = release;
  if (std::sscanf(release.c_str(), "%d.%d", &f.major, &f.minor) != 2) f.major = f.minor = 0;
  auto at_least = [&](int major, int minor) {
    return f.major == 0 || f.major > major || (f.major == major && f.minor >= minor);  // unknown: assume new
  };
  f.preempt_rt = version.find("PREEMPT_RT") != std::string::npos || realtime.starts_with("1");
  // "#1 SMP PREEMPT Debian ..." is a fully preemptible kernel; PREEMPT_DYNAMIC says nothing of the
  // mode it runs in (DetectBpfFeatures reads it).
  const bool full_preempt = (" " + version + " ").find(" PREEMPT ") != std::string::npos;
  f.preemptible_syscalls = f.preempt_rt || full_preempt;
  f.probe_read_kernel_str = at_least(5, 5);
  f.tracepoint_misses = at_least(6, 7);
  f.runtime_alloc_safe = at_least(6, 1) && !f.preempt_rt;
  f.memlock_charged = !at_least(5, 11);
  f.atomic_xchg = at_least(5, 12);
  f.map_batch_ops = at_least(5, 6);
  f.map_lookup_and_delete = at_least(5, 14);
  return f;
}

namespace {
// Loads `insns`: sets *feature to true when the kernel takes them, false when the verifier refuses
// them with EINVAL, and leaves it (the version's guess) when the load cannot decide (EPERM).
void DecideByLoad(const char* name, const StatusOr<std::vector<bpf_insn>>& insns, bool* feature) {
  if (!insns.ok()) return;
  const int fd = ProgLoad(name, *insns, nullptr);
  if (fd >= 0) {
    ::close(fd);
    *feature = true;
  } else if (fd == -EINVAL) {
    *feature = false;
  }
}
}  // namespace

BpfFeatures DetectBpfFeatures() {
  utsname u{};
  ::uname(&u);
  std::string realtime;
  std::ifstream rt("/sys/kernel/realtime");
  std::getline(rt, realtime);
  BpfFeatures f = DetectBpfFeatures(u.release, u.version, realtime);
  // PREEMPT_DYNAMIC: the mode it was booted in or switched to, as debugfs shows it ("none
  // voluntary (full)"), else the command line's preempt=; Debian's and Ubuntu's default is
  // voluntary.
  if (!f.preemptible_syscalls && std::string(u.version).find("PREEMPT_DYNAMIC") != std::string::npos) {
    std::string mode;
    std::ifstream dyn("/sys/kernel/debug/sched/preempt");
    if (std::getline(dyn, mode)) {
      f.preemptible_syscalls = mode.find("(full)") != std::string::npos;
    } else {
      std::string cmdline;
      std::ifstream cl("/proc/cmdline");
      std::getline(cl, cmdline);
      f.preemptible_syscalls = (" " + cmdline + " ").find(" preempt=full ") != std::string::npos;
    }
  }
  if (f.preemptible_syscalls) {
    // Before any map of ours exists and before capabilities are dropped (RLIMIT_RTPRIO).
    const Status st = EnableFifoMapSyscalls();
    f.fifo_map_syscalls = st.ok();
    if (!st.ok()) f.fifo_map_syscalls_note = st.message();
  }
  return f;
}

namespace {

// A map command on a 1-entry hash map (key and value u32/u64) through the fault seam: the
// command's result (0 or -errno), or 1 when it could not be tried (the map was not created).
int ProbeMapCommand(int cmd) {
  auto map = CreateMap(BPF_MAP_TYPE_HASH, "tpe_probe_cmd", 4, 8, 1);
  if (!map.ok()) return 1;
  BpfCall call;
  call.cmd = cmd;
  call.name = "tpe_probe_cmd";
  call.map_type = BPF_MAP_TYPE_HASH;
  if (int err = Injected(call); err == kInjectSuccess) {
    return 0;
  } else if (err != 0) {
    return -err;
  }
  uint32_t key = 0;
  uint64_t value = 0;
  errno = 0;
  int r = 0;
  if (cmd == BPF_MAP_LOOKUP_AND_DELETE_ELEM) {
    r = bpf_map_lookup_and_delete_elem(map->get(), &key, &value);
  } else {
    uint32_t count = 1;
    uint64_t out_batch = 0;
    r = bpf_map_lookup_and_delete_batch(map->get(), nullptr, &out_batch, &key, &value, &count, nullptr);
  }
  return r < 0 ? (errno != 0 ? -errno : r) : 0;
}

// Whether a map command exists for hash maps: an empty map answers ENOENT (or 0) where it does,
// EINVAL (an unknown command) or ENOTSUPP (524: known, not for this map type) where it does not.
// Anything else (EPERM) leaves *feature as it was.
void DecideByMapCommand(int cmd, bool* feature) {
  const int r = ProbeMapCommand(cmd);
  if (r == 0 || r == -ENOENT) {
    *feature = true;
  } else if (r == -EINVAL || r == -524 || r == -EOPNOTSUPP) {
    *feature = false;
  }
}

// Whether creating a map is charged to RLIMIT_MEMLOCK (before Linux 5.11; from 5.11 to the memory
// cgroup, kernel commit 3ac1f01b43b6 "bpf: Eliminate rlimit-based memory accounting for bpf maps"):
// a 1-entry array that can be created is created once more under a soft limit of 0, which is
// refused with EPERM where maps are charged. The limit is restored at once. When the first map
// cannot be created (no privilege), *charged is left as it was.
void DecideMemlockCharged(bool* charged) {
  if (!CreateMap(BPF_MAP_TYPE_ARRAY, "tpe_probe_map", 4, 8, 1).ok()) return;
  rlimit old{};
  if (::getrlimit(RLIMIT_MEMLOCK, &old) != 0) return;
  rlimit zero{0, old.rlim_max};
  if (::setrlimit(RLIMIT_MEMLOCK, &zero) != 0) return;
  auto map = CreateMap(BPF_MAP_TYPE_ARRAY, "tpe_probe_mlock", 4, 8, 1);
  ::setrlimit(RLIMIT_MEMLOCK, &old);
  if (map.ok()) {
    *charged = false;
  } else if (map.status().code() == StatusCode::kPermissionDenied) {
    *charged = true;
  }
}

}  // namespace

BpfFeatures DetectBpfFeatures(const std::string& release, const std::string& version, const std::string& realtime) {
  BpfFeatures f = BpfFeaturesFromUname(release, version, realtime);
  // Each probe does what the engine will do, and the kernel's refusal decides: a backport can
  // make the version wrong in either direction.
  Assembler a;
  a.MovReg(R1, R10);
  a.Alu(BPF_ADD, R1, -8);
  a.Mov(R2, 8);
  a.Mov(R3, 0);
  a.Call(BPF_FUNC_probe_read_kernel_str);
  a.Mov(R0, 0);
  a.Exit();
  DecideByLoad("tpe_probe_str", a.Finish(), &f.probe_read_kernel_str);
  Assembler x;
  x.StoreImm(8, R10, -8, 0);
  x.Mov(R1, 1);
  x.AtomicXchg64(R10, -8, R1);
  x.Mov(R0, 0);
  x.Exit();
  DecideByLoad("tpe_probe_xchg", x.Finish(), &f.atomic_xchg);
  DecideByMapCommand(BPF_MAP_LOOKUP_AND_DELETE_ELEM, &f.map_lookup_and_delete);
  DecideByMapCommand(BPF_MAP_LOOKUP_AND_DELETE_BATCH, &f.map_batch_ops);
  DecideMemlockCharged(&f.memlock_charged);
  if (f.memlock_charged) {
    rlimit inf{RLIM_INFINITY, RLIM_INFINITY};
    if (::setrlimit(RLIMIT_MEMLOCK, &inf) == 0) {
      f.memlock_note = "RLIMIT_MEMLOCK raised to unlimited";
    } else {
      rlimit rl{};
      ::getrlimit(RLIMIT_MEMLOCK, &rl);
      f.memlock_note =
          "RLIMIT_MEMLOCK could not be raised (" + std::string(std::strerror(errno)) + "); it is " +
          (rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_cur / 1024) + " KiB");
    }
  }
  return f;
}

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
  if (GetLoadOptions().preallocate_maps) flags &= ~static_cast<uint32_t>(BPF_F_NO_PREALLOC);
  LIBBPF_OPTS(bpf_map_create_opts, opts);
  opts.map_flags = flags;
  const std::string short_name = BpfObjectName(name);
  BpfCall call;
  call.cmd = BPF_MAP_CREATE;
  call.name = short_name;
  call.map_type = type;
  call.map_flags = flags;
  const int injected = Injected(call);
  int fd = injected == kInjectSuccess ? FakeFd()
           : injected != 0            ? -injected
                           : bpf_map_create(type, short_name.c_str(), key_size, value_size, max_entries, &opts);
  if (fd < 0) {
    return BpfError(-fd, "creating BPF map " + short_name + " (key " + std::to_string(key_size) + " bytes, value " +
                             std::to_string(value_size) + " bytes, " + std::to_string(max_entries) + " entries)");
  }
  return ScopedFd(fd);
}

StatusOr<ScopedFd> LoadTracepointProgram(const std::string& name, const std::vector<bpf_insn>& given,
                                         bpf_prog_type type) {
  const std::string short_name = BpfObjectName(name);
  std::vector<bpf_insn> insns = given;
  if (GetLoadOptions().probe_read_fallback) {
    for (auto& i : insns) {
      if (i.code != (BPF_JMP | BPF_CALL) || i.src_reg != 0) continue;
      if (i.imm == BPF_FUNC_probe_read_kernel) i.imm = BPF_FUNC_probe_read;
      if (i.imm == BPF_FUNC_probe_read_kernel_str) i.imm = BPF_FUNC_probe_read_str;
      if (i.imm == BPF_FUNC_probe_read_user) i.imm = BPF_FUNC_probe_read;
      if (i.imm == BPF_FUNC_probe_read_user_str) i.imm = BPF_FUNC_probe_read_str;
    }
  }
  int fd = ProgLoad(short_name, insns, nullptr, type);
  if (fd >= 0) return ScopedFd(fd);
  const int err = -fd;
  // Load again with the verifier's log: EACCES is both "no privilege" and "the verifier said no".
  std::string log(1 << 20, '\0');
  LIBBPF_OPTS(bpf_prog_load_opts, opts);
  opts.log_buf = log.data();
  opts.log_size = static_cast<uint32_t>(log.size());
  opts.log_level = 1;
  fd = ProgLoad(short_name, insns, &opts, type);
  if (fd >= 0) return ScopedFd(fd);
  log.resize(std::strlen(log.c_str()));
  if (log.empty()) return BpfError(err, "loading BPF program " + short_name);
  if (log.size() > 4096) log = "..." + log.substr(log.size() - 4096);
  return Internal("the kernel's verifier rejected BPF program " + short_name + " (" + std::to_string(insns.size()) +
                  " instructions): " + std::strerror(err) + "; verifier log:\n" + log);
}

namespace {
std::mutex attachments_mu;
std::map<uint64_t, int>& OwnAttachments() {  // tracepoint id -> this process's attached programs
  static auto* m = new std::map<uint64_t, int>;
  return *m;
}

StatusOr<ScopedFd> OpenDisabledTracepointEvent(uint64_t tracepoint_id, const char* why) {
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
      return PermissionDenied("perf_event_open(tracepoint " + std::to_string(tracepoint_id) + ") " + why + ": " +
                              std::strerror(err) + "; " + kCapsHint);
    }
    return ErrnoStatus(err, "perf_event_open(tracepoint " + std::to_string(tracepoint_id) + ") " + why);
  }
  return ScopedFd(fd);
}
}  // namespace

TracepointAttachment::TracepointAttachment(TracepointAttachment&& other) noexcept
    : event_(std::move(other.event_)), tracepoint_id_(other.tracepoint_id_) {}

TracepointAttachment& TracepointAttachment::operator=(TracepointAttachment&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::move(other.event_);
    tracepoint_id_ = other.tracepoint_id_;
  }
  return *this;
}

TracepointAttachment::~TracepointAttachment() { Reset(); }

void TracepointAttachment::Reset() {
  if (!event_.valid()) return;
  std::lock_guard<std::mutex> lock(attachments_mu);
  event_ = ScopedFd();  // detached before the count drops: never fewer counted than attached
  if (--OwnAttachments()[tracepoint_id_] == 0) OwnAttachments().erase(tracepoint_id_);
}

StatusOr<TracepointAttachment> AttachTracepoint(int prog_fd, uint64_t tracepoint_id) {
  TPE_ASSIGN_OR_RETURN(ScopedFd event, OpenDisabledTracepointEvent(tracepoint_id, "to attach a BPF program"));
  // Counted while the ioctl runs, so that a concurrent ForeignPrograms never takes ours for
  // another tool's.
  std::lock_guard<std::mutex> lock(attachments_mu);
  if (ioctl(event.get(), PERF_EVENT_IOC_SET_BPF, prog_fd) != 0) {
    const int err = errno;
    if (err == E2BIG) {
      return Unavailable("PERF_EVENT_IOC_SET_BPF on tracepoint " + std::to_string(tracepoint_id) +
                         ": it already runs " + std::to_string(kMaxProgramsPerTracepoint) +
                         " BPF programs, the kernel's limit (BPF_TRACE_MAX_PROGS), counting other tools' "
                         "(bpftrace, BCC); detach some or use \"engine\": \"perf\"");
    }
    return BpfError(err, "PERF_EVENT_IOC_SET_BPF on tracepoint " + std::to_string(tracepoint_id));
  }
  ++OwnAttachments()[tracepoint_id];
  TracepointAttachment out;
  out.event_ = std::move(event);
  out.tracepoint_id_ = tracepoint_id;
  return out;
}

StatusOr<int> ForeignPrograms(uint64_t tracepoint_id) {
  TPE_ASSIGN_OR_RETURN(ScopedFd event, OpenDisabledTracepointEvent(tracepoint_id, "to count its BPF programs"));
  perf_event_query_bpf query{};  // ids_len 0: the count only
  std::lock_guard<std::mutex> lock(attachments_mu);
  if (ioctl(event.get(), PERF_EVENT_IOC_QUERY_BPF, &query) != 0) {
    return ErrnoStatus(errno, "PERF_EVENT_IOC_QUERY_BPF on tracepoint " + std::to_string(tracepoint_id));
  }
  auto it = OwnAttachments().find(tracepoint_id);
  const int ours = it == OwnAttachments().end() ? 0 : it->second;
  return std::max(0, static_cast<int>(query.prog_cnt) - ours);
}

ProgramStats ProgramStatsFromInfo(const bpf_prog_info& info, uint32_t info_len) {
  auto has = [&](size_t offset, size_t size) { return info_len >= offset + size; };
  ProgramStats out;
  out.id = info.id;
  out.has_run_time = has(offsetof(bpf_prog_info, run_cnt), sizeof(info.run_cnt));
  out.has_recursion_misses = has(offsetof(bpf_prog_info, recursion_misses), sizeof(info.recursion_misses));
  if (out.has_run_time) {
    out.run_time_ns = info.run_time_ns;
    out.run_cnt = info.run_cnt;
  }
  if (out.has_recursion_misses) out.recursion_misses = info.recursion_misses;
  return out;
}

ProgramStats ReadProgramStats(int prog_fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return ProgramStats{};
  return ProgramStatsFromInfo(info, len);
}

int PossibleCpus() {
  static const int n = [] {
    int c = libbpf_num_possible_cpus();
    return c > 0 ? c : 1;
  }();
  return n;
}

namespace {

const GraceWaitCalls* grace_calls = nullptr;  // SetGraceWaitCallsForTesting; not owned

int OnlineCpusNow() {
  if (grace_calls != nullptr) return grace_calls->online_cpus();
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));  // -1 if unknown
}

int MembarrierGlobal() {
  if (grace_calls != nullptr) return grace_calls->membarrier();
  return syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0 ? 0 : errno;
}

// The update of a 1-entry ARRAY_OF_MAPS (made at the first call, kept for the process's life).
int MapInMapUpdate() {
  if (grace_calls != nullptr) return grace_calls->map_in_map();
  static std::mutex map_mu;
  static int inner = -1, outer = -1;
  std::lock_guard<std::mutex> lock(map_mu);
  if (outer < 0) {
    if (inner < 0) inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "tpe_sync_inner", 4, 8, 1, nullptr);
    if (inner < 0) return errno;
    LIBBPF_OPTS(bpf_map_create_opts, opts, .inner_map_fd = static_cast<__u32>(inner));
    outer = bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, "tpe_sync", 4, 4, 1, &opts);
    if (outer < 0) return errno;
  }
  const uint32_t key = 0;
  FifoMapSyscall fifo;
  return bpf_map_update_elem(outer, &key, &inner, BPF_ANY) == 0 ? 0 : errno;
}

}  // namespace

void SetGraceWaitCallsForTesting(const GraceWaitCalls* calls) { grace_calls = calls; }

Status WaitForProgramRuns(GraceWait how) {
  std::string membarrier = "not tried";
  if (how == GraceWait::kMembarrierFirst) {
    // synchronize_rcu() only if num_online_cpus() > 1 when the kernel looks (loader.h): 2 or more
    // before the call and after it, then it looked at 2 or more (a CPU does not go offline and
    // come back within the call, which returns at once when it does not wait).
    const int before = OnlineCpusNow();
    if (before >= 2) {
      const int err = MembarrierGlobal();
      if (err == 0) {
        const int after = OnlineCpusNow();
        if (after >= 2) return Status::Ok();
        membarrier = "waits for nothing with " + std::to_string(after) + " CPU online";
      } else {
        membarrier = strerror(err);
      }
    } else {
      membarrier = "waits for nothing with " + std::to_string(before) + " CPU online";
    }
  }
  const int err = MapInMapUpdate();
  if (err == 0) return Status::Ok();
  return Unavailable("no way to wait for an RCU grace period: membarrier(MEMBARRIER_CMD_GLOBAL): " + membarrier +
                     "; a map-in-map update: " + strerror(err));
}

}  // namespace tpe::bpf
