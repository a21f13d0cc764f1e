// Pieces of the in-kernel user stack unwinder (issue 36) emitted as BPF instructions: the
// binary search of a file's packed unwind rows (unwind/unwind_rows.h).
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

#include "bpf/assembler.h"

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

}  // namespace tpe::bpf
