// The bpf engine's program shapes, generated at run time from the plan's field-offset tables:
// no compiler and no BTF. Each is a BPF_PROG_TYPE_TRACEPOINT program whose context (R1) is the
// tracepoint record the event's tracefs `format` file describes, so every field is a load at a
// constant offset. Sources: Documentation/bpf/standardization/instruction-set.rst,
// include/uapi/linux/bpf.h (helpers), kernel/events/core.c perf_trace_run_bpf_submit() (the
// program runs before the perf event's filter and sample output, on every CPU's hits).
//
// Shapes (all count their runs in stats slot kRuns first, then apply the filter):
//   counter     key → per-CPU hash of u64: += 1; or, adding a field's value, of a wide sum (below)
//               += the value (a negative signed value is a decode error, never subtracted)
//   histogram   key → per-CPU hash of u64[n + 1 + 3 (+ 3)]: n + 1 bucket counts (the last is
//               +Inf), then the wide sum of the raw field values (a signed field's: of those
//               >= 0, then of the magnitudes of the negative ones); the bucket is chosen in the
//               program by an unrolled binary search over integer thresholds (Thresholds below)
//   latency     start: match key → hash of {u64 start ns (bpf_ktime_get_ns), start labels},
//               inserted with BPF_NOEXIST; a pending start is replaced with map_update_elem
//               (BPF_EXIST), never rewritten in place, so an end on another CPU reads either the
//               old start or the new one, whole (htab_map_update_elem swaps elements; a map
//               allocating at run time frees the old one after an RCU grace period, while a
//               preallocated map may reuse it at once: an end that looked the old element up a
//               few instructions before the swap can then observe with another start's time —
//               the counts stay exact, that one value is off);
//               end: look the match key up, delete it, and observe now - start (ns) into a
//               histogram map keyed by start labels ++ end labels only when that delete
//               returned 0 — of two ends racing on two CPUs for one start, exactly one observes
//               (the other counts kNoStart).
//               Entries leave the starts map only whole: by an end's delete (whose result
//               says which end owns the start), or by the user-space sweep of expired starts,
//               which takes them atomically (start_sweep.h). No program writes through a pointer
//               into an element another CPU or the sweep may delete (an element freed into a
//               preallocated map's free list is reused at once: hashtab.c free_htab_elem).
//   gauge       an up/down side or a max/min/last event (GaugeShape below)
//   off-CPU     on sched:sched_switch: the task switching out → hash by thread id of {u64 time,
//               its key (labels ++ stacks)}; the task switching in: its entry taken whole (as a
//               latency end takes a start), now - time (ns) added to its key's series (OffCpuShape)
// Keys: a char-array label is copied up to its first NUL (the bytes after it stay zero, so stale
// tails never split a series); a __data_loc string is read for at most the length its
// __data_loc word gives (high 16 bits; offset in the low 16), as the perf engine's decoder.
// Counts are added with a plain load, add and store (EmitPerCpuAdd says why no run of ours can
// interleave another on the same CPU).
//
// Wide sums: a sum of raw values (a value counter's, a histogram's or latency's, a native
// cell's) is 128 bits wide, three u64 {commit, lo, announce} (collectors/wide_sum.h), so that no
// value — write()'s count of 2^64 - 616 included — wraps it: the program adds a value over 2^63
// as two halves; an add that flips lo's top bit stores announce = T + 1, lo, then commit = T + 1,
// any other stores lo alone. User space, reading a CPU's words mid-add (another CPU copies them
// while the program runs, or the program is preempted between its stores), decodes the sum held
// before or after that store (DecodeWide): a sum never reads lower than it read before. The
// perf engine's WideSum writes in the same order, so both engines hold the same integer.
//
// The record's first 8 bytes (common_type, common_flags, common_preempt_count, common_pid) are
// overwritten with a pt_regs pointer before the program runs (perf_trace_run_bpf_submit), so
// common_pid is taken from bpf_get_current_pid_tgid() and the other common_* fields cannot be
// used (Unimplemented).
//
// A shape with `probe` set is a BPF_PROG_TYPE_KPROBE program for a probe event: its prologue
// materializes the event's record into MapFds::record and R6 points there (probe_record.h).
//
// Pure: emits instructions, loads nothing (loader.h does). Thread-safety: values.
#pragma once

#include <linux/bpf.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/assembler.h"
#include "bpf/probe_record.h"
#include "bpf/string_slot.h"
#include "collectors/buckets.h"
#include "collectors/label_set.h"
#include "collectors/wide_sum.h"
#include "common/status.h"
#include "filter/filter.h"
#include "format/event_format.h"

