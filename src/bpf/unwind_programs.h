// Pieces of the in-kernel user stack unwinder (issue 36) emitted as BPF instructions: the
// search of a process's executable mappings for a pc (which file, where in it, which rows), and
// the binary search of that file's packed unwind rows (unwind/unwind_rows.h).
//
// Every file's rows lie in one BPF_MAP_TYPE_ARRAY of shards: element k holds rows
// [k * kRowsPerShard, (k + 1) * kRowsPerShard) of all files laid end to end (value_size
// kRowsPerShard * 8 bytes); a file's rows are the run [first, first + count).
//
// The search is branch-free: kRowSearchSteps halvings, each choosing the half with arithmetic
// (the sign of target - row offset) rather than a jump, so the verifier walks one path of a few
// hundred instructions however many rows there are, on every kernel of the matrix (5.10 has no
// bpf_loop); a run of at most 2^kRowSearchSteps rows is searched exactly. Its only branches go to
// the caller's `fail` label (a shard lookup that returned NULL) and past the search when the
// target lies before the file's first row.
//
// Pure: emits instructions. Thread-safety: values.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "bpf/assembler.h"
#include "common/status.h"

namespace tpe::bpf {

// Rows per array element: 32 KiB values (a power of two: the row index within a shard is a
// mask, which the verifier bounds).
inline constexpr uint32_t kRowsPerShard = 4096;
inline constexpr uint32_t kShardBytes = kRowsPerShard * 8;
// Halvings: files of up to 2^21 rows (2,097,152; python3.11 has 64,575).
inline constexpr int kRowSearchSteps = 21;
inline constexpr uint32_t kMaxRowsPerFile = uint32_t{1} << kRowSearchSteps;

// Emits the search. On entry R6 = first (the file's first row, a global index), R7 = count (1
// to kMaxRowsPerFile), R8 = the target file offset (below 2^32). On exit R6 = the packed rule
// (PackedRow::rule) of the last row at or before the target, or CfaRule::kNoTable (3) when the
// target lies before the file's first row; R7, R9 and R0-R5 are clobbered. Uses 16 bytes of
// stack at R10 + `stack_off` (8-aligned). Jumps to `fail` when a shard lookup in the map
// `rows_fd` finds no element (a row index past the map).
void EmitRowSearch(Assembler* a, int rows_fd, int16_t stack_off, Label fail);

// A process's executable mappings as the unwinder reads them: one value of a map keyed by the
// process (its tgid), a u32 count at byte 0, then up to kMaxUnwindMappings UnwindMappings from
// byte 8, sorted by start, not overlapping.
inline constexpr uint32_t kMaxUnwindMappings = 256;  // a power of two: indices are masks
struct UnwindMapping {
  uint64_t start = 0;      // first address
  uint64_t end = 0;        // end address, exclusive
  uint64_t bias = 0;       // start less the file offset it maps: file offset = pc - bias
  uint32_t first_row = 0;  // the file's rows in the rows map (EmitRowSearch's first, count)
  uint32_t row_count = 0;  // 0: the file has no table (its frames are walked by frame pointer)
  bool operator==(const UnwindMapping&) const = default;
};
static_assert(sizeof(UnwindMapping) == 32);
inline constexpr uint32_t kUnwindMappingsBytes = 8 + kMaxUnwindMappings * sizeof(UnwindMapping);

// The map value for `mappings` (any order): sorted, the count first. Errors: InvalidArgument when
// there are more than kMaxUnwindMappings, one is empty (end <= start), two overlap, or an address
// is not a user address (below 2^47).
StatusOr<std::string> PackUnwindMappings(std::span<const UnwindMapping> mappings);
// The mapping of `value` (PackUnwindMappings's) holding `pc`, or null: what EmitMappingSearch finds.
const UnwindMapping* FindUnwindMapping(const std::string& value, uint64_t pc);

// Emits the search of a process's mappings, branch-free over up to kMaxUnwindMappings entries
// (8 halvings). On entry R9 = a pointer to the process's map value (PackUnwindMappings's layout,
// kUnwindMappingsBytes bytes), R8 = the pc. On exit, when a mapping holds the pc: R8 = its file
// offset, R6 = first_row, R7 = row_count (EmitRowSearch's inputs); R9 kept; R0-R5 clobbered.
// Jumps to `unknown` when none does (no mapping, the pc before the first or between two).
void EmitMappingSearch(Assembler* a, Label unknown);

// Emits one frame's step: the caller's rip, rsp and rbp from this frame's, by the packed rule in
// R6 (PackedRow::rule, or CfaRule::kNoTable: the frame pointer's rule, CFA = rbp + 16 with the
// caller's rbp at CFA - 16). The registers are three u64 at R10 + regs_off (rip, rsp, rbp),
// updated in place; the stack is read with bpf_probe_read_user into the u64 at R10 + tmp_off.
// The return address is at CFA - 8 (unwind_table.h). Jumps to `stop` on a kStop rule, a read
// that faults, a CFA not above rsp (no progress: a loop or garbage) or a return address of 0 (the
// outermost frame); the registers are then unchanged. R0-R5, R6, R7 clobbered.
void EmitUnwindStep(Assembler* a, int16_t regs_off, int16_t tmp_off, Label stop);

}  // namespace tpe::bpf
