#include "decode/sample.h"

#include <linux/perf_event.h>

#include <algorithm>

namespace tpe {

bool ParseSample(Bytes record, Sample* out, SampleLayout layout) {
  ByteReader r(record);
  uint32_t raw_size = 0;
  if (!r.Skip(sizeof(perf_event_header)) || !r.Read(&out->id) || !r.Read(&out->pid) || !r.Read(&out->tid) ||
      !r.Read(&out->time_ns)) {
    return false;
  }
  out->period = 0;
  if (layout.period && !r.Read(&out->period)) return false;
  out->callchain = {};
  if (layout.callchain) {
    uint64_t nr = 0;
    // nr is bounded by the record (at most 64 KiB): checked before multiplying.
    if (!r.Read(&nr) || nr > record.size() / sizeof(uint64_t) || !r.ReadSpan(nr * sizeof(uint64_t), &out->callchain)) {
      return false;
    }
  }
  if (!r.Read(&raw_size)) return false;
  if (!r.ReadSpan(raw_size, &out->raw)) return false;
  out->regs_user = {};
  out->stack_user = {};
  if (layout.regs_user > 0) {
    uint64_t abi = 0;
    if (!r.Read(&abi)) return false;
    if (abi != PERF_SAMPLE_REGS_ABI_NONE && !r.ReadSpan(uint64_t{layout.regs_user} * 8, &out->regs_user)) return false;
  }
  if (layout.stack_user) {
    uint64_t size = 0;
    if (!r.Read(&size) || size > record.size()) return false;
    if (size > 0) {
      Bytes data;
      uint64_t dyn_size = 0;
      if (!r.ReadSpan(size, &data) || !r.Read(&dyn_size)) return false;
      out->stack_user = data.subspan(0, std::min(dyn_size, size));
    }
  }
  out->cgroup_id = 0;
  return !layout.cgroup || r.Read(&out->cgroup_id);
}

}  // namespace tpe
