#include "bpf/interpreter.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "bpf/assembler.h"

namespace tpe::bpf {
namespace {

std::vector<bpf_insn> Build(const Assembler& a) {
  auto p = a.Finish();
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : std::vector<bpf_insn>{};
}

uint64_t RunOk(Interpreter* in, const Assembler& a, std::string_view record = "", const FakeTask& task = {}) {
  std::vector<bpf_insn> prog = Build(a);
  auto r = in->Run(prog, record, task);
  EXPECT_TRUE(r.ok()) << r.status().ToString() << "\n" << Disassemble(prog);
  return r.ok() ? *r : ~uint64_t{0};
}

bpf_insn Raw(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst;
  i.src_reg = src;
  i.off = off;
  i.imm = imm;
  return i;
}

TEST(InterpreterTest, Alu64And32) {
  Interpreter in;
  Assembler a;
  a.Mov(R0, -1);          // 0xffff...ff
  a.Alu(BPF_RSH, R0, 4);  // 0x0fff...ff
  a.Exit();
  EXPECT_EQ(RunOk(&in, a), 0x0fffffffffffffffULL);

  // 32-bit ops zero-extend; arsh keeps the sign; div/mod by zero.
  std::vector<bpf_insn> p = {
      Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, -8),  // r0 = -8
      Raw(BPF_ALU | BPF_ARSH | BPF_K, 0, 0, 0, 1),    // w0 s>>= 1 → 0xfffffffc, zero-extended
      Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
  };
  auto r = in.Run(p, "", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0xfffffffcULL);
  p = {Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 7), Raw(BPF_ALU64 | BPF_MOV | BPF_K, 1, 0, 0, 0),
       Raw(BPF_ALU64 | BPF_DIV | BPF_X, 0, 1, 0, 0), Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  EXPECT_EQ(*in.Run(p, "", {}), 0u);
  p[2] = Raw(BPF_ALU64 | BPF_MOD | BPF_X, 0, 1, 0, 0);
  EXPECT_EQ(*in.Run(p, "", {}), 7u);
  p = {Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 5), Raw(BPF_ALU64 | BPF_NEG, 0, 0, 0, 0),
       Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  EXPECT_EQ(*in.Run(p, "", {}), static_cast<uint64_t>(-5));
}

TEST(InterpreterTest, Jmp32ComparesLowHalf) {
  Interpreter in;
  std::vector<bpf_insn> p = {
      Raw(BPF_LD | BPF_DW | BPF_IMM, 1, 0, 0, -1),
      Raw(0, 0, 0, 0, 5),  // r1 = 0x5_ffffffff
      Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0),
      Raw(BPF_JMP32 | BPF_JSLT | BPF_K, 1, 0, 1, 0),  // (s32)w1 < 0 → skip
      Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
      Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1),
      Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
  };
  EXPECT_EQ(*in.Run(p, "", {}), 1u);
  p[3] = Raw(BPF_JMP | BPF_JSLT | BPF_K, 1, 0, 1, 0);  // 64-bit: positive
  EXPECT_EQ(*in.Run(p, "", {}), 0u);
  // X forms: w1 == w2 although r1 != r2.
  std::vector<bpf_insn> x = {
      Raw(BPF_LD | BPF_DW | BPF_IMM, 1, 0, 0, 7),   Raw(0, 0, 0, 0, 1),  // r1 = 0x1_00000007
      Raw(BPF_ALU64 | BPF_MOV | BPF_K, 2, 0, 0, 7), Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0),
      Raw(BPF_JMP32 | BPF_JEQ | BPF_X, 1, 2, 1, 0), Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
      Raw(BPF_JMP | BPF_JEQ | BPF_X, 1, 2, 1, 0),   Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1),
      Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
  };
  EXPECT_EQ(*in.Run(x, "", {}), 1u);
}

