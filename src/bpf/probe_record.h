// The bpf engine on probe events (uprobes, uretprobes, USDT probes, kprobes, kretprobes): a
// BPF_PROG_TYPE_KPROBE program whose context is the probed task's struct pt_regs, not a trace
// record. Its prologue *materializes the record* the event's tracefs `format` describes — each
// fetch arg computed from pt_regs as the kernel's probe code would — into a per-CPU array value,
// points R6 at it and runs the tracepoint shapes (programs.h) unchanged: every field is then a
// load at its format offset, as on a tracepoint.
//
// Kernel facts (verified in the kernel source):
//   * kernel/events/core.c perf_event_set_bpf_prog: a program attached with
//     PERF_EVENT_IOC_SET_BPF to a kprobe or uprobe trace event must be BPF_PROG_TYPE_KPROBE.
//   * kernel/trace/trace_uprobe.c __uprobe_perf_func: the program runs from the event's
//     prog_array with `regs` (the task's user registers; entry: ip is the probed address) as
//     ctx, through bpf_prog_run_array_uprobe (include/linux/bpf.h): migrate_disable() only,
//     no bpf_prog_active. With CONFIG_PREEMPT_RCU a program can be preempted and the same
//     program run by another task on that CPU — so the per-CPU record has a guard (below).
//     kprobes run through trace_call_bpf (kernel/trace/bpf_trace.c), which never nests.
//   * kernel/trace/trace_probe_tmpl.h store_trace_args / trace_uprobe.c fetch_store_string:
//     the fixed part holds the args at their format offsets (raw stores of `size` bytes, no
//     alignment); strings follow the fixed part packed in argument order, each with its
//     __data_loc word (length << 16 | offset from the record start), the length counting the
//     NUL; a string that faults has length 0 at the current offset. x86-64 pt_regs layout:
//     arch/x86/include/asm/ptrace.h (r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di
//     orig_ax ip cs flags sp ss, 8 bytes each); $retval is ax (regs_return_value).
//
// The materialized record differs from the kernel's in what no metric can read: the common_*
// header (bytes 0-7 hold the guard; common_pid comes from bpf_get_current_pid_tgid as on
// tracepoints) and the __probe_ip/__probe_func/__probe_ret_ip words (left 0; the plan refuses
// them). Strings are read up to kStringSlotBytes - 1 bytes (the kernel: up to 4095), the cut the
// keys of tracepoint strings have too; shorter strings are byte-identical.
//
// The guard: bytes 0-7 of the record are set with BPF_XCHG (`atomic_guard`, Linux 5.12; a plain
// load and store on older kernels, whose uprobes ran under trace_call_bpf and never nested) and
// cleared at the program's exit. A run that finds it set was preempting another run of the same
// program on its CPU: it counts kBusy (with an atomic add) and does nothing else, so every hit is
// a run, a busy miss or a kernel recursion miss.
//
// Pure: describes and emits; loads nothing. Thread-safety: values and free functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bpf/assembler.h"
#include "bpf/string_slot.h"
#include "common/status.h"
#include "format/event_format.h"

namespace tpe::bpf {

// Byte offsets of x86-64 struct pt_regs members (arch/x86/include/asm/ptrace.h).
inline constexpr uint32_t kPtRegsBytes = 21 * 8;
// The offset of register `name` as fetch args spell it ("di", "r15", "sp", "ip", ...), or -1.
int PtRegsOffset(const std::string& name);

// One field of the record, as a fetch arg computes it.
struct ProbeFetch {
  std::string field;
  uint32_t reg_offset = 0;  // the base register's offset in pt_regs ($retval: ax)
  bool memory = false;      // read at register + disp ("+112(%sp)"), not the register itself
  int32_t disp = 0;
  bool string = false;  // ustring/string: a __data_loc string at register + disp
  // The string or memory operand is in user memory: every fetch of a uprobe's, and a kprobe's
  // `ustring` (a user pointer passed to the kernel, e.g. a syscall's path); read with
  // bpf_probe_read_user(_str) (since 5.5 a user address read as kernel memory fails on x86).
  bool user_memory = false;
  uint32_t offset = 0, size = 8;  // the field in the record (size 4 for a __data_loc word)
};

struct ProbeRecord {
  bool user = true;  // memory operands and strings are in the probed process (uprobes)
  // The fields whose value is a string read from user memory (ProbeFetch::user_memory): where
  // its page is not resident, bpf_probe_read_user_str fails (a BPF program cannot fault a page
  // in). On a uprobe the kernel's own fetch for the perf engine (trace_uprobe.c
  // fetch_store_string, strncpy_from_user) faults it in and reads it; on a kprobe it cannot
  // either (strncpy_from_user_nofault). A failed read counts kStringFaults.
  std::vector<std::string> UserStringFields() const;
  std::vector<ProbeFetch> fetches;
  uint32_t fixed = 0;        // bytes of the fixed part: strings start here
  uint32_t size = 0;         // bytes of the record map's value (fixed + a slot per string, 8-aligned)
  bool atomic_guard = true;  // BPF_XCHG on the guard (see the header)
};

// The record of an event created with `fetch_args` ({field, "%di:u64"}, {field,
// "+0(%si):ustring"}, {field, "$retval:s32"}, {field, "-24(%bp):s64"}: ProbeEventSpec::args)
// whose tracefs format is `format`; `user`: a uprobe (memory is the task's), else a kprobe.
// Errors: InvalidArgument for a fetch arg of another form ($stackN, $comm, @symbol, nested
// dereferences, bitfields, arrays) or a field the format lacks or sizes differently.
StatusOr<ProbeRecord> BuildProbeRecord(const std::vector<std::pair<std::string, std::string>>& fetch_args,
                                       const EventFormat& format, bool user);

// Emits the prologue of a probe program: R7 = ctx (pt_regs), R6 = the record (entry 0 of the
// per-CPU array `record_fd`, value size r.size), the guard taken (a busy run counts slot
// `busy_slot` of `stats_fd` and exits returning 1), and the record filled in (a string that
// cannot be read is left empty, as the kernel leaves it, and counts slot `fault_slot`).
// Clobbers R0-R5, R7 and R8; R6 stays the record until the exit. Uses the 8 stack bytes at
// R10 + index_off as the lookup key.
void EmitProbeRecord(Assembler* a, const ProbeRecord& r, int record_fd, int stats_fd, uint32_t busy_slot,
                     uint32_t fault_slot, int16_t index_off);
// Emits the release of the guard (before every exit of a probe program that took it).
void EmitProbeRecordRelease(Assembler* a);

}  // namespace tpe::bpf
