// The kernel's event filter grammar, parsed into a small tree against one event's format, plus
// a reference evaluator that decides a raw tracepoint record the way the kernel would.
//
// Source: Documentation/trace/events.rst §5 "Event filtering" and kernel/trace/
// trace_events_filter.c (predicate_parse, parse_pred, filter_parse_regex, the filter_pred_*
// functions) and lib/glob.c (glob_match), as of Linux 6.x. Filters look like
//
//   prev_pid == 1 || prev_comm ~ "kworker/*" && !(prev_state & 0x1)
//   filename.ustring ~ "/etc/*"          (syscalls:sys_enter_openat)
//   CPU & CPUS{0-3,8} && common_pid != 0
//
// Grammar (what Linux 6.18 accepts, checked on a live kernel; see filter_unittest.cc):
//   expr       := or
//   or         := and ( "||" and )*            "&&" binds tighter than "||"
//   and        := unary ( "&&" unary )*
//   unary      := "!" unary | "(" or ")" | predicate
//   predicate  := field [".ustring"] op value
//   field      := [A-Za-z0-9_]+ : an event field (common_* included), else CPU, cpu, common_cpu
//                 (the CPU the event fired on) or COMM, comm (the current task's name). An event
//                 field named comm or cpu wins over the generic one (sched_waking's comm).
//   op         := "==" | "!=" | "<" | "<=" | ">" | ">=" | "&" | "~"
//   value      := integer | '...' | "..." | CPUS{list}
//   integer    := -?[0-9A-Za-z]+ read like kstrtoll (signed fields) or kstrtoull (unsigned):
//                 decimal, 0x hex or 0 octal; at most 23 characters; negative only for signed
//   string     := quoted by ' or ", no escapes, at most 255 bytes
//   list       := cpulist as a,b-c (the kernel also takes "all", "N" and strides; not supported)
// Whitespace (isspace) may separate every token except inside a field name, a number, and
// between "CPUS" and "{".
//
// Semantics, as the kernel evaluates them:
//   * integers: the operand is cast to the field's size and signedness first (`int x < 4294967296`
//     is `x < 0`); < <= > >= compare signed or unsigned as the format's signed: says; `&` is
//     (field & value) != 0. Fixed arrays of 1, 2, 4 or 8 bytes compare as one unsigned integer.
//   * strings (char[N], __data_loc/__rel_loc char[], char *, COMM): == and != compare whole
//     strings; ~ takes a glob. A leading '!' in a ~ pattern inverts it. Patterns "x*" (prefix),
//     "*x" (suffix), "*x*" (substring) use fast matchers, anything else with * ? [ ] or \ uses
//     glob_match ([!a-z] complements; \ escapes). Kernel quirks kept on purpose, see
//     FilterWarnings(): a pattern that starts with a digit is compared literally; on char[N]
//     and COMM a "*x" suffix is matched against the end of the whole N-byte array and "*x*"
//     also sees bytes after the terminating NUL.
//   * char * fields are read through the pointer: kernel memory by default, user memory with
//     .ustring (system call arguments need .ustring); an unreadable string makes the predicate
//     false whatever the operator.
//   * CPUS{list}: with CPU, an integer field, or a __data_loc cpumask_t field; ops == != &.
//     `&` means "in the set" (cpumask fields: the masks intersect); == and != compare sets.
//
// Stricter than the kernel, with a message saying why (these are almost certainly mistakes):
// a trailing "&&"/"||" (the kernel ignores it), `cpu & N` (accepted by the kernel, never
// matches: verified), numeric comparisons of fields the kernel cannot compare as numbers
// (arrays of other sizes, opaque bytes, other __data_loc arrays), numbers against cpumask
// fields, nesting deeper than kMaxFilterDepth, ".function" (needs the kernel's symbol table),
// STACKTRACE (a hist-trigger key), CPUS{all}, CPUS{N} and strided cpulists (machine-dependent).
//
// Pure; no exceptions. Thread-safety: values; EvaluateFilter may run concurrently on a shared
// const FilterExpr.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/byte_reader.h"
#include "common/status.h"
#include "format/event_format.h"

namespace tpe {

// The kernel takes filters of at most PAGE_SIZE - 1 bytes (tracefs write, PERF_EVENT_IOC_SET_FILTER).
inline constexpr size_t kMaxFilterBytes = 4095;
// Parentheses and '!' nested deeper than this are refused (the kernel has no limit of its own);
// "!(" counts once.
inline constexpr int kMaxFilterDepth = 100;
// MAX_FILTER_STR_VAL - 1: the longest quoted string.
inline constexpr size_t kMaxFilterStringBytes = 255;
// Largest CPU number accepted in CPUS{...} (NR_CPUS on x86_64 is at most 8192; the kernel
// itself rejects CPUs >= nr_cpu_ids of the running machine).
inline constexpr uint32_t kMaxFilterCpus = 8192;
// TASK_COMM_LEN: COMM is matched as a 16-byte NUL-padded array.
inline constexpr size_t kFilterCommBytes = 16;

enum class FilterOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kBitAnd, kGlob };
// "==", "!=", "<", "<=", ">", ">=", "&", "~".
const char* FilterOpName(FilterOp op);

// What the left-hand side of a predicate reads.
enum class FilterFieldKind : uint8_t {
  kInteger,        // integer or pointer field, or a 1/2/4/8-byte array: `size` bytes at `offset`
  kCharArray,      // char name[N]: N bytes at `offset`
  kDataLocString,  // __data_loc char[]: u32 at `offset` = len << 16 | offset from record start
  kRelLocString,   // __rel_loc char[]: same, offset from the end of the u32
  kStringPointer,  // char * / const char *: a pointer (`size` bytes) to a NUL-terminated string
  kCpumask,        // __data_loc cpumask_t: a CPU bitmap (little-endian words) in the record
  kCpu,            // CPU, cpu, common_cpu: the CPU the event fired on (not in the record)
  kComm,           // COMM, comm: the current task's name (not in the record)
};
const char* FilterFieldKindName(FilterFieldKind kind);

