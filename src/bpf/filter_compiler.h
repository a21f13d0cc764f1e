// Compiles a parsed kernel event filter (filter/filter.h FilterExpr) into BPF instructions for a
// BPF_PROG_TYPE_TRACEPOINT program, deciding each record exactly as EvaluateFilter (and so the
// kernel's own filter, kernel/trace/trace_events_filter.c) would.
//
// What a tracepoint program sees (kernel facts the code relies on):
//   * perf_trace_run_bpf_submit (kernel/events/core.c) stores a pt_regs pointer over the first
//     8 bytes of the record (common_type, common_flags, common_preempt_count, common_pid) before
//     the program runs, and tp_prog_is_valid_access (kernel/trace/bpf_trace.c) refuses reads
//     below offset 8, at or past PERF_MAX_TRACE_SIZE (8192), writes, and misaligned reads
//     (offset % size != 0). So common_pid is the low 32 bits of bpf_get_current_pid_tgid()
//     (current->pid, what the record holds); common_type/common_flags/common_preempt_count
//     cannot be compiled; other fields are aligned loads at constant offsets from ctx (a
//     misaligned integer field is assembled from byte loads).
//   * System call tracepoints (perf_call_bpf_enter/exit, kernel/trace/trace_syscalls.c) pass
//     their own struct { struct trace_entry ent (regs pointer on top); syscall_nr; args[6] or
//     ret } __aligned(8): the offsets of the format file (syscall_nr is an int in recent
//     kernels, an unsigned long before; its low 4 bytes sit at offset 8 either way).
//   * CPU/cpu/common_cpu is bpf_get_smp_processor_id(); COMM/comm is bpf_get_current_comm()
//     into 16 bytes of scratch stack (strscpy_pad: NUL-padded, like the task's comm array).
//
// Compiled: integer fields (1/2/4/8 bytes, fixed arrays of those sizes as unsigned) with
// == != < <= > >= & (the literal cast to the field's size and signedness first), CPUS{...}
// with integer fields, common_pid and CPU, string matches on char[N] and COMM: full (==, !=,
// patterns without wildcards or starting with a digit), prefix "x*", suffix "*x" (the kernel's
// quirk: the end of the whole N-byte array), substring "*x*" (over all N bytes, when
// (N-L+1)*L <= 1024 byte compares), '!'-inverted patterns; && || ! with short-circuit jumps.
// __data_loc strings with full matches (patterns up to 31 bytes) and prefix patterns (up to 32):
// their first 32 bytes are read with bpf_probe_read_kernel from ctx + (loc & 0xffff), compared
// over the length the __data_loc word gives (a length of 0 is taken as "").
// Unimplemented (StatusCode::kUnimplemented, naming the predicate and its column): glob
// patterns, suffix and substring patterns on __data_loc strings, char * fields, __rel_loc
// strings, cpumask fields, common_type/
// common_flags/common_preempt_count, larger substring searches, fields beyond 8192 bytes.
//
// Pure (emits into the caller's Assembler). Thread-safety: functions; no shared state.
#pragma once

#include <cstdint>

#include "bpf/assembler.h"
#include "common/status.h"
#include "filter/filter.h"

namespace tpe::bpf {

struct FilterCodeContext {
  Reg ctx = R6;               // holds the tracepoint record pointer (the program's R1 at entry); preserved
  int16_t scratch_off = -48;  // 32 bytes of stack at R10+scratch_off..+31 the filter code may use
  // CPUs possible on the machine (CPUS{a,b} predicates are false for a CPU number >= this, like
  // the kernel's filter_pred_*_cpumask); 0 = unknown: kMaxFilterCpus, like FilterContext.
  uint32_t nr_cpu_ids = 0;
};

// Emits code that continues at the next instruction when `expr` holds and jumps to `on_false`
// when it does not. The code clobbers only R0-R5 (helper calls clobber R1-R5) and the scratch
// stack; R6-R9 and the rest of the stack are preserved. Nothing is emitted on error.
// Errors: Unimplemented("<predicate> at column N: <why>") when a predicate cannot be compiled
// (see the list above); InvalidArgument when `cx` is unusable (ctx not in R6-R9, scratch not
// 32 bytes inside the 512-byte stack).
Status CompileFilter(const FilterExpr& expr, const FilterCodeContext& cx, Assembler* a, Label on_false);

// Just the check: OK, or the error CompileFilter would return (with the default context).
Status CheckFilterCompiles(const FilterExpr& expr);

}  // namespace tpe::bpf
