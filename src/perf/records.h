// Parsing of the non-sample perf records this project asks for, and the timestamp of any record.
//
// Source: include/uapi/linux/perf_event.h (enum perf_event_type). All events are opened with
// sample_type kSampleType and sample_id_all=1, so every non-sample record ends with the
// sample_id trailer { u32 pid, tid; u64 time; u64 id; } (24 bytes).
//
// Pure functions over one record's bytes (header included). They return false for a record too
// short for its type: callers count that as a decode error, never crash.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/byte_reader.h"

namespace tpe {

inline constexpr size_t kSampleIdBytes = 24;

// The CLOCK_MONOTONIC timestamp (ns) of a PERF_RECORD_SAMPLE or of any record with the
// sample_id trailer. False when the record is too short.
bool RecordTime(uint32_t type, Bytes record, uint64_t* time_ns);

// PERF_RECORD_SAMPLE: the id (PERF_SAMPLE_IDENTIFIER) is the first u64 after the header.
bool SampleId(Bytes record, uint64_t* id);

// PERF_RECORD_COMM { u32 pid, tid; char comm[]; sample_id }. misc & PERF_RECORD_MISC_COMM_EXEC
// marks an exec; otherwise a rename (prctl(PR_SET_NAME), pthread_setname_np).
struct CommRecord {
  uint32_t pid = 0, tid = 0;
  std::string_view comm;  // points into the record; at most 15 characters
  uint64_t time_ns = 0;
  bool exec = false;  // PERF_RECORD_MISC_COMM_EXEC: the process exec'd (its mappings were replaced)
};
bool ParseCommRecord(Bytes record, CommRecord* out);

// PERF_RECORD_FORK / PERF_RECORD_EXIT { u32 pid, ppid, tid, ptid; u64 time; sample_id }.
struct TaskRecord {
  uint32_t pid = 0, ppid = 0, tid = 0, ptid = 0;
  uint64_t time_ns = 0;
};
bool ParseTaskRecord(Bytes record, TaskRecord* out);

// PERF_RECORD_MMAP2 { u32 pid, tid; u64 addr, len, pgoff; union { struct { u32 maj, min; u64 ino,
// ino_generation; }; struct { u8 build_id_size; u8 res1; u16 res2; u8 build_id[20]; }; };
// u32 prot, flags; char filename[]; sample_id } — an mmap of `pid` (attr.mmap + attr.mmap2:
// executable mappings). With PERF_RECORD_MISC_MMAP_BUILD_ID in misc (attr.build_id, Linux 5.12)
// the union holds the build id instead of the device and inode. The filename is NUL-padded to 8
// bytes; "//anon" for anonymous executable memory, "[vdso]" and the like for pseudo files.
struct Mmap2Record {
  uint32_t pid = 0, tid = 0;
  uint64_t addr = 0, len = 0, pgoff = 0;
  uint32_t maj = 0, min = 0;
  uint64_t ino = 0;
  bool has_build_id = false;
  std::string_view build_id;  // raw bytes, when has_build_id; points into the record
  uint32_t prot = 0, flags = 0;
  std::string_view filename;  // points into the record
  uint64_t time_ns = 0;
};
bool ParseMmap2Record(Bytes record, Mmap2Record* out);

// PERF_RECORD_LOST { u64 id; u64 lost; sample_id } and PERF_RECORD_LOST_SAMPLES { u64 lost;
// sample_id }: `id` is the event whose record follows the gap (0 for LOST_SAMPLES; use the
// trailer's id instead).
struct LostRecord {
  uint64_t id = 0;
  uint64_t lost = 0;
};
bool ParseLostRecord(uint32_t type, Bytes record, LostRecord* out);

}  // namespace tpe