struct FilterField {
  std::string name;  // as written: "prev_pid", "COMM"
  FilterFieldKind kind = FilterFieldKind::kInteger;
  uint32_t offset = 0;       // record fields: bytes from the start of the raw record
  uint32_t size = 0;         // bytes (kInteger: 1, 2, 4 or 8; kCpu: 4)
  bool is_signed = false;    // kInteger and kCpu: compare signed
  bool user_string = false;  // written with ".ustring": a kStringPointer points into user memory
};

// How a string operand is matched (kernel enum regex_type).
enum class StringMatch : uint8_t {
  kFull,       // == and !=, and ~ patterns without wildcards (or starting with a digit)
  kPrefix,     // ~ "abc*"
  kSuffix,     // ~ "*abc"
  kSubstring,  // ~ "*abc*"
  kGlob,       // ~ with * elsewhere, ?, [...] or \: lib/glob.c
};

enum class FilterOperand : uint8_t { kInteger, kString, kCpus };

struct FilterPredicate {
  FilterField field;
  FilterOp op = FilterOp::kEq;
  FilterOperand operand = FilterOperand::kInteger;
  // kInteger: the literal's value as a 64-bit two's complement (before the cast to the field).
  uint64_t value = 0;
  // kString: the string between the quotes, as written (for ~ including '!' and wildcards).
  std::string text;
  // kString: what the matcher compares with (wildcards and a leading '!' removed for the fast
  // matchers; the whole pattern minus '!' for kGlob), how, and whether the result is inverted
  // (!= or a leading '!' in a ~ pattern).
  std::string pattern;
  StringMatch match = StringMatch::kFull;
  bool invert = false;
  // kCpus: inclusive [first, last] ranges, sorted, disjoint and not adjacent.
  std::vector<std::pair<uint32_t, uint32_t>> cpus;
  int column = 0;  // 1-based column of the field name in the filter text
};

// A filter: a small tagged tree. kAnd/kOr have two or more children (chains are flattened),
// kNot one, kCompare none (it holds `pred`).
struct FilterExpr {
  enum class Kind : uint8_t { kAnd, kOr, kNot, kCompare };
  Kind kind = Kind::kCompare;
  std::vector<FilterExpr> children;
  FilterPredicate pred;
};

// Parses `text` against `format` (fields, offsets, sizes, signedness come from it).
// Errors: InvalidArgument with the 1-based column and what would be valid, e.g.
//   unknown field "nope" at column 1; fields of sched_switch: prev_comm, prev_pid, ..., CPU, COMM
//   operator ~ at column 10 needs a string field; prev_pid is an integer (pid_t)
//   expected a number at column 13 for prev_pid, found "x"
// Never throws. Pure.
StatusOr<FilterExpr> ParseFilter(std::string_view text, const EventFormat& format);

// OK when every CPU in the CPUS{...} lists of `expr` is below `nr_cpu_ids` (the CPUs possible on
// the machine, /sys/devices/system/cpu/possible). The kernel's filter parser refuses such a list
// ("Invalid cpulist": cpulist_parse() in kernel/trace/trace_events_filter.c parse_pred); this
// gives the same verdict where the kernel does not parse the filter (the bpf engine).
// Errors: InvalidArgument naming the CPU, its column and the machine's CPUs. Pure.
Status CheckFilterCpus(const FilterExpr& expr, uint32_t nr_cpu_ids);

// True when `expr` has a CPUS{...} operand: a kernel filter feature of Linux 6.6 and later
// (filtering CPU, scalar and cpumask fields by a cpumask); 6.1 refuses such filters. Pure.
bool UsesCpus(const FilterExpr& expr);

// What EvaluateFilter needs beyond the record: the sample's CPU and task name.
struct FilterContext {
  uint32_t cpu = 0;
  std::string_view comm;    // current task's name; bytes past 15 are ignored (TASK_COMM_LEN)
  uint32_t nr_cpu_ids = 0;  // CPUs possible on the machine; 0 = unknown (kMaxFilterCpus)
  // Reads the string a char * field points to (user memory when `user`). Unset, or nullopt:
  // unreadable, and the predicate is false (the kernel's fault path). Strings are cut at 1023
  // bytes like the kernel's per-CPU copy buffer.
  std::function<std::optional<std::string>(uint64_t address, bool user)> read_string;
};

// Decides `record` (a raw tracepoint payload laid out as the format says; trailing padding is
// fine) the way the kernel's filter would. A predicate whose field lies outside `record` is
// false whatever its operator (the kernel never sees such records). Pure, no allocation except
// through ctx.read_string; thread-safe.
bool EvaluateFilter(const FilterExpr& expr, Bytes record, const FilterContext& ctx);

// The canonical text: single spaces around operators, minimal parentheses, "!(...)" for every
// negation, integers in decimal (hex for &), strings in "..." (or '...' when they contain "),
// CPUS{a-b,c}. ParseFilter(FilterToString(e)) gives back an equal tree. Pure.
std::string FilterToString(const FilterExpr& expr);

// Predicates that the kernel accepts but that probably do not mean what they say (the quirks
// listed above), one sentence each naming the predicate and the fix; empty when none. Pure.
std::vector<std::string> FilterWarnings(const FilterExpr& expr, const EventFormat& format);

}  // namespace tpe
