// What the program emitters share (programs.cc: counters, histograms and the common pieces;
// latency_programs.cc, off_cpu_programs.cc, native_programs.cc, gauge_programs.cc): the series
// key's place on the stack and the instruction sequences they emit. Not a public interface
// (programs.h is).
#pragma once

#include <cstdint>
#include <vector>

#include "bpf/assembler.h"
#include "bpf/programs.h"

namespace tpe::bpf::internal {

// The series key on the stack: kMaxKeyBytes below the other scratch areas (programs.cc).
inline constexpr int16_t kKeyOff = -80 - static_cast<int16_t>(kMaxKeyBytes);
// A u32 array index (stats, zero and epoch lookups) on the stack.
inline constexpr int16_t kIndexOff = -8;

inline uint32_t Align8(uint32_t n) { return (n + 7) & ~7u; }
// A latency's (or an off-CPU block's) match key on the stack, and the start value stored under
// it: u64 time, then the start labels at kKeyOff.
inline constexpr int16_t kMatchOff = -80;
inline constexpr int16_t kStartValOff = kKeyOff - 8;

// stats[slot] += 1. Clobbers R0-R5.
void EmitStat(Assembler* a, const MapFds& maps, Stat slot);
// dst = the integer `f` (sign- or zero-extended to 64 bits). Clobbers R0-R5 for common_pid.
void EmitLoadInt(Assembler* a, const FieldRef& f, Reg dst);
// Fills the label slots of `layout` at R10 + base (already zeroed). Clobbers R0-R5.
void EmitKey(Assembler* a, const KeyLayout& layout, int16_t base);
// The prologue of every shape: R6 = ctx (a probe's: its materialized record), the run counted
// (kRuns) when `count_runs`, the filter applied (to `filtered` when it rejects).
Status EmitPrologue(Assembler* a, const MapFds& maps, const ProbeRecord* probe, const FilterExpr* filter,
                    Label filtered, bool count_runs = true);
// Returns 1 (0 for a perf_event program: CounterShape::perf_event), releasing a probe's record.
void EmitReturn(Assembler* a, const ProbeRecord* probe, bool perf_event = false);
// r = R10 + off.
void StackPtr(Assembler* a, Reg r, int16_t off);

// *(u64 *)(ptr + off) += val (or += 1) on a per-CPU map value; clobbers R1.
void EmitPerCpuAdd(Assembler* a, Reg ptr, int16_t off, Reg val);
void EmitPerCpuIncrement(Assembler* a, Reg ptr, int16_t off);
// Adds `val` to the wide sum at ptr + off (programs.h "Wide sums"; per-CPU, as EmitPerCpuAdd):
// unsigned, any u64; `is_signed`, a negative value's magnitude to the second wide sum after it.
// `val` at most 2^63 (unsigned) needs no halving: `small` says so. Clobbers R1-R3 and `val`;
// `ptr` and `val` are not R1-R3.
void EmitWideAdd(Assembler* a, Reg ptr, int16_t off, Reg val, bool is_signed, bool small = false);
// Jumps to `target` when R7 > t (signed or unsigned); clobbers R1.
void EmitJumpAbove(Assembler* a, uint64_t t, bool is_signed, Label target);
// map_update_elem with its result in R0 sign-extended from 32 bits (the helper returned int
// before Linux 6.3: programs.cc). Clobbers R0-R5.
void CallMapUpdate(Assembler* a);
// dst = the value of a key-less metric: entry 0 of its 1-entry per-CPU array (programs.h), or
// to `out` on the null the verifier makes us check for. Clobbers R0-R5.
void EmitFindKeyless(Assembler* a, const MapFds& maps, Reg dst, Label out);
// Observes R7 into the histogram value at R8 (bucket by `t`, then the wide sum; `small`: R7 is
// at most 2^63, as a latency's ns). Clobbers R1-R3 and R7.
void EmitObserve(Assembler* a, const std::vector<uint64_t>& t, bool is_signed, bool small = false);
// Fills a profile's StackKey at R10 + `off` (CounterShape::stacks) from the ctx in R9. Clobbers
// R0-R5.
void EmitStackKey(Assembler* a, const CounterShape::Stacks& st, const MapFds& maps, int16_t off);
// values[key at R10 + kKeyOff] += R7, the series created when new: on to `added`; full: kDropped
// and to `out`; ENOMEM: kNoMemory, falling through (programs.cc). Clobbers R0-R5 (R7 when `wide`).
void EmitAddToSeries(Assembler* a, const MapFds& maps, Label out, Label added, bool wide = false);
// map_update_elem(starts, the match key at kMatchOff, the start value at kStartValOff, `flags`);
// R0 = its result (latency_programs.cc).
void EmitStartUpdate(Assembler* a, const MapFds& maps, int32_t flags);
// R8 = the value of the key at R10 + kKeyOff, created zeroed from the `zero` map when new; a
// full map counts kDropped (ENOMEM: kNoMemory) and goes to `out`. Clobbers R0-R5.
void EmitFindHistogram(Assembler* a, const MapFds& maps, Label out);

// Native buckets (native_programs.cc, programs.h NativeShape): fills the cell of the value in R7
// at R10 + kKeyOff + `cell_off` (the key zeroed and its labels built by the caller), finds or
// creates its value in R8, adds 1 to its count and R7 to its wide sum. Clobbers R0-R5, R7 and R8;
// to `out` when the map is full. `small`: R7 is at most 2^63 (EmitWideAdd).
void EmitObserveNative(Assembler* a, const MapFds& maps, const std::vector<uint64_t>& classic_thresholds,
                       bool is_signed, const NativeShape& n, uint32_t cell_off, Label out, bool small = false);

}  // namespace tpe::bpf::internal
