// Probe references: the probe events a config names: uprobes, uretprobes, USDT probes, kprobes and kretprobes, named as
// bpftrace names them, parsed and checked
// here (what the user asked); plan/probes.h resolves them into dynamic trace events
// (docs/ARCHITECTURE.md "Probe events are dynamic trace events").
//
//   uprobe:PATH:SYMBOL            entry of a function (an OFFSET is parsed but refused by
//                                 ResolveProbe: no disassembler checks the instruction boundary)
//   uretprobe:PATH:SYMBOL         return of a function ($retval)
//   usdt:PATH:PROVIDER:NAME       a USDT probe (.note.stapsdt); its semaphore is set by the kernel
//                                 (ref_ctr_offset, Linux 4.20) while the event is open
//   kprobe:FUNCTION[+OFFSET]      a kernel function (CONFIG_KPROBE_EVENTS)
//   kretprobe:FUNCTION            a kernel function's return
// PATH is an absolute path of an executable or a library; a container's binary is reached as
// /proc/PID/root/PATH. Fields come from the metric's "args": field name -> "argN[:TYPE]" (N from
// 0, the x86-64 calling convention's registers di, si, dx, cx, r8, r9; for USDT the probe's own
// argument specs) or "retval[:TYPE]" (return probes), TYPE one of u8..u64, s8..s64, ustring (a
// string in user memory), string (in kernel memory; on uprobes and USDT probes, which only see
// the program's memory, both are the program's string). The default TYPE is u64, and for USDT
// the size and sign the note gives.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/config_names.h"
#include "tracefs/probe_events.h"

namespace tpe {

// The prefix of the probe `event` names: its text before the first ':' when that is one of
// kProbePrefixNames (config/config_names.h: uprobe, uretprobe, usdt, kprobe, kretprobe);
// nullopt for a tracepoint, a clock or anything else.
std::optional<ProbePrefix> ProbePrefixOf(std::string_view event);
// Whether `event` names a probe (ProbePrefixOf has a value).
bool IsProbeEvent(const std::string& event);
// "uprobe:, uretprobe:, usdt:, kprobe:, kretprobe:" (the prefixes of kProbePrefixNames, in
// order), for messages.
std::string ProbePrefixList();

// A parsed probe name.
struct ProbeRef {
  ProbeKind kind = ProbeKind::kUprobe;
  bool usdt = false;
  std::string path;      // uprobes
  std::string symbol;    // uprobes: the function; kprobes: the kernel function
  std::string provider;  // usdt
  std::string name;      // usdt
  uint64_t offset = 0;   // bytes into the function ("+OFFSET", decimal or 0x hex)
};
// Parses a probe name (above). Errors: InvalidArgument quoting `event` and the valid forms.
StatusOr<ProbeRef> ParseProbeRef(const std::string& event);

// One "args" entry: field name -> "argN[:TYPE]" | "retval[:TYPE]".
struct ProbeArg {
  std::string field;
  bool retval = false;
  int index = 0;     // argN
  std::string type;  // "" = the default
};
// Errors: InvalidArgument naming the field and what is valid (a field name
// [A-Za-z_][A-Za-z0-9_]* of at most 32 characters, not common_* or __probe_*; argN with N 0-5, or
// 0-11 for USDT; retval only on return probes; TYPE as above).
StatusOr<ProbeArg> ParseProbeArg(const ProbeRef& probe, const std::string& field, const std::string& spec);

}  // namespace tpe
