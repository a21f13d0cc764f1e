// A PERF_RECORD_SAMPLE of a tracepoint event, decoded.
//
// Source: perf_event_open(2) "PERF_RECORD_SAMPLE". With sample_type kSampleType
// (IDENTIFIER|TID|TIME|RAW) the record is
//   { struct perf_event_header; u64 id; u32 pid, tid; u64 time; u32 size; u8 raw[size]; }
// `raw` is the tracepoint's record as laid out by its format file. The kernel pads `size` to
// keep the record 8-byte aligned, so raw may carry trailing bytes past the last field: never
// assert its exact size.
//
// Pure and static; thread-safe.
#pragma once

#include <cstdint>

#include "common/byte_reader.h"

namespace tpe {

struct Sample {
  uint64_t id = 0;       // PERF_SAMPLE_IDENTIFIER: which perf event (PERF_EVENT_IOC_ID)
  uint32_t pid = 0;      // thread group id of the task that hit the tracepoint
  uint32_t tid = 0;      // its thread id
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC, ns
  uint32_t cpu = 0;      // the CPU whose ring carried it (not in the record; set by the reader)
  Bytes raw;             // tracepoint payload; points into the record
};

// Decodes `record` (header included). False if it is truncated or its raw size overruns it.
bool ParseSample(Bytes record, Sample* out);

}  // namespace tpe
