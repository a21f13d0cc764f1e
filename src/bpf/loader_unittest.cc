// The loader's kernel facts, names, errno messages and load options, with each old kernel's
// bpf() answer injected through the fault seam (no call reaches the kernel: no privilege needed).
#include "bpf/loader.h"

#include <gtest/gtest.h>

#include <cerrno>

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

TEST(BpfFeaturesTest, EachKernelOfTheFleet) {
  struct Row {
    const char* release;
    const char* version;
    const char* realtime;
    bool str, misses, alloc_safe, memlock, xchg;
  } rows[] = {
      {"4.18.0-513.el8.x86_64", "#1 SMP", "", false, false, false, true, false},                // RHEL 8
      {"5.4.0-170-generic", "#188-Ubuntu SMP", "", false, false, false, true, false},           // Ubuntu 20.04
      {"5.10.0-28-amd64", "#1 SMP Debian", "", true, false, false, true, false},                // Debian 11
      {"5.15.0-91-generic", "#101-Ubuntu SMP", "", true, false, false, false, true},            // Ubuntu 22.04
      {"6.1.0-18-amd64", "#1 SMP PREEMPT_DYNAMIC Debian", "", true, false, true, false, true},  // Debian 12
      {"6.1.0-18-rt-amd64", "#1 SMP PREEMPT_RT Debian", "1", true, false, false, false, true},  // Debian 12 RT
      {"6.6.0", "#1 SMP", "1", true, false, false, false, true},  // RT by /sys/kernel/realtime
      {"6.7.0", "#1 SMP", "", true, true, true, false, true},
      {"6.12.9-amd64", "#1 SMP PREEMPT_DYNAMIC", "0", true, true, true, false, true},
  };
  for (const auto& r : rows) {
    BpfFeatures f = BpfFeaturesFromUname(r.release, r.version, r.realtime);
    EXPECT_EQ(f.probe_read_kernel_str, r.str) << r.release;
    EXPECT_EQ(f.tracepoint_misses, r.misses) << r.release;
    EXPECT_EQ(f.runtime_alloc_safe, r.alloc_safe) << r.release;
    EXPECT_EQ(f.memlock_charged, r.memlock) << r.release;
    EXPECT_EQ(f.atomic_xchg, r.xchg) << r.release;
  }
}

TEST(BpfFeaturesTest, VerifierRefusingXchgMeansNoInPlaceStarts) {
  // Linux 5.10's verifier: "BPF_ATOMIC uses invalid atomic opcode e1", EINVAL.
  Fault f([](const BpfCall& c) {
    if (c.insns == nullptr) return EPERM;
    for (const bpf_insn& i : *c.insns) {
      if (BPF_CLASS(i.code) == BPF_STX && BPF_MODE(i.code) == BPF_ATOMIC && i.imm == BPF_XCHG) return EINVAL;
    }
    return EPERM;
  });
  EXPECT_FALSE(ProbeBpfFeatures().atomic_xchg);
}

TEST(BpfFeaturesTest, VerifierRefusingTheHelperMeansNoProbeReadKernelStr) {
  // Linux 5.4's verifier: "invalid func unknown#115", EINVAL.
  Fault f([](const BpfCall& c) { return c.CallsHelper(BPF_FUNC_probe_read_kernel_str) ? EINVAL : EPERM; });
  EXPECT_FALSE(ProbeBpfFeatures().probe_read_kernel_str);
}

TEST(BpfFeaturesTest, AnUndecidedHelperProbeAssumesTheVersion) {
  Fault f([](const BpfCall&) { return EPERM; });  // no CAP_BPF: the version decides (this kernel's)
  BpfFeatures probed = ProbeBpfFeatures();
  EXPECT_EQ(probed.probe_read_kernel_str, BpfFeaturesFromUname(probed.release, "", "").probe_read_kernel_str);
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

}  // namespace
}  // namespace tpe::bpf
