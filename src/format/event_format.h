// The field-offset table of one tracepoint, parsed from its tracefs `format` file.
//
// Source: Documentation/trace/events.rst §5 "Event formats". A real file (sched:sched_switch on
// Linux 6.18) looks like:
//
//   name: sched_switch
//   ID: 372
//   format:
//   	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
//   	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
//   	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
//   	field:int common_pid;	offset:4;	size:4;	signed:1;
//
//   	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
//   	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
//   	field:long prev_state;	offset:32;	size:8;	signed:1;
//   	...
//   	field:__data_loc char[] name;	offset:24;	size:4;	signed:0;   (net:net_dev_xmit)
//
//   print fmt: "prev_comm=%s prev_pid=%d ...", REC->prev_comm, REC->prev_pid, ...
//
// Offsets and sizes are in bytes from the start of the raw tracepoint record (PERF_SAMPLE_RAW
// payload). The declared C type is informational only: syscall arguments declared `int` are
// 8 bytes wide (size:8), so decoding always goes by `size`, never by the type name.
//
// Pure: no I/O. Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpe {

enum class FieldKind {
  kInteger,    // signed/unsigned scalar of 1, 2, 4 or 8 bytes (incl. bool, enums, pid_t, dev_t)
  kPointer,    // a pointer value (`void *`, `const char *`): an integer of `size` bytes
  kCharArray,  // fixed `char name[N]`: a NUL-terminated (or N-byte) string
  kArray,      // other fixed arrays, e.g. `__u8 saddr[4]`, `__u8 saddr_v6[16]`
  kDataLoc,    // `__data_loc T[] name`: u32 at offset = (length << 16) | offset-from-record-start
  kRelLoc,     // `__rel_loc T[] name`: u32 = (length << 16) | offset-from-end-of-this-field
  kBytes,      // anything else (e.g. an embedded struct): opaque bytes
};

const char* FieldKindName(FieldKind kind);

struct FieldFormat {
  std::string name;     // e.g. "prev_comm"
  std::string type;     // declared type without the name, e.g. "char[16]", "__data_loc char[]"
  uint32_t offset = 0;  // bytes from the start of the raw record
  uint32_t size = 0;    // bytes occupied in the record (4 for __data_loc/__rel_loc)
  bool is_signed = false;
  FieldKind kind = FieldKind::kInteger;
  uint32_t array_len = 0;  // element count of a fixed array; 0 otherwise
  bool is_common = false;  // common_type, common_flags, common_preempt_count, common_pid

  // True when the field holds text: char arrays and __data_loc/__rel_loc char[].
  bool IsString() const;
  // True when the field can be read as one integer (kInteger, kPointer).
  bool IsNumeric() const { return kind == FieldKind::kInteger || kind == FieldKind::kPointer; }
};

struct EventFormat {
  std::string name;                 // "sched_switch"
  uint64_t id = 0;                  // event id (perf_event_attr.config)
  std::vector<FieldFormat> fields;  // in file order, common_* first
  std::string print_fmt;            // the text after "print fmt: "

  // The field named `name`, or nullptr.
  const FieldFormat* FindField(std::string_view name) const;
  // "prev_comm (char[16]), prev_pid (pid_t), ..." — the non-common fields, for error messages.
  std::string DescribeFields() const;
};

// Parses the text of a format file. `source` names it in errors (e.g. the path).
// Errors: InvalidArgument naming `source`, the line number and what was expected.
StatusOr<EventFormat> ParseFormat(std::string_view text, const std::string& source);

}  // namespace tpe
