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
  out->exec = (LoadAt<perf_event_header>(record, 0)->misc & PERF_RECORD_MISC_COMM_EXEC) != 0;
  return RecordTime(PERF_RECORD_COMM, record, &out->time_ns);
}

bool ParseMmap2Record(Bytes record, Mmap2Record* out) {
  // header, pid..pgoff (32), the union (24), prot and flags (8), at least one filename word.
  constexpr size_t kFixed = kHeader + 32 + 24 + 8;
  if (record.size() < kFixed + 8 + kSampleIdBytes || record.size() % 8 != 0) return false;
  ByteReader r(record);
  if (!r.Skip(kHeader) || !r.Read(&out->pid) || !r.Read(&out->tid) || !r.Read(&out->addr) || !r.Read(&out->len) ||
      !r.Read(&out->pgoff)) {
    return false;
  }
  out->has_build_id = (LoadAt<perf_event_header>(record, 0)->misc & PERF_RECORD_MISC_MMAP_BUILD_ID) != 0;
  if (out->has_build_id) {
    const uint8_t size = record[kHeader + 32];
    if (size > 20) return false;
    out->build_id = std::string_view(reinterpret_cast<const char*>(record.data() + kHeader + 36), size);
    out->maj = out->min = 0;
    out->ino = 0;
  } else {
    out->build_id = {};
    out->maj = *LoadAt<uint32_t>(record, kHeader + 32);
    out->min = *LoadAt<uint32_t>(record, kHeader + 36);
    out->ino = *LoadAt<uint64_t>(record, kHeader + 40);
  }
  out->prot = *LoadAt<uint32_t>(record, kHeader + 56);
  out->flags = *LoadAt<uint32_t>(record, kHeader + 60);
  const char* s = reinterpret_cast<const char*>(record.data() + kFixed);
  const size_t max = record.size() - kSampleIdBytes - kFixed;
  const size_t n = strnlen(s, max);
  if (n == max) return false;  // no NUL before the trailer: not a record the kernel wrote
  out->filename = std::string_view(s, n);
  return RecordTime(PERF_RECORD_MMAP2, record, &out->time_ns);
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
