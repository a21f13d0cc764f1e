// The in-kernel unwinder's pieces (bpf/unwind_programs.h) as this kernel's verifier sees them:
// one frame — the process's mappings, the file's packed unwind rows, the step to the caller's
// registers — loads as a tracepoint program over maps of real size (the pieces' semantics are
// unwind_programs_unittest's, in the interpreter).
#include <gtest/gtest.h>

#include <cstdio>

#include "bpf/loader.h"
#include "bpf/unwind_programs.h"
#include "kernel/kernel_util.h"

namespace tpe {
namespace {

TEST(UnwindProgramTest, AFramesStepPassesTheVerifier) {
  TPE_REQUIRE_BPF_OR_SKIP();
  // 16 shards: python3.11's 64,575 rows would fit.
  auto rows = bpf::CreateMap(BPF_MAP_TYPE_ARRAY, "tpe_unwind_rows", 4, bpf::kShardBytes, 16);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  auto mappings = bpf::CreateMap(BPF_MAP_TYPE_HASH, "tpe_unwind_maps", 4, bpf::kUnwindMappingsBytes, 64);
  ASSERT_TRUE(mappings.ok()) << mappings.status().ToString();
  bpf::Assembler a;
  bpf::Label unknown = a.NewLabel();
  // The record's u64 after the common fields stand for the tgid, then rip, rsp and rbp (kept at
  // R10 - 64, - 56, - 48).
  for (int16_t i = 0; i < 3; ++i) {
    a.Load(8, bpf::R2, bpf::R1, static_cast<int16_t>(16 + 8 * i));
    a.Store(8, bpf::R10, static_cast<int16_t>(-64 + 8 * i), bpf::R2);
  }
  a.Load(8, bpf::R6, bpf::R1, 8);
  a.Load(8, bpf::R8, bpf::R1, 16);
  a.Store(4, bpf::R10, -24, bpf::R6);
  a.LoadMapFd(bpf::R1, mappings->get());
  a.MovReg(bpf::R2, bpf::R10);
  a.Alu(BPF_ADD, bpf::R2, -24);
  a.Call(BPF_FUNC_map_lookup_elem);
  a.Jump(BPF_JEQ, bpf::R0, 0, unknown);
  a.MovReg(bpf::R9, bpf::R0);
  bpf::EmitMappingSearch(&a, unknown);
  a.Jump(BPF_JEQ, bpf::R7, 0, unknown);  // no table: the frame pointer walk's
  bpf::EmitRowSearch(&a, rows->get(), -16, unknown);
  bpf::EmitUnwindStep(&a, -64, -72, unknown);
  a.Load(8, bpf::R0, bpf::R10, -64);  // the caller's rip
  a.Exit();
  a.Bind(unknown);
  a.Mov(bpf::R0, 0);
  a.Exit();
  auto insns = a.Finish();
  ASSERT_TRUE(insns.ok()) << insns.status().ToString();
  auto prog = bpf::LoadTracepointProgram("tpe_unwind_step", *insns);
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  std::printf("one frame's step: %zu instructions, loaded\n", insns->size());
}

}  // namespace
}  // namespace tpe
