// The loader's kernel facts, names, errno messages and load options, with each old kernel's
// bpf() answer injected through the fault seam (no call reaches the kernel: no privilege needed).
#include "bpf/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "bpf/assembler.h"

namespace tpe::bpf {
namespace {

class Fault {
 public:
  explicit Fault(BpfFault f) { SetBpfFaultForTesting(std::move(f)); }
  ~Fault() {
    SetBpfFaultForTesting(nullptr);
    SetLoadOptions(LoadOptions{});
  }
};

// A kernel of the fleet as its bpf() syscall answers the probes, from the kernel sources (not from
// the loader's version thresholds): the verifier refuses an unknown helper and an unknown atomic
// op with EINVAL (5.10: "BPF_STX uses reserved fields"); BPF_MAP_LOOKUP_AND_DELETE_ELEM exists
// from 4.20 but answers ENOTSUPP (524) for hash maps until 5.14 (kernel/bpf/syscall.c
// map_lookup_and_delete_elem); BPF_MAP_LOOKUP_AND_DELETE_BATCH is an unknown command (EINVAL)
// before 5.6; before 5.11 a map created under RLIMIT_MEMLOCK 0 is refused with EPERM
// (bpf_map_charge_memlock). Everything else succeeds.
struct FleetKernel {
  const char* release;
  const char* version;
  const char* realtime;
  bool helper_115, xchg, hash_lookup_and_delete, batch, memlock_charged;
  int operator()(const BpfCall& c) const {
    if (c.cmd == BPF_PROG_LOAD) {
      if (!helper_115 && (c.CallsHelper(BPF_FUNC_probe_read_kernel_str) || c.CallsHelper(BPF_FUNC_probe_read_kernel)))
        return EINVAL;
      for (const bpf_insn& i : *c.insns) {
        if (!xchg && BPF_CLASS(i.code) == BPF_STX && BPF_MODE(i.code) == BPF_ATOMIC && i.imm == BPF_XCHG) return EINVAL;
      }
    }
    if (c.cmd == BPF_MAP_LOOKUP_AND_DELETE_ELEM && !hash_lookup_and_delete) return 524;
    if (c.cmd == BPF_MAP_LOOKUP_AND_DELETE_BATCH && !batch) return EINVAL;
    if (c.cmd == BPF_MAP_CREATE && c.name == "tpe_probe_mlock" && memlock_charged) return EPERM;
    return kInjectSuccess;
  }
};

// Each fleet kernel's features come from what its kernel answers, and the loader options follow
// them. A wrong probe (an errno read the wrong way, a probe that does not do what the engine will
// do) fails here whatever the version thresholds say.
TEST(BpfFeaturesTest, EachKernelOfTheFleetByItsAnswers) {
  const FleetKernel fleet[] = {
      {"4.18.0-513.el8.x86_64", "#1 SMP", "", false, false, false, false, true},            // RHEL 8 (as upstream 4.18)
      {"5.4.0-170-generic", "#188-Ubuntu SMP", "", false, false, false, false, true},       // Ubuntu 20.04
      {"5.10.0-32-amd64", "#1 SMP Debian 5.10.223-1", "", true, false, false, true, true},  // Debian 11
      {"5.10.0-32-rt-amd64", "#1 SMP PREEMPT_RT Debian 5.10.223-1", "1", true, false, false, true, true},
      {"5.15.0-91-generic", "#101-Ubuntu SMP", "", true, true, true, true, false},             // Ubuntu 22.04
      {"6.1.0-18-amd64", "#1 SMP PREEMPT_DYNAMIC Debian", "", true, true, true, true, false},  // Debian 12
      {"6.1.0-18-rt-amd64", "#1 SMP PREEMPT_RT Debian", "1", true, true, true, true, false},
      {"6.12.9-amd64", "#1 SMP PREEMPT_DYNAMIC", "0", true, true, true, true, false},
  };
  for (const FleetKernel& k : fleet) {
    Fault f(k);
    BpfFeatures got = DetectBpfFeatures(k.release, k.version, k.realtime);
    EXPECT_EQ(got.probe_read_kernel_str, k.helper_115) << k.release;
    EXPECT_EQ(got.atomic_xchg, k.xchg) << k.release;
    EXPECT_EQ(got.map_lookup_and_delete, k.hash_lookup_and_delete) << k.release;
    EXPECT_EQ(got.map_batch_ops, k.batch) << k.release;
    EXPECT_EQ(got.memlock_charged, k.memlock_charged) << k.release;
    EXPECT_EQ(got.preempt_rt, std::string(k.realtime) == "1") << k.release;
  }
  // A backport in either direction is found by the probe, not assumed from the version: a 5.10
  // with BPF_XCHG backported, a 6.1 whose lookup_and_delete is refused.
  FleetKernel backported = fleet[2];
  backported.xchg = true;
  {
    Fault f(backported);
    EXPECT_TRUE(DetectBpfFeatures(backported.release, backported.version, "").atomic_xchg);
  }
  FleetKernel refused = fleet[5];
  refused.hash_lookup_and_delete = false;
  {
    Fault f(refused);
    EXPECT_FALSE(DetectBpfFeatures(refused.release, refused.version, "").map_lookup_and_delete);
  }
}

// What no probe can tell without harm comes from the version, each from the kernel commit that
// changed it: run-time map allocation in tracing programs WARNs and taints 5.7-6.0 (a probe load
// would taint the host; 6.1 "bpf: Introduce any context BPF specific memory allocator"), and is
// refused or unsafe on PREEMPT_RT; tracepoint programs' misses are counted from 6.7 (commit
// "bpf: Add missed stats for tracepoint programs"; counting one would need a recursion).
TEST(BpfFeaturesTest, WhatNoProbeCanTellComesFromTheVersion) {
  struct Row {
    const char* release;
    const char* version;
    const char* realtime;
    bool alloc_safe, misses;
  } rows[] = {
      {"5.10.0-32-amd64", "#1 SMP Debian", "", false, false},
      {"6.0.19", "#1 SMP", "", false, false},
      {"6.1.0-18-amd64", "#1 SMP PREEMPT_DYNAMIC Debian", "", true, false},
      {"6.1.0-18-rt-amd64", "#1 SMP PREEMPT_RT Debian", "1", false, false},
      {"6.6.0", "#1 SMP", "1", false, false},  // RT by /sys/kernel/realtime
      {"6.7.0", "#1 SMP", "", true, true},
      {"6.12.9-amd64", "#1 SMP PREEMPT_DYNAMIC", "0", true, true},
  };
  for (const auto& r : rows) {
    BpfFeatures f = BpfFeaturesFromUname(r.release, r.version, r.realtime);
    EXPECT_EQ(f.runtime_alloc_safe, r.alloc_safe) << r.release;
    EXPECT_EQ(f.tracepoint_misses, r.misses) << r.release;
  }
}

TEST(BpfFeaturesTest, VerifierRefusingXchgMeansNoXchg) {
  // Linux 5.10's verifier: "BPF_STX uses reserved fields", EINVAL.
  Fault f([](const BpfCall& c) {
    if (c.insns == nullptr) return EPERM;
    for (const bpf_insn& i : *c.insns) {
      if (BPF_CLASS(i.code) == BPF_STX && BPF_MODE(i.code) == BPF_ATOMIC && i.imm == BPF_XCHG) return EINVAL;
    }
    return EPERM;
  });
  EXPECT_FALSE(DetectBpfFeatures().atomic_xchg);
}

TEST(BpfFeaturesTest, VerifierRefusingTheHelperMeansNoProbeReadKernelStr) {
  // Linux 5.4's verifier: "invalid func unknown#115", EINVAL.
  Fault f([](const BpfCall& c) { return c.CallsHelper(BPF_FUNC_probe_read_kernel_str) ? EINVAL : EPERM; });
  EXPECT_FALSE(DetectBpfFeatures().probe_read_kernel_str);
}

TEST(BpfFeaturesTest, AnUndecidedHelperProbeAssumesTheVersion) {
  Fault f([](const BpfCall&) { return EPERM; });  // no CAP_BPF: the version decides (this kernel's)
  BpfFeatures probed = DetectBpfFeatures();
  EXPECT_EQ(probed.probe_read_kernel_str, BpfFeaturesFromUname(probed.release, "", "").probe_read_kernel_str);
}

// The fields of bpf_prog_info a kernel fills in: before 5.1 there is no run_time_ns (a 0 there is
// not a time: that kernel never times a run), before 5.12 no recursion_misses.
TEST(ProgramStatsTest, FieldsTheKernelDidNotFillAreNotCounts) {
  bpf_prog_info info{};
  info.run_time_ns = 7;
  info.run_cnt = 3;
  info.recursion_misses = 2;
  ProgramStats all = ProgramStatsFromInfo(info, sizeof(info));
  EXPECT_TRUE(all.has_run_time);
  EXPECT_TRUE(all.has_recursion_misses);
  EXPECT_EQ(all.run_time_ns, 7u);
  EXPECT_EQ(all.recursion_misses, 2u);
  ProgramStats v50 = ProgramStatsFromInfo(info, offsetof(bpf_prog_info, run_time_ns));  // 5.0's struct ends there
  EXPECT_FALSE(v50.has_run_time);
  EXPECT_FALSE(v50.has_recursion_misses);
  EXPECT_EQ(v50.run_time_ns, 0u);
  ProgramStats v510 = ProgramStatsFromInfo(info, offsetof(bpf_prog_info, recursion_misses));
  EXPECT_TRUE(v510.has_run_time);
  EXPECT_FALSE(v510.has_recursion_misses);
}

TEST(BpfObjectNameTest, OnlyCharactersTheKernelAccepts) {
  EXPECT_EQ(BpfObjectName("tpe_ns:getppid_total"), "tpe_ns_getppid_");  // ':' refused by bpf_obj_name_cpy
  EXPECT_EQ(BpfObjectName("a.b-c d"), "a.b_c_d");
  EXPECT_EQ(BpfObjectName("tpe_zero"), "tpe_zero");
}

TEST(BpfErrnoStatusTest, EveryRow) {
  Status memlock = BpfErrnoStatus(EPERM, "creating BPF map m", /*privileged=*/true, /*memlock_charged=*/true);
  EXPECT_EQ(memlock.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(memlock.message().find("this is RLIMIT_MEMLOCK"), std::string::npos) << memlock.message();
  EXPECT_EQ(memlock.message().find("needs CAP_BPF"), std::string::npos) << memlock.message();
  Status caps = BpfErrnoStatus(EPERM, "creating BPF map m", /*privileged=*/false, /*memlock_charged=*/true);
  EXPECT_NE(caps.message().find("needs CAP_BPF and CAP_PERFMON"), std::string::npos) << caps.message();
  Status late = BpfErrnoStatus(EPERM, "creating BPF map m", /*privileged=*/true, /*memlock_charged=*/false);
  EXPECT_NE(late.message().find("needs CAP_BPF"), std::string::npos) << late.message();  // 5.11+: not memlock
  Status nomem = BpfErrnoStatus(ENOMEM, "creating BPF map m", true, false);
  EXPECT_EQ(nomem.code(), StatusCode::kUnavailable);
  EXPECT_NE(nomem.message().find("memory cgroup"), std::string::npos) << nomem.message();
  Status big = BpfErrnoStatus(E2BIG, "loading BPF program p", true, false);
  EXPECT_EQ(big.code(), StatusCode::kUnavailable);
  EXPECT_NE(big.message().find("larger than this kernel allows"), std::string::npos) << big.message();
}

TEST(LoadOptionsTest, PreallocatedMapsClearNoPrealloc) {
  std::vector<uint32_t> flags;
  std::vector<std::string> names;
  Fault f([&](const BpfCall& c) {
    flags.push_back(c.map_flags);
    names.push_back(c.name);
    return ENOMEM;  // the kernel is not asked
  });
  auto m = CreateMap(BPF_MAP_TYPE_PERCPU_HASH, "tpe_ns:x_total", 8, 8, 16, BPF_F_NO_PREALLOC);
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable);
  SetLoadOptions(LoadOptions{.preallocate_maps = true});
  m = CreateMap(BPF_MAP_TYPE_PERCPU_HASH, "tpe_ns:x_total", 8, 8, 16, BPF_F_NO_PREALLOC);
  ASSERT_EQ(flags.size(), 2u);
  EXPECT_EQ(flags[0], static_cast<uint32_t>(BPF_F_NO_PREALLOC));
  EXPECT_EQ(flags[1], 0u);
  EXPECT_EQ(names[0], "tpe_ns_x_total");
}

// A program calling `str_helper` and then `helper` on 8 stack bytes.
StatusOr<std::vector<bpf_insn>> TwoReads(int str_helper, int helper) {
  Assembler a;
  a.MovReg(R1, R10);
  a.Alu(BPF_ADD, R1, -8);
  a.Mov(R2, 8);
  a.Mov(R3, 0);
  a.Call(str_helper);
  a.Call(helper);
  a.Mov(R0, 0);
  a.Exit();
  return a.Finish();
}

TEST(LoadOptionsTest, ProbeReadFallbackRewritesTheHelpers) {
  auto insns = TwoReads(BPF_FUNC_probe_read_kernel_str, BPF_FUNC_probe_read_kernel);
  ASSERT_TRUE(insns.ok());
  bool kernel_str = false, str = false, plain = false;
  Fault f([&](const BpfCall& c) {
    kernel_str = c.CallsHelper(BPF_FUNC_probe_read_kernel_str) || c.CallsHelper(BPF_FUNC_probe_read_kernel);
    str = c.CallsHelper(BPF_FUNC_probe_read_str);
    plain = c.CallsHelper(BPF_FUNC_probe_read);
    return E2BIG;
  });
  SetLoadOptions(LoadOptions{.probe_read_fallback = true});
  auto p = LoadTracepointProgram("tpe_x", *insns);
  EXPECT_EQ(p.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(kernel_str);
  EXPECT_TRUE(str);
  EXPECT_TRUE(plain);
}

// Before 5.5 there are no probe_read_user(_str) either: a probe program's user reads become
// probe_read(_str) too (on x86-64 those read user addresses), and it is loaded as
// BPF_PROG_TYPE_KPROBE through the same seam.
TEST(LoadOptionsTest, ProbeReadFallbackRewritesUserReadsOfKprobePrograms) {
  auto insns = TwoReads(BPF_FUNC_probe_read_user_str, BPF_FUNC_probe_read_user);
  ASSERT_TRUE(insns.ok());
  bool user = true, str = false, plain = false;
  bpf_prog_type type = BPF_PROG_TYPE_UNSPEC;
  Fault f([&](const BpfCall& c) {
    user = c.CallsHelper(BPF_FUNC_probe_read_user_str) || c.CallsHelper(BPF_FUNC_probe_read_user);
    str = c.CallsHelper(BPF_FUNC_probe_read_str);
    plain = c.CallsHelper(BPF_FUNC_probe_read);
    type = c.prog_type;
    return E2BIG;
  });
  SetLoadOptions(LoadOptions{.probe_read_fallback = true});
  auto p = LoadTracepointProgram("tpe_x", *insns, BPF_PROG_TYPE_KPROBE);
  EXPECT_EQ(p.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(user);
  EXPECT_TRUE(str);
  EXPECT_TRUE(plain);
  EXPECT_EQ(type, BPF_PROG_TYPE_KPROBE);
}

// WaitForProgramRuns by the CPUs online (a grace period needs the kernel's synchronize_rcu(),
// which membarrier(MEMBARRIER_CMD_GLOBAL) skips with one CPU online: loader.h).
class GraceCalls {
 public:
  GraceCalls(std::vector<int> online, int membarrier_errno = 0, int map_in_map_errno = 0) : online_(std::move(online)) {
    calls_.online_cpus = [this] {
      const int n = online_.at(std::min(asked_, online_.size() - 1));
      ++asked_;
      return n;
    };
    calls_.membarrier = [this, membarrier_errno] {
      log_ += "membarrier ";
      return membarrier_errno;
    };
    calls_.map_in_map = [this, map_in_map_errno] {
      log_ += "map-in-map ";
      return map_in_map_errno;
    };
    SetGraceWaitCallsForTesting(&calls_);
  }
  ~GraceCalls() { SetGraceWaitCallsForTesting(nullptr); }
  const std::string& log() const { return log_; }

 private:
  std::vector<int> online_;  // what each question gets (the last one after)
  size_t asked_ = 0;
  std::string log_;
  GraceWaitCalls calls_;
};

TEST(WaitForProgramRunsTest, OneCpuOnlineWaitsByTheMapInMapUpdate) {
  GraceCalls one({1});
  EXPECT_TRUE(WaitForProgramRuns().ok());
  EXPECT_EQ(one.log(), "map-in-map ");
}

TEST(WaitForProgramRunsTest, TwoCpusOnlineWaitByMembarrier) {
  GraceCalls two({2});
  EXPECT_TRUE(WaitForProgramRuns().ok());
  EXPECT_EQ(two.log(), "membarrier ");
}

TEST(WaitForProgramRunsTest, ACpuGoneOfflineDuringMembarrierWaitsAgainByTheMapInMap) {
  GraceCalls going({2, 1});
  EXPECT_TRUE(WaitForProgramRuns().ok());
  EXPECT_EQ(going.log(), "membarrier map-in-map ");
}

TEST(WaitForProgramRunsTest, UnknownCpusWaitByTheMapInMapUpdate) {
  GraceCalls unknown({-1});
  EXPECT_TRUE(WaitForProgramRuns().ok());
  EXPECT_EQ(unknown.log(), "map-in-map ");
}

TEST(WaitForProgramRunsTest, MembarrierRefusedFallsBackAndNeitherIsUnavailable) {
  {
    GraceCalls nohz_full({4}, EINVAL);
    EXPECT_TRUE(WaitForProgramRuns().ok());
    EXPECT_EQ(nohz_full.log(), "membarrier map-in-map ");
  }
  GraceCalls neither({1}, 0, EPERM);
  Status st = WaitForProgramRuns();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("waits for nothing with 1 CPU online"), std::string::npos) << st.message();
  EXPECT_EQ(neither.log(), "map-in-map ");
  GraceCalls map_only({4});
  EXPECT_TRUE(WaitForProgramRuns(GraceWait::kMapInMap).ok());
  EXPECT_EQ(map_only.log(), "map-in-map ");
}

}  // namespace
}  // namespace tpe::bpf
