// A small BPF interpreter for the instruction subset our generators emit, so that the decisions
// of generated programs can be unit-tested without root (and without a kernel). Tests only: it is
// its own library, tpe_bpf_interpreter, built with TPE_BUILD_TESTS, never linked into the daemon.
//
// Follows the kernel's interpreter (kernel/bpf/core.c ___bpf_prog_run) for instruction semantics
// (32-bit ALU results zero-extended, division by zero gives 0, modulo by zero keeps dst, shift
// counts masked) and kernel/bpf/helpers.c, kernel/trace/bpf_trace.c for the helpers:
//   map_lookup_elem, map_update_elem (BPF_ANY/BPF_NOEXIST/BPF_EXIST; -EEXIST, -ENOENT, -E2BIG
//   like htab_map_update_elem / array_map_update_elem), map_delete_elem (-ENOENT; -EINVAL on
//   arrays). Their errno reaches R0 as a 32-bit int zero-extended (-EEXIST is 0xffffffef), as
//   on kernels before 6.4: the verifier turns these helper calls on hash and array maps into
//   direct calls of the map's ops, which returned int until kernel commit d7ba4cc900bf ("bpf:
//   return long from bpf_map_ops funcs"); the JIT leaves R0's upper half as the 32-bit move
//   did (zero on x86-64; seen on Debian's 6.1). A program that sign-extends before comparing
//   with a negative errno is right on both. Other helpers: get_current_pid_tgid
//   (tgid << 32 | tid), get_current_comm (strscpy_pad),
//   get_smp_processor_id, ktime_get_ns, get_current_cgroup_id, probe_read_kernel (dst zeroed
//   and -EFAULT on a bad src) and probe_read_kernel_str (bytes copied including the NUL), and
//   probe_read_user(_str) the same over the fake user memory (AddUserMemory), get_stackid
//   (FakeTask's ids; the map argument must be a map).
//
// Supported: ALU64 and ALU K/X (add sub mul div mod or and xor lsh rsh arsh neg mov), LD_IMM64
// (plain and BPF_PSEUDO_MAP_FD), LDX/ST/STX MEM of 1/2/4/8 bytes, STX ATOMIC BPF_ADD (with or
// without BPF_FETCH, 32 and 64 bits) and BPF_XCHG (64 bits), JMP and JMP32 conditional jumps K/X, JA, CALL, EXIT.
// Not supported (an error): BPF_END, signed div/mod and movsx, bpf-to-bpf calls, tail calls.
//
// Pointers are plain u64 values with a region tag in the top 16 bits (ctx, stack, map handle,
// map value) and an offset below, so they survive being stored to and loaded from memory.
// Every access is bounds-checked against its region. Direct ctx loads follow the verifier's
// rules for tracepoint programs (kernel/trace/bpf_trace.c tp_prog_is_valid_access): read-only,
// aligned (offset % size == 0), and not below offset 8, where perf_trace_run_bpf_submit
// (kernel/events/core.c) stores a pt_regs pointer over common_type/flags/preempt_count/pid. Unlike the kernel, R1-R5
// are set to a poison value after each helper call, so code that relies on them surviving a call is caught.
//
// Thread-safety: an Interpreter is not thread-safe; distinct instances are independent.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpe::bpf {

// The task and CPU the program runs "on": what the helpers report.
struct FakeTask {
  uint32_t pid = 0, tid = 0;  // tgid and thread id
  uint32_t cpu = 0;
  std::string comm;  // the task name; bytes past 15 and after a NUL are ignored (TASK_COMM_LEN)
  uint64_t cgroup_id = 0;
  uint64_t ktime_ns = 0;
  // What get_stackid returns: for the kernel stack (flags without BPF_F_USER_STACK) and the
  // user stack (with it): a stack id, or a negative errno.
  int64_t kernel_stack_id = 0, user_stack_id = 0;
};

// Maps the program refers to by fd (BPF_PSEUDO_MAP_FD). Hash maps and (per-CPU) arrays are
// emulated as one CPU.
struct FakeMap {
  uint32_t type = BPF_MAP_TYPE_HASH;
  uint32_t key_size = 0, value_size = 0, max_entries = 0;
  std::map<std::string, std::string> entries;  // key bytes -> value bytes
  // Fault injection: an update that would insert a new key fails with -insert_errno
  // (e.g. ENOMEM, as htab_map_update_elem when the element cannot be allocated); 0 = none.
  int insert_errno = 0;
  // When set, a program store into a value of this map is an error: the test asserts that the
  // program replaces values only through map_update_elem (atomic for concurrent readers).
  bool values_read_only = false;
};

// Called before each helper call with the helper's id (BPF_FUNC_*): a test injects what
// another CPU does at that moment (e.g. deletes a map entry), deterministically.
using BeforeHelper = std::function<void(int helper_id)>;
// Called after each program store into a map value, with the map's fd and the entry's key: the
// value then is one state a reader on another CPU could copy (a test replays them).
using AfterValueStore = std::function<void(int fd, const std::string& key)>;

class Interpreter {
 public:
  // Registers `map` under `fd` (replacing any map there). Arrays (BPF_MAP_TYPE_ARRAY and
  // BPF_MAP_TYPE_PERCPU_ARRAY): all max_entries entries are pre-created, zeroed (key = u32 index
  // bytes, little-endian), keeping values already in `map.entries`.
  void AddMap(int fd, FakeMap map);
  // The map under `fd`, or null.
  FakeMap* map(int fd);
  // Installs (or clears, with nullptr) the hook run before every helper call.
  void set_before_helper(BeforeHelper hook) { before_helper_ = std::move(hook); }
  // Installs (or clears) the hook run after every store into a map value.
  void set_after_value_store(AfterValueStore hook) { after_value_store_ = std::move(hook); }

  // Runs `insns` with R1 = pointer to a copy of `record` (the tracepoint record; ctx loads at
  // constant offsets read it), R10 = the top of a 512-byte zeroed stack. Returns R0 at exit.
  // Errors (InvalidArgument, naming the instruction index): a memory access outside
  // ctx/stack/map values or a store to ctx, an unknown opcode or helper, an unknown map fd, more
  // than 1,000,000 instructions executed, a jump or fall-through out of the program.
  StatusOr<uint64_t> Run(const std::vector<bpf_insn>& insns, std::string_view record, const FakeTask& task);
  // Runs `insns` as a BPF_PROG_TYPE_KPROBE program: R1 = a copy of `regs` (struct pt_regs, 21
  // u64 in the x86-64 order of probe_record.h), readable at any aligned offset inside it
  // (kprobe_prog_is_valid_access). Errors as Run's.
  StatusOr<uint64_t> RunKprobe(const std::vector<bpf_insn>& insns, const std::vector<uint64_t>& regs,
                               const FakeTask& task);
  // Memory of the probed process at user address `addr` (regions must not overlap), read by
  // probe_read_user(_str); every other user address faults.
  void AddUserMemory(uint64_t addr, std::string bytes);

 private:
  std::map<int, FakeMap> maps_;
  std::map<uint64_t, std::string> user_memory_;
  BeforeHelper before_helper_;
  AfterValueStore after_value_store_;
};

}  // namespace tpe::bpf