namespace tpe::bpf {

// Slots of every program's stats map (a per-CPU array of u64).
enum Stat : uint32_t {
  kRuns,          // the program ran (before its filter)
  kDropped,       // a new label set did not fit the map (max_series): series_dropped_total
  kDecodeErrors,  // a counter's value field was negative
  kReplaced,      // latency start: a second start for a key before its end
  kNoStart,       // latency end: no start for the key
  kTableFull,     // latency start: the start map was full (max_inflight)
  kExpired,       // latency end: its start was older than timeout_seconds (not observed)
  kNoMemory,      // a map update failed with ENOMEM (the kernel could not allocate the element):
                  // not a cardinality drop, so counted apart from kDropped and kTableFull
  kBusy,          // probe programs: the run preempted another run of the program on its CPU
                  // and skipped (probe_record.h "The guard")
  kStringFaults,  // probe programs: a string argument could not be read (probe_record.h
                  // UserStringFields: a page not resident, or a bad pointer) and was left empty
  kShortBlocks,   // off-CPU: a block shorter than min_block_ns (not added)
  kUnpaired,      // off-CPU: a task switched out again before its switch-in was seen
  kBlocks,        // off-CPU: a block added to its series
  kStatCount,
};

// The largest key (bytes) a program builds on its 512-byte stack.
inline constexpr uint32_t kMaxKeyBytes = 256;
// kStringSlotBytes: string_slot.h.

// An integer read from the record (or common_pid from the current task).
struct FieldRef {
  std::string name;
  uint32_t offset = 0;
  uint32_t size = 8;  // 1, 2, 4 or 8
  bool is_signed = false;
  bool current_tid = false;  // common_pid: bpf_get_current_pid_tgid() & 0xffffffff
};
// Errors: Unimplemented for common_* fields other than common_pid and for non-integer fields.
StatusOr<FieldRef> IntegerField(const FieldFormat& f);

// Where each label's value lives in the program's key: one 8-byte-aligned slot per label.
struct KeySegment {
  LabelSource source = LabelSource::kField;
  enum class Kind : uint8_t { kInteger, kCharArray, kString, kBytes } kind = Kind::kInteger;
  FieldRef field;  // kInteger: the integer; others: offset/size of the record field
  uint32_t key_offset = 0;
  uint32_t key_size = 0;  // bytes of the slot (multiple of 8)
};
struct KeyLayout {
  std::vector<KeySegment> segments;
  uint32_t size = 0;  // bytes; 0 for no labels (the map then has one entry under an 8-byte zero key)
  uint32_t MapKeySize() const { return size == 0 ? 8 : size; }
};
// The layout of `labels`' values. Errors: Unimplemented naming the label when the program
// cannot build it (a common_* field other than common_pid, a __rel_loc field, a field wider
// than 64 bytes) or the key exceeds kMaxKeyBytes.
StatusOr<KeyLayout> LayoutKey(const LabelSet& labels);
// Converts a program's key to the key LabelSet::BuildKey makes for the same values, so the
// perf engine's renderers (LabelSet::Render) apply unchanged: strings cut at their NUL, comm as
// u8 length + bytes, pid/tid/cpu as u32.
std::string ToLabelKey(const KeyLayout& layout, std::string_view bpf_key);

// The integer thresholds of `buckets` for a value v = raw × scale read as the perf engine reads
// it (signed: int64; unsigned: uint64): bucket i < n holds raw values with
// t[i-1] < raw <= t[i] (signed or unsigned compare), the +Inf bucket those above t[n-1]. Computed
// with Buckets::Index itself, so both engines place every value in the same bucket.
std::vector<uint64_t> Thresholds(const Buckets& buckets, double scale, bool is_signed);
// Whether Thresholds() describes `buckets` for raw × scale: Unimplemented for a scale <= 0
// (the bucket would fall as the raw value rises) and when the smallest raw value already lies
// above the first bound (bounds below 0 for an unsigned field or a latency): the perf engine
// leaves those low buckets empty, ascending thresholds cannot.
Status CheckThresholds(const Buckets& buckets, double scale, bool is_signed);

struct MapFds {
  int stats = -1;         // per-CPU array, kStatCount u64
  int values = -1;        // counter/histogram/latency-end: the (per-CPU) hash of series
  int zero = -1;          // histogram/latency-end: a 1-entry array of a zeroed value (new series)
  int starts = -1;        // latency: the hash of in-flight starts
  int record = -1;        // probe programs: the per-CPU array (1 entry) of the materialized record
  int stacks = -1;        // profiles: the BPF_MAP_TYPE_STACK_TRACE map of stacks
  int epoch = -1;         // max/min/last gauges: a 1-entry array of the open scrape window's number (u64)
  int image_stamps = -1;  // profiles with user stacks: bpf/image_stamps.h's map (tgid -> image start)

