// What programs.cc and native_programs.cc share: the series key's place on the stack and the
// instruction sequences both emit. Not a public interface (programs.h is).
#pragma once

#include <cstdint>
#include <vector>

#include "bpf/assembler.h"
#include "bpf/programs.h"

namespace tpe::bpf::internal {

// The series key on the stack: kMaxKeyBytes below the other scratch areas (programs.cc).
inline constexpr int16_t kKeyOff = -80 - static_cast<int16_t>(kMaxKeyBytes);

// *(u64 *)(ptr + off) += val (or += 1) on a per-CPU map value; clobbers R1.
void EmitPerCpuAdd(Assembler* a, Reg ptr, int16_t off, Reg val);
void EmitPerCpuIncrement(Assembler* a, Reg ptr, int16_t off);
// Jumps to `target` when R7 > t (signed or unsigned); clobbers R1.
void EmitJumpAbove(Assembler* a, uint64_t t, bool is_signed, Label target);
// R8 = the value of the key at R10 + kKeyOff, created zeroed from the `zero` map when new; a
// full map counts kDropped (ENOMEM: kNoMemory) and goes to `out`. Clobbers R0-R5.
void EmitFindHistogram(Assembler* a, const MapFds& maps, Label out);

// Native buckets (native_programs.cc, programs.h NativeShape): fills the cell of the value in R7
// at R10 + kKeyOff + `cell_off` (the key zeroed and its labels built by the caller), finds or
// creates its value in R8, adds 1 and R7. Clobbers R0-R5 and R8; to `out` when the map is full.
void EmitObserveNative(Assembler* a, const MapFds& maps, const std::vector<uint64_t>& classic_thresholds,
                       bool is_signed, const NativeShape& n, uint32_t cell_off, Label out);

}  // namespace tpe::bpf::internal
