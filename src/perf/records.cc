#include "perf/records.h"

#include <linux/perf_event.h>

#include <cstring>

namespace tpe {
namespace {
constexpr size_t kHeader = sizeof(perf_event_header);
}

bool SampleId(Bytes record, uint64_t* id) {
  auto v = LoadAt<uint64_t>(record, kHeader);
  if (!v) return false;
  *id = *v;
  return true;
}

bool RecordTime(uint32_t type, Bytes record, uint64_t* time_ns) {
  if (type == PERF_RECORD_SAMPLE) {
    // { header; u64 id; u32 pid, tid; u64 time; ... }
    auto v = LoadAt<uint64_t>(record, kHeader + 16);
    if (!v) return false;
    *time_ns = *v;
    return true;
  }
  if (record.size() < kHeader + kSampleIdBytes) return false;
  auto v = LoadAt<uint64_t>(record, record.size() - 16);
  if (!v) return false;
  *time_ns = *v;
  return true;
}

bool ParseCommRecord(Bytes record, CommRecord* out) {
  if (record.size() < kHeader + 8 + kSampleIdBytes) return false;
  out->pid = *LoadAt<uint32_t>(record, kHeader);
  out->tid = *LoadAt<uint32_t>(record, kHeader + 4);
  const size_t str_begin = kHeader + 8;
  const size_t str_max = record.size() - kSampleIdBytes - str_begin;
  const char* s = reinterpret_cast<const char*>(record.data() + str_begin);
  out->comm = std::string_view(s, strnlen(s, str_max));
  return RecordTime(PERF_RECORD_COMM, record, &out->time_ns);
}

bool ParseTaskRecord(Bytes record, TaskRecord* out) {
  ByteReader r(record);
  if (!r.Skip(kHeader)) return false;
  return r.Read(&out->pid) && r.Read(&out->ppid) && r.Read(&out->tid) && r.Read(&out->ptid) && r.Read(&out->time_ns);
}

bool ParseLostRecord(uint32_t type, Bytes record, LostRecord* out) {
  ByteReader r(record);
  if (!r.Skip(kHeader)) return false;
  if (type == PERF_RECORD_LOST) return r.Read(&out->id) && r.Read(&out->lost);
  if (type == PERF_RECORD_LOST_SAMPLES) {
    if (!r.Read(&out->lost)) return false;
    if (record.size() >= kHeader + 8 + kSampleIdBytes) out->id = *LoadAt<uint64_t>(record, record.size() - 8);
    return true;
  }
  return false;
}

}  // namespace tpe
