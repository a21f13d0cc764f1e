// The off-CPU profile's program (programs.h OffCpuShape) on sched:sched_switch: the task switched
// out is remembered with its time and stack key; when it runs again, its blocked time is added
// to that key's series.
#include <string>

#include "bpf/programs.h"
#include "bpf/programs_internal.h"

namespace tpe::bpf {
using namespace internal;  // NOLINT(google-build-using-namespace): the emitters' shared pieces

StatusOr<std::vector<bpf_insn>> EmitOffCpu(const OffCpuShape& s, const MapFds& maps) {
  if (s.key.size > kMaxKeyBytes || s.key.size < s.stacks.key_offset + sizeof(StackKey)) {
    return Unimplemented("an off-CPU key of " + std::to_string(s.key.size) + " bytes (at most " +
                         std::to_string(kMaxKeyBytes) + ", a StackKey included)");
  }
  for (const FieldRef* f : {&s.prev_pid, &s.next_pid, &s.prev_state}) {
    if (f->current_tid) return Unimplemented("common_pid as " + f->name);
  }
  Assembler a;
  Label filtered = a.NewLabel(), in = a.NewLabel(), out = a.NewLabel();
  TPE_RETURN_IF_ERROR(EmitPrologue(&a, maps, nullptr, nullptr, filtered));
  const int16_t key_bytes = static_cast<int16_t>(Align8(s.key.size));

  // The switch-out of prev_pid (the current task): remember its time and key by thread id.
  EmitLoadInt(&a, s.prev_pid, R7);
  a.Jump(BPF_JEQ, R7, 0, in);  // the idle task
  a.Call(BPF_FUNC_get_current_pid_tgid);
  a.Alu(BPF_RSH, R0, 32);
  a.Jump(BPF_JEQ, R0, static_cast<int32_t>(s.own_tgid), in);  // the exporter's own threads
  a.ZeroStack(kMatchOff, 8);
  a.Store(4, R10, kMatchOff, R7);
  Label staying = a.NewLabel();
  EmitLoadInt(&a, s.prev_state, R1);
  a.Alu(BPF_AND, R1, static_cast<int32_t>(s.exiting_mask));
  a.Jump(BPF_JEQ, R1, 0, staying);
  // An exiting task will not come back: an entry it left (a switch-in never seen) goes now, so
  // a thread that gets its id later never finds it.
  a.LoadMapFd(R1, maps.starts);
  StackPtr(&a, R2, kMatchOff);
  a.Call(BPF_FUNC_map_delete_elem);
  a.Goto(in);
  a.Bind(staying);
  a.ZeroStack(kKeyOff, static_cast<uint32_t>(key_bytes));
  EmitKey(&a, s.key, kKeyOff);
  a.MovReg(R9, R6);
  EmitStackKey(&a, s.stacks, maps, static_cast<int16_t>(kKeyOff + static_cast<int>(s.stacks.key_offset)));
  a.Call(BPF_FUNC_ktime_get_ns);
  a.Store(8, R10, kStartValOff, R0);
  {
    Label replace = a.NewLabel(), nomem = a.NewLabel(), full = a.NewLabel();
    EmitStartUpdate(&a, maps, BPF_NOEXIST);
    a.Jump(BPF_JEQ, R0, 0, in);
    a.Jump(BPF_JEQ, R0, -EEXIST, replace);
    a.Jump(BPF_JEQ, R0, -ENOMEM, nomem);
    a.Goto(full);
    a.Bind(replace);  // switched out again before its switch-in was seen: that block is lost
    EmitStat(&a, maps, kUnpaired);
    EmitStartUpdate(&a, maps, BPF_ANY);
    a.Jump(BPF_JEQ, R0, 0, in);
    // Not replaced (ENOMEM where elements are allocated): the old entry goes, or the next
    // switch-in would add this stretch on CPU to it.
    a.MovReg(R8, R0);
    a.LoadMapFd(R1, maps.starts);
    StackPtr(&a, R2, kMatchOff);
    a.Call(BPF_FUNC_map_delete_elem);
    a.Jump(BPF_JEQ, R8, -ENOMEM, nomem);
    a.Bind(full);
    EmitStat(&a, maps, kTableFull);
    a.Goto(in);
    a.Bind(nomem);
    EmitStat(&a, maps, kNoMemory);
  }

  // The switch-in of next_pid: take its entry whole (copied, then deleted: only the delete that
  // returned 0 adds), add now - then to its key's series.
  a.Bind(in);
  EmitLoadInt(&a, s.next_pid, R7);
  a.Jump(BPF_JEQ, R7, 0, out);
  a.ZeroStack(kMatchOff, 8);
  a.Store(4, R10, kMatchOff, R7);
  a.LoadMapFd(R1, maps.starts);
  StackPtr(&a, R2, kMatchOff);
  a.Call(BPF_FUNC_map_lookup_elem);
  a.Jump(BPF_JEQ, R0, 0, out);  // not switched out while we watched (or left out above)
  a.Load(8, R8, R0, 0);
  for (int i = 0; i < key_bytes; i += 8) {
    a.Load(8, R1, R0, static_cast<int16_t>(8 + i));
    a.Store(8, R10, static_cast<int16_t>(kKeyOff + i), R1);
  }
  a.LoadMapFd(R1, maps.starts);
  StackPtr(&a, R2, kMatchOff);
  a.Call(BPF_FUNC_map_delete_elem);
  a.Jump(BPF_JNE, R0, 0, out);
  a.Call(BPF_FUNC_ktime_get_ns);
  a.MovReg(R7, R0);
  a.AluReg(BPF_SUB, R7, R8);  // ns off CPU
  Label forward = a.NewLabel(), counted = a.NewLabel();
  a.Jump(BPF_JSGE, R7, 0, forward);
  a.Mov(R7, 0);  // switched out on another CPU a hair later by its clock
  a.Bind(forward);
  a.LoadImm64(R1, s.min_block_ns);
  a.JumpReg(BPF_JGE, R7, R1, counted);
  EmitStat(&a, maps, kShortBlocks);
  a.Goto(out);
  a.Bind(counted);
  Label added = a.NewLabel();
  EmitAddToSeries(&a, maps, out, added);
  a.Goto(out);
  a.Bind(added);
  EmitStat(&a, maps, kBlocks);
  a.Bind(out);
  a.Bind(filtered);
  EmitReturn(&a, nullptr);
  return a.Finish();
}

}  // namespace tpe::bpf
