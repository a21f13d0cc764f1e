// A PERF_RECORD_SAMPLE of a tracepoint event, decoded.
//
// Source: perf_event_open(2) "PERF_RECORD_SAMPLE". With sample_type kSampleType
// (IDENTIFIER|TID|TIME|RAW) the record is
//   { struct perf_event_header; u64 id; u32 pid, tid; u64 time; u32 size; u8 raw[size]; }
// `raw` is the tracepoint's record as laid out by its format file. The kernel pads `size` to
// keep the record 8-byte aligned, so raw may carry trailing bytes past the last field: never
// assert its exact size.
// An event whose metrics need a cgroup label also sets PERF_SAMPLE_CGROUP (Linux >= 5.7), which
// in the sample layout follows RAW (include/uapi/linux/perf_event.h):
//   { ...; u32 size; u8 raw[size]; u64 cgroup; }
// Only those events pay the 8 bytes. An event of a profile also sets PERF_SAMPLE_CALLCHAIN,
// which sits between TIME and RAW:
//   { header; u64 id; u32 pid, tid; u64 time; u64 nr; u64 ips[nr]; u32 size; u8 raw[size]; ... }
// (ips: instruction pointers and PERF_CONTEXT_* markers, decode/callchain.h splits them).
// A CPU profile's software clock event also sets PERF_SAMPLE_PERIOD, between TIME and
// CALLCHAIN: { ...; u64 time; u64 period; u64 nr; ... } (the ns of the clock the sample
// stands for), and its raw payload is empty (size 4, zeros).
// A profile unwound in user space (perf/perf_event.h stack_user_bytes) also sets
// PERF_SAMPLE_REGS_USER and PERF_SAMPLE_STACK_USER, which follow RAW (before CGROUP):
//   { ...; u8 raw[size]; u64 abi; u64 regs[17] (only when abi != PERF_SAMPLE_REGS_ABI_NONE);
//     u64 size; u8 data[size]; u64 dyn_size (only when size != 0); u64 cgroup; }
// (`dyn_size`: the bytes of `data` the kernel could copy; a kernel thread has abi NONE and a
// stack size of 0).
// The reader knows which event a sample is from by its
// first field (PERF_SAMPLE_IDENTIFIER, perf/records.h SampleId) and so which layout to parse.
//
// Pure and static; thread-safe.
#pragma once

#include <cstdint>

#include "common/byte_reader.h"

namespace tpe {

struct Sample {
  uint64_t id = 0;         // PERF_SAMPLE_IDENTIFIER: which perf event (PERF_EVENT_IOC_ID)
  uint32_t pid = 0;        // thread group id of the task that hit the tracepoint
  uint32_t tid = 0;        // its thread id
  uint64_t time_ns = 0;    // CLOCK_MONOTONIC, ns
  uint32_t cpu = 0;        // the CPU whose ring carried it (not in the record; set by the reader)
  Bytes raw;               // tracepoint payload; points into the record
  uint64_t cgroup_id = 0;  // PERF_SAMPLE_CGROUP: the task's cgroup v2 id (0 when not sampled)
  Bytes callchain;         // PERF_SAMPLE_CALLCHAIN: ips[nr] as 8 * nr bytes (empty when not sampled)
  uint64_t period = 0;     // PERF_SAMPLE_PERIOD: the events (a clock's ns) it stands for (0 when not sampled)
  Bytes regs_user;         // PERF_SAMPLE_REGS_USER: the regs[] as 8 * n bytes (empty: none, or abi NONE)
  Bytes stack_user;        // PERF_SAMPLE_STACK_USER: the dyn_size bytes copied from the user rsp up
};

// Which optional fields the event's sample_type adds to kSampleType (perf/perf_event.h).
struct SampleLayout {
  bool cgroup = false;     // PERF_SAMPLE_CGROUP
  bool callchain = false;  // PERF_SAMPLE_CALLCHAIN
  bool period = false;     // PERF_SAMPLE_PERIOD
  // PERF_SAMPLE_REGS_USER (this many registers: the popcount of sample_regs_user; 0: not
  // sampled) and PERF_SAMPLE_STACK_USER.
  uint32_t regs_user = 0;
  bool stack_user = false;
};

// Decodes `record` (header included) laid out as `layout` says. False if it is truncated or its
// callchain's nr or raw size overruns it.
bool ParseSample(Bytes record, Sample* out, SampleLayout layout = {});

}  // namespace tpe