TEST(InterpreterTest, CtxStackAndPointersInMemory) {
  Interpreter in;
  Assembler a;
  a.MovReg(R6, R1);
  a.Store(8, R10, -8, R6);  // spill the ctx pointer
  a.Load(8, R2, R10, -8);   // and fill it back
  a.Load(4, R0, R2, 12);
  a.Exit();
  std::string rec = {1, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 0x78, 0x56, 0x34, 0x12};
  EXPECT_EQ(RunOk(&in, a, rec), 0x12345678u);

  for (int16_t off : {14, 4, 13}) {  // past the end, the pt_regs slot, misaligned
    Assembler bad;
    bad.Load(4, R0, R1, off);
    bad.Exit();
    EXPECT_FALSE(in.Run(Build(bad), rec, {}).ok()) << off;
  }
  Assembler write_ctx;
  write_ctx.StoreImm(4, R1, 0, 1);
  write_ctx.Exit();
  EXPECT_FALSE(in.Run(Build(write_ctx), rec, {}).ok());
  Assembler below;
  below.StoreImm(8, R10, -520, 1);
  below.Exit();
  EXPECT_FALSE(in.Run(Build(below), rec, {}).ok());
}

TEST(InterpreterTest, ErrorsOnLoopsJumpsAndUnknowns) {
  Interpreter in;
  Assembler loop;
  Label top = loop.NewLabel();
  loop.Bind(top);
  loop.Goto(top);
  auto r = in.Run(Build(loop), "", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1000000"), std::string::npos);
  std::vector<bpf_insn> p = {Raw(BPF_JMP | BPF_JA, 0, 0, 5, 0), Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  EXPECT_FALSE(in.Run(p, "", {}).ok());
  p = {Raw(BPF_JMP | BPF_CALL, 0, 0, 0, 9999), Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  EXPECT_FALSE(in.Run(p, "", {}).ok());
  p = {Raw(BPF_ALU64 | BPF_END, 0, 0, 0, 16), Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  EXPECT_FALSE(in.Run(p, "", {}).ok());
  p = {Raw(BPF_LD | BPF_DW | BPF_IMM, 1, BPF_PSEUDO_MAP_FD, 0, 42), Raw(0, 0, 0, 0, 0),
       Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};  // no map 42
  EXPECT_FALSE(in.Run(p, "", {}).ok());
  p = {Raw(BPF_ALU64 | BPF_MOV | BPF_K, 10, 0, 0, 0), Raw(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};  // R10 is read-only
  EXPECT_FALSE(in.Run(p, "", {}).ok());
  p = {Raw(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0)};  // falls off the end
  EXPECT_FALSE(in.Run(p, "", {}).ok());
}

TEST(InterpreterTest, HashMapLookupUpdateAtomicDelete) {
  Interpreter in;
  in.AddMap(7, FakeMap{BPF_MAP_TYPE_HASH, 4, 8, 2, {}});
  // update(key, value, flags) as a program; returns the helper's result.
  auto update = [&](int32_t key, int32_t value, int flags) {
    Assembler a;
    a.StoreImm(4, R10, -4, key);
    a.StoreImm(8, R10, -16, value);
    a.LoadMapFd(R1, 7);
    a.MovReg(R2, R10);
    a.Alu(BPF_ADD, R2, -4);
    a.MovReg(R3, R10);
    a.Alu(BPF_ADD, R3, -16);
    a.Mov(R4, flags);
    a.Call(BPF_FUNC_map_update_elem);
    a.Exit();
    const uint64_t r0 = RunOk(&in, a);
    EXPECT_EQ(r0 >> 32, 0u) << "an errno is an int zero-extended into R0, as before Linux 6.4";
    return static_cast<int32_t>(r0);
  };
  EXPECT_EQ(update(1, 10, BPF_NOEXIST), 0);
  EXPECT_EQ(update(1, 11, BPF_NOEXIST), -EEXIST);
  EXPECT_EQ(update(2, 20, BPF_EXIST), -ENOENT);
  EXPECT_EQ(update(2, 20, BPF_ANY), 0);
  EXPECT_EQ(update(3, 30, BPF_ANY), -E2BIG);  // full
  EXPECT_EQ(update(2, 21, BPF_EXIST), 0);     // replacing works when full

  Assembler add;  // v = lookup(1); if (!v) return 0; lock *v += 5; return *v
  Label miss = add.NewLabel();
  add.StoreImm(4, R10, -4, 1);
  add.LoadMapFd(R1, 7);
  add.MovReg(R2, R10);
  add.Alu(BPF_ADD, R2, -4);
  add.Call(BPF_FUNC_map_lookup_elem);
  add.Jump(BPF_JEQ, R0, 0, miss);
  add.Mov(R1, 5);
  add.AtomicAdd64(R0, 0, R1);
  add.Load(8, R0, R0, 0);
  add.Exit();
  add.Bind(miss);
  add.Mov(R0, 0);
  add.Exit();
  EXPECT_EQ(RunOk(&in, add), 15u);
  EXPECT_EQ(RunOk(&in, add), 20u);
  uint64_t v = 0;
  std::memcpy(&v, in.map(7)->entries.at(std::string("\1\0\0\0", 4)).data(), 8);
  EXPECT_EQ(v, 20u);

  std::vector<bpf_insn> p = Build(add);
  // 32-bit atomic add on the same value: patch the BPF_DW into BPF_W.
  for (auto& i : p) {
    if (BPF_MODE(i.code) == BPF_ATOMIC) i.code = BPF_STX | BPF_W | BPF_ATOMIC;
  }
  EXPECT_EQ(*in.Run(p, "", {}), 25u);

  Assembler del;
  del.StoreImm(4, R10, -4, 1);
  del.LoadMapFd(R1, 7);
  del.MovReg(R2, R10);
  del.Alu(BPF_ADD, R2, -4);
  del.Call(BPF_FUNC_map_delete_elem);
  del.Exit();
  EXPECT_EQ(RunOk(&in, del), 0u);
  EXPECT_EQ(RunOk(&in, del), uint64_t{static_cast<uint32_t>(-ENOENT)});  // an int, as before 6.4
  EXPECT_EQ(RunOk(&in, add), 0u);                                        // lookup misses now
}

TEST(InterpreterTest, ArrayMapsArePreCreated) {
  Interpreter in;
  in.AddMap(3, FakeMap{BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 4, {}});
  EXPECT_EQ(in.map(3)->entries.size(), 4u);
  EXPECT_EQ(in.map(9), nullptr);
  Assembler a;
  Label miss = a.NewLabel();
  a.StoreImm(4, R10, -4, 3);
  a.LoadMapFd(R1, 3);
  a.MovReg(R2, R10);
  a.Alu(BPF_ADD, R2, -4);
  a.Call(BPF_FUNC_map_lookup_elem);
  a.Jump(BPF_JEQ, R0, 0, miss);
  a.StoreImm(8, R0, 0, 42);
  a.Load(8, R0, R0, 8);  // out of the 8-byte value: error
  a.Bind(miss);
  a.Exit();
  auto r = in.Run(Build(a), "", {});
  EXPECT_FALSE(r.ok());
  uint64_t v = 0;
  std::memcpy(&v, in.map(3)->entries.at(std::string("\3\0\0\0", 4)).data(), 8);
  EXPECT_EQ(v, 42u);
}

TEST(InterpreterTest, TaskHelpers) {
  Interpreter in;
  FakeTask t;
  t.pid = 100;
  t.tid = 101;
  t.cpu = 3;
  t.comm = "a-very-long-task-name";
  t.cgroup_id = 77;
  t.ktime_ns = 123456789;
  auto one = [&](int helper) {
    Assembler a;
    a.Call(helper);
    a.Exit();
    return RunOk(&in, a, "", t);
  };
  EXPECT_EQ(one(BPF_FUNC_get_current_pid_tgid), (uint64_t{100} << 32) | 101);
  EXPECT_EQ(one(BPF_FUNC_get_smp_processor_id), 3u);
  EXPECT_EQ(one(BPF_FUNC_get_current_cgroup_id), 77u);
  EXPECT_EQ(one(BPF_FUNC_ktime_get_ns), 123456789u);

  // get_current_comm into 16 bytes: 15 bytes and a NUL; into 4 bytes: "a-v\0".
  for (int size : {16, 4}) {
    Assembler a;
    a.ZeroStack(-32, 32);
    a.StoreImm(8, R10, -16, -1);
    a.StoreImm(8, R10, -8, -1);
    a.MovReg(R1, R10);
    a.Alu(BPF_ADD, R1, -16);
    a.Mov(R2, size);
    a.Call(BPF_FUNC_get_current_comm);
    a.Load(8, R0, R10, size == 16 ? -8 : -16);  // bytes 8..15 or 0..7
    a.Exit();
    uint64_t v = RunOk(&in, a, "", t);
    char got[9] = {};
    std::memcpy(got, &v, 8);
    if (size == 16) {
      EXPECT_EQ(std::string(got, 8), std::string("ong-tas\0", 8));
    } else {
      EXPECT_EQ(std::string(got, 8), std::string("a-v\0\xff\xff\xff\xff", 8));
    }
  }
}

TEST(InterpreterTest, ProbeRead) {
  Interpreter in;
  std::string rec = "xxxxhello";  // "hello" at 4, no NUL inside the record
  rec.push_back('\0');
  rec += "abc";
  // probe_read_kernel_str(r10-16, 16, ctx+4) → 6 ("hello" + NUL).
  auto str = [&](int32_t src_off, int32_t size) {
    Assembler a;
    a.MovReg(R3, R1);
    a.Alu(BPF_ADD, R3, src_off);
    a.MovReg(R1, R10);
    a.Alu(BPF_ADD, R1, -16);
    a.Mov(R2, size);
    a.Call(BPF_FUNC_probe_read_kernel_str);
    a.Exit();
    return static_cast<int64_t>(RunOk(&in, a, rec));
  };
  EXPECT_EQ(str(4, 16), 6);
  EXPECT_EQ(str(4, 3), 3);          // "he" + NUL
  EXPECT_EQ(str(10, 16), -EFAULT);  // "abc" runs off the record
  EXPECT_EQ(str(100, 16), -EFAULT);

  Assembler a;  // probe_read_kernel(r10-8, 4, ctx+4); return *(u32 *)(r10-8)
  a.MovReg(R3, R1);
  a.Alu(BPF_ADD, R3, 4);
  a.MovReg(R1, R10);
  a.Alu(BPF_ADD, R1, -8);
  a.Mov(R2, 4);
  a.Call(BPF_FUNC_probe_read_kernel);
  a.Load(4, R0, R10, -8);
  a.Exit();
  uint32_t hell = 0;
  std::memcpy(&hell, "hell", 4);
  EXPECT_EQ(RunOk(&in, a, rec), hell);
  Assembler b;  // a bad source returns -EFAULT
  b.LoadImm64(R3, 0x1000);
  b.MovReg(R1, R10);
  b.Alu(BPF_ADD, R1, -8);
  b.Mov(R2, 4);
  b.Call(BPF_FUNC_probe_read_kernel);
  b.Exit();
  EXPECT_EQ(static_cast<int64_t>(RunOk(&in, b, rec)), -EFAULT);
}

TEST(InterpreterTest, HelpersClobberArgumentRegisters) {
  Interpreter in;
  Assembler a;
  a.Mov(R1, 1);
  a.Mov(R6, 6);
  a.Call(BPF_FUNC_ktime_get_ns);
  a.MovReg(R0, R1);
  a.Exit();
  EXPECT_NE(RunOk(&in, a), 1u);
}

}  // namespace
}  // namespace tpe::bpf
