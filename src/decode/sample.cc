#include "decode/sample.h"

#include <linux/perf_event.h>

namespace tpe {

bool ParseSample(Bytes record, Sample* out, bool with_cgroup) {
  ByteReader r(record);
  uint32_t raw_size = 0;
  if (!r.Skip(sizeof(perf_event_header)) || !r.Read(&out->id) || !r.Read(&out->pid) || !r.Read(&out->tid) ||
      !r.Read(&out->time_ns) || !r.Read(&raw_size)) {
    return false;
  }
  if (!r.ReadSpan(raw_size, &out->raw)) return false;
  out->cgroup_id = 0;
  return !with_cgroup || r.Read(&out->cgroup_id);
}

}  // namespace tpe