  // Up/down gauges (GaugeShape): the hash of changes refused a series, and a 1-entry array (u64)
  // not 0 once a refused change was lost.
  int refused = -1;
  int lost = -1;
};

// The stack part of a profile's key (CounterShape::stacks), after its labels: the process and
// the stack ids bpf_get_stackid() returned for the kernel and user stacks, or why there is none.
struct StackKey {
  uint32_t tgid = 0;      // the process (bpf_get_current_pid_tgid() >> 32)
  int32_t kernel_id = 0;  // a stack id (>= 0), or one of the values below
  int32_t user_id = 0;
  uint32_t reserved = 0;  // zero: the key stays 8-byte aligned
  // With a user stack: when the process's image began (bpf/image_stamps.h: the stamps map's
  // value for tgid; 0 when it has none, or without MapFds::image_stamps), so its frames are named
  // with the mappings of that image. 0 without a user stack.
  uint64_t image_ns = 0;
};
static_assert(sizeof(StackKey) == 24);
// Not a stack id: the part was not asked for (StackKey ids), or bpf_get_stackid()'s errors
// (kernel/bpf/stackmap.c __bpf_get_stackid): no frames (a kernel thread has no user stack),
// another stack already holds the id's bucket (a hash collision: BPF_F_REUSE_STACKID is not
// used, it would rename the old stack's samples), the map has no free element (full).
inline constexpr int32_t kStackNotTaken = -1;  // EPERM: never returned by bpf_get_stackid
inline constexpr int32_t kStackEmpty = -EFAULT;
inline constexpr int32_t kStackCollision = -EEXIST;
inline constexpr int32_t kStackMapFull = -ENOMEM;

// Counters and histograms without labels (key.size == 0) keep their one series in a 1-entry
// per-CPU array (key u32 0; MapFds::values): its entry always exists, so the program neither
// hashes a key nor creates an entry, and nothing is ever dropped. With labels, a per-CPU hash.
struct CounterShape {
  const FilterExpr* filter = nullptr;  // null: none
  const ProbeRecord* probe = nullptr;  // a probe event's program (probe_record.h); null: a tracepoint's
  KeyLayout key;
  std::optional<FieldRef> value;  // add this field's value instead of 1
  // A profile: `key` ends with a StackKey at `key_offset` (after the labels' slots; key.size
  // includes it), filled with bpf_get_stackid(ctx, MapFds::stacks, 0) for the kernel stack and
  // with BPF_F_USER_STACK for the user stack (kStackNotTaken for a part not asked for).
  struct Stacks {
    bool kernel = false, user = false;
    uint32_t key_offset = 0;
  };
  std::optional<Stacks> stacks;
  // A BPF_PROG_TYPE_PERF_EVENT program (a CPU profile's clock; the context is struct
  // bpf_perf_event_data, which bpf_get_stackid() takes): it returns 0, so the kernel writes no
  // sample for the event's overflow (bpf_overflow_handler, kernel/events/core.c); a
  // tracepoint's or probe's returns 1.
  bool perf_event = false;
};
// An off-CPU profile's program on sched:sched_switch (a tracepoint program; OffCpu in the
// header's list):
//   switch-out of prev_pid, the current task (not the idle task, not process `own_tgid` — the
//   exporter —, not an exiting task: prev_state & exiting_mask, whose entry, if any, is
//   deleted so that a thread reusing its id never finds it): its key (labels ++ StackKey:
//   the stacks it switches out with) behind the time (bpf_ktime_get_ns) goes into
//   MapFds::starts under its thread id (u32, zero-padded to 8 bytes), inserted with
//   BPF_NOEXIST; an entry already there (its switch-in was never seen) is replaced and counted
//   kUnpaired (not replaced: deleted); a full map counts kTableFull (ENOMEM: kNoMemory);
//   switch-in of next_pid: its entry is looked up, copied to the stack and deleted, and only
//   when that delete returned 0 is now - time (ns) added to the key's series in MapFds::values
//   (a per-CPU hash of u64 ns, created when new; full: kDropped) — or, under min_block_ns,
//   counted kShortBlocks.
struct OffCpuShape {
  KeyLayout key;  // the labels, then a StackKey at stacks.key_offset (key.size includes it)
  CounterShape::Stacks stacks;
  FieldRef prev_pid, next_pid, prev_state;
  int32_t exiting_mask = 0x10 | 0x20;  // EXIT_DEAD | EXIT_ZOMBIE, as prev_state reports them
  uint32_t own_tgid = 0;
  uint64_t min_block_ns = 0;
};
// Native buckets (collectors/native_buckets.h) in a program: the value's series is not one map
// value of bucket slots but one map entry per "cell", keyed by the labels (padded to 8 bytes)
// then {int32 position (NativeLayout::Position), u32 classic bucket index (0 without classic
// buckets)}, valued {u64 count, u64 sum of the raw values}; user space adds a series' cells up
// into its classic buckets, its native buckets and its sum (valued {u64 count, the wide sum of the
// raw values (+ a signed value's wide sum of negative magnitudes)}: NativeValueBytes). The
// position is found as
// NativeLayout finds it: the magnitude's octave by a 6-step bit search, its mantissa shifted to
// [2^63, 2^64) and searched among the 2^schema thresholds.
struct NativeShape {
  std::vector<uint64_t> mantissa_thresholds;  // NativeLayout::mantissa_thresholds()
  uint64_t zero_max = 0;
  int schema = 0;
  bool negate = false;  // a negative scale: positive raw values are negative buckets
};
// u64 words of a wide sum: that of the values >= 0, and for a signed value that of the negative
// ones' magnitudes after it.
inline uint32_t WideSumWords(bool is_signed) { return (is_signed ? 2 : 1) * kWideWords; }
// Bytes of a native cell's key suffix, and of its value: {u64 count, wide sums}.
inline constexpr uint32_t kNativeCellBytes = 8;
inline uint32_t NativeValueBytes(bool is_signed) { return 8 * (1 + WideSumWords(is_signed)); }

struct HistogramShape {
  const FilterExpr* filter = nullptr;
  const ProbeRecord* probe = nullptr;  // a probe event's program (probe_record.h); null: a tracepoint's
  KeyLayout key;
  FieldRef value;
  std::vector<uint64_t> thresholds;   // Thresholds(); n = size()
  std::optional<NativeShape> native;  // native cells (key.MapKeySize() rounded to 8, then the cell)
};
struct LatencyStartShape {
  const FilterExpr* filter = nullptr;
  const ProbeRecord* probe = nullptr;  // a probe event's program (probe_record.h); null: a tracepoint's
  std::vector<FieldRef> match;         // the match key's fields, 8 bytes each
  KeyLayout labels;                    // start labels, stored beside the start time
};
struct LatencyEndShape {
  const FilterExpr* filter = nullptr;
  const ProbeRecord* probe = nullptr;  // a probe event's program (probe_record.h); null: a tracepoint's
  std::vector<FieldRef> match;
  uint32_t start_label_bytes = 0;     // the start labels' layout size: the key's first bytes
  KeyLayout labels;                   // end labels, after them in the key
  std::vector<uint64_t> thresholds;   // over nanoseconds: Thresholds(buckets, 1e-9, false)
  uint64_t timeout_ns = 0;            // older starts are expired, not observed
  std::optional<NativeShape> native;  // native cells after the labels (rounded to 8 bytes)
  // false (an inflight gauge): the end only deletes its start from the starts map (the gauge is
  // the map's entries counted by start labels in user space; no start: kNoStart); no time is
  // read and nothing observed. An expired start it deletes is not counted kExpired (the gauge
  // left it out already).
  bool observe = true;
  // No labels and classic buckets: the one series is entry 0 of a 1-entry per-CPU array of
  // MapFds::values (as a key-less histogram's), found without hashing a key.
  bool keyless_series = false;
};

// A gauge's program (collectors/gauge.h kinds on the bpf engine), keyed by its labels in a
// per-CPU hash of MapFds::values whose new series are created zeroed from MapFds::zero:
//   kAdd (an up or down side): value[slot] += the field's raw value (two's complement: a
//               negative signed value is added as such), or += 1; slot 0 is up, 1 is down
//               (kUpDownSlots), and user space reads up × scale - down × scale.
//               A change refused a series (the map full: kDropped, or kNoMemory) is kept aside
//               in MapFds::refused, a hash (not per-CPU) of the same keys to {u64 up, u64 down}
//               added to with atomic adds; the program that creates the key's series (either
//               side) takes that entry out (the delete that returns 0 owns it) and adds it to
//               its CPU's value: the series reads what all its label set's changes add up to,
//               and a down whose up was refused cancels it instead of going below 0 (the same
//               rule as collectors/gauge.h). A change the refused map has no room for is lost
//               and sets MapFds::lost; from then on a down of a key with neither a series nor a
//               refused entry is refused (kDropped) without being kept: it may be a lost up's.
//               Not exact: a change refused on one CPU while another CPU creates the key's
//               series (the map full, then not: a sweep made room meanwhile) is lost if added
//               between that program's read and delete of the refused entry (a few
//               instructions), or kept beside the live series (added when the key's series is
//               next created) if it comes after the delete.
//   kMax, kMin, kLast: two records {u64 raw, u64 time (kLast: bpf_ktime_get_ns), u64 window}
//               (kExtremeSlots each: record w & 1 holds window w), each holding the extreme (or
//               latest) raw value of its window: a record of an older window is replaced whole,
//               one of the open window (MapFds::epoch) compared (signed or unsigned as the field
//               is) and replaced when beyond. User space closes window w by raising the epoch to
//               w + 1, waits until every program run that read w has returned (an RCU grace
//               period: the programs run under rcu_read_lock), then reads record w & 1 of every
//               CPU: no run writes it again before window w + 2 opens, at the next scrape.
// Each CPU's value is written by that CPU's runs only, one at a time (EmitPerCpuAdd's note).
struct GaugeShape {
  enum class Op { kAdd, kMax, kMin, kLast } op = Op::kAdd;
  const FilterExpr* filter = nullptr;
  const ProbeRecord* probe = nullptr;  // a probe event's program (probe_record.h); null: a tracepoint's
  KeyLayout key;                       // size 0: one series under an 8-byte zero key
  std::optional<FieldRef> value;       // kAdd: optional (1 without); others: required
  uint32_t slot = 0;                   // kAdd: 0 (up) or 1 (down)
};
inline constexpr uint32_t kUpDownSlots = 2, kExtremeSlots = 3, kExtremeRecords = 2;
// Slots of an extreme gauge's record (the value is kExtremeRecords records).
enum ExtremeSlot : uint32_t { kExtremeValue = 0, kExtremeTime = 1, kExtremeWindow = 2 };

// Whether the shape's program counts its runs in the stats map (kRuns). A key-less shape without
// a filter (a counter that adds 1, or a histogram) does not: each run adds exactly 1 to its one
// count (the counter's value, the sum of the histogram's buckets), so that count is its runs
// (BpfMetric::Programs reads it there): one lookup and add less per hit.
bool CountsRuns(const CounterShape& s);
bool CountsRuns(const HistogramShape& s);

// Each returns the program, or Unimplemented (the filter or a field cannot be compiled; the
// message says which) or Internal.
StatusOr<std::vector<bpf_insn>> EmitCounter(const CounterShape& s, const MapFds& maps);
StatusOr<std::vector<bpf_insn>> EmitHistogram(const HistogramShape& s, const MapFds& maps);
StatusOr<std::vector<bpf_insn>> EmitLatencyStart(const LatencyStartShape& s, const MapFds& maps);
StatusOr<std::vector<bpf_insn>> EmitLatencyEnd(const LatencyEndShape& s, const MapFds& maps);
// Errors: Unimplemented for a key over kMaxKeyBytes, an extreme without a value, a slot over 1.
StatusOr<std::vector<bpf_insn>> EmitGauge(const GaugeShape& s, const MapFds& maps);
// Errors: Unimplemented for a key over kMaxKeyBytes or without room for its StackKey, and for
// common_pid as one of the switch's fields.
StatusOr<std::vector<bpf_insn>> EmitOffCpu(const OffCpuShape& s, const MapFds& maps);

// Bytes of a histogram map value with `thresholds`: n + 1 bucket counts (u64), then the wide sums.
inline uint32_t HistogramValueBytes(size_t thresholds, bool is_signed) {
  return static_cast<uint32_t>((thresholds + 1 + WideSumWords(is_signed)) * 8);
}
// Bytes of a counter's map value: a u64 count, or the wide sum of a value field.
inline uint32_t CounterValueBytes(bool has_value) { return has_value ? 8 * kWideWords : 8; }

}  // namespace tpe::bpf
