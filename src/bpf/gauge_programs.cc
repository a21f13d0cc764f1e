// Gauges in a program (programs.h GaugeShape): an up/down side adds to its slot; a max, min or
// last gauge keeps the extreme (or latest) value of the open scrape window.
#include <cerrno>

#include "bpf/programs_internal.h"

namespace tpe::bpf {
using namespace internal;  // NOLINT(google-build-using-namespace): the programs' shared helpers
namespace {

// A refused entry's {up, down} on the stack (below the key: programs.cc's latency start value
// uses kKeyOff - 8 only in latency programs).
constexpr int16_t kRefusedOff = kKeyOff - 16;

// map_update_elem, then R0 sign-extended from its low 32 bits (the errno of a map op returning
// int before Linux 6.4: programs.cc CallMapUpdate).
void CallMapUpdate(Assembler* a) {
  a->Call(BPF_FUNC_map_update_elem);
  a->Alu(BPF_LSH, R0, 32);
  a->Alu(BPF_ARSH, R0, 32);
}

// R0 = lookup(map, the key at kKeyOff) (or of index 0 at kIndexOff for an array: `index0`).
void Lookup(Assembler* a, int map, bool index0 = false) {
  if (index0) a->StoreImm(4, R10, kIndexOff, 0);
  a->LoadMapFd(R1, map);
  StackPtr(a, R2, index0 ? kIndexOff : kKeyOff);
  a->Call(BPF_FUNC_map_lookup_elem);
}

// An up/down side (GaugeShape kAdd): R7 added to slot `slot` of the key's series, the series
// created with the key's refused changes, or R7 kept aside in the refused map (programs.h).
void EmitUpDown(Assembler* a, const MapFds& maps, uint32_t slot, Label out) {
  const int16_t at = static_cast<int16_t>(8 * slot);
  Label have = a->NewLabel(), create = a->NewLabel(), created = a->NewLabel(), again = a->NewLabel(),
        nomem = a->NewLabel(), gone = a->NewLabel(), keep = a->NewLabel(), fresh = a->NewLabel(), lost = a->NewLabel();
  Lookup(a, maps.values);
  a->MovReg(R8, R0);
  a->Jump(BPF_JNE, R8, 0, have);
  // No series: R9 = the key's refused changes (or null).
  Lookup(a, maps.refused);
  a->MovReg(R9, R0);
  if (slot == 1) {  // a down with nothing kept aside, once a change was lost: refused, not kept
    a->Jump(BPF_JNE, R9, 0, create);
    Lookup(a, maps.lost, true);
    a->Jump(BPF_JEQ, R0, 0, create);
    a->Load(8, R1, R0, 0);
    a->Jump(BPF_JEQ, R1, 0, create);
    EmitStat(a, maps, kDropped);
    a->Goto(out);
  }
  a->Bind(create);
  Lookup(a, maps.zero, true);
  a->Jump(BPF_JEQ, R0, 0, out);
  a->MovReg(R3, R0);
  a->LoadMapFd(R1, maps.values);
  StackPtr(a, R2, kKeyOff);
  a->Mov(R4, BPF_NOEXIST);
  CallMapUpdate(a);
  a->Jump(BPF_JEQ, R0, 0, created);
  a->Jump(BPF_JEQ, R0, -EEXIST, again);  // another CPU created it first (and takes the refused entry)
  a->Jump(BPF_JEQ, R0, -ENOMEM, nomem);
  EmitStat(a, maps, kDropped);  // the map is full
  a->Goto(keep);
  a->Bind(nomem);
  EmitStat(a, maps, kNoMemory);
  a->Goto(keep);
  a->Bind(again);
  Lookup(a, maps.values);
  a->MovReg(R8, R0);
  a->Jump(BPF_JNE, R8, 0, have);
  a->Goto(gone);
  a->Bind(created);
  Lookup(a, maps.values);
  a->MovReg(R8, R0);
  a->Jump(BPF_JEQ, R8, 0, gone);
  a->Jump(BPF_JEQ, R9, 0, have);
  // The new series starts at the refused changes: read, then taken out (the delete that
  // returns 0 owns them), then added to this CPU's value.
  a->Load(8, R1, R9, 0);
  a->Store(8, R10, kRefusedOff, R1);
  a->Load(8, R1, R9, 8);
  a->Store(8, R10, kRefusedOff + 8, R1);
  a->LoadMapFd(R1, maps.refused);
  StackPtr(a, R2, kKeyOff);
  a->Call(BPF_FUNC_map_delete_elem);
  a->Jump(BPF_JNE, R0, 0, have);
  a->Load(8, R2, R10, kRefusedOff);
  EmitPerCpuAdd(a, R8, 0, R2);
  a->Load(8, R2, R10, kRefusedOff + 8);
  EmitPerCpuAdd(a, R8, 8, R2);
  a->Goto(have);
  a->Bind(gone);  // a sweep took the series out between the update and the lookup
  EmitStat(a, maps, kDropped);
  // Kept aside: refused[key][slot] += R7 (an atomic add: other CPUs add to it too).
  a->Bind(keep);
  Lookup(a, maps.refused);
  a->Jump(BPF_JEQ, R0, 0, fresh);
  a->AtomicAdd64(R0, at, R7);
  a->Goto(out);
  a->Bind(fresh);
  a->ZeroStack(kRefusedOff, 8 * kUpDownSlots);
  a->Store(8, R10, static_cast<int16_t>(kRefusedOff + at), R7);
  a->LoadMapFd(R1, maps.refused);
  StackPtr(a, R2, kKeyOff);
  StackPtr(a, R3, kRefusedOff);
  a->Mov(R4, BPF_NOEXIST);
  CallMapUpdate(a);
  a->Jump(BPF_JEQ, R0, 0, out);
  a->Jump(BPF_JNE, R0, -EEXIST, lost);
  Lookup(a, maps.refused);  // another CPU made the entry first
  a->Jump(BPF_JEQ, R0, 0, lost);
  a->AtomicAdd64(R0, at, R7);
  a->Goto(out);
  a->Bind(lost);  // no room to keep it: lost, and downs without a series are refused from now on
  Lookup(a, maps.lost, true);
  a->Jump(BPF_JEQ, R0, 0, out);
  a->Mov(R1, 1);
  a->Store(8, R0, 0, R1);
  a->Goto(out);
  a->Bind(have);
  EmitPerCpuAdd(a, R8, at, R7);
}

}  // namespace

StatusOr<std::vector<bpf_insn>> EmitGauge(const GaugeShape& s, const MapFds& maps) {
  using Op = GaugeShape::Op;
  if (s.key.size > kMaxKeyBytes) {
    return Unimplemented("labels of " + std::to_string(s.key.size) + " key bytes (the bpf engine takes at most " +
                         std::to_string(kMaxKeyBytes) + ")");
  }
  if (s.op != Op::kAdd && !s.value) return Unimplemented("a max, min or last gauge without a value field");
  if (s.op == Op::kAdd && s.slot >= kUpDownSlots) return Unimplemented("an up/down slot over 1");
  if (s.op == Op::kAdd && (maps.refused < 0 || maps.lost < 0)) {
    return Internal("an up/down side without its refused and lost maps");
  }
  Assembler a;
  Label filtered = a.NewLabel(), out = a.NewLabel();
  TPE_RETURN_IF_ERROR(EmitPrologue(&a, maps, s.probe, s.filter, filtered));
  if (s.value) {
    EmitLoadInt(&a, *s.value, R7);
  } else {
    a.Mov(R7, 1);
  }
  a.ZeroStack(kKeyOff, s.key.MapKeySize());
  EmitKey(&a, s.key, kKeyOff);
  if (s.op == Op::kAdd) {
    EmitUpDown(&a, maps, s.slot, out);
  } else {
    EmitFindHistogram(&a, maps, out);  // R8: this CPU's value of the series
    // R9 = the open window; its record is R9 & 1 (the other one holds the window a scrape may be
    // reading): one instruction sequence per record, each at constant offsets.
    a.StoreImm(4, R10, kIndexOff, 0);
    a.LoadMapFd(R1, maps.epoch);
    StackPtr(&a, R2, kIndexOff);
    a.Call(BPF_FUNC_map_lookup_elem);
    a.Jump(BPF_JEQ, R0, 0, out);
    a.Load(8, R9, R0, 0);
    Label odd = a.NewLabel();
    a.MovReg(R1, R9);
    a.Alu(BPF_AND, R1, 1);
    a.Jump(BPF_JNE, R1, 0, odd);
    for (uint32_t record = 0; record < kExtremeRecords; ++record) {
      if (record == 1) a.Bind(odd);
      const int16_t base = static_cast<int16_t>(8 * kExtremeSlots * record);
      const int16_t value = base + 8 * kExtremeValue, time = base + 8 * kExtremeTime,
                    window = base + 8 * kExtremeWindow;
      Label fresh = a.NewLabel(), store = a.NewLabel();
      a.Load(8, R1, R8, window);
      a.JumpReg(BPF_JNE, R1, R9, fresh);
      if (s.op != Op::kLast) {  // the same window: keep the value unless this one is beyond it
        const bool is_signed = s.value->is_signed;
        a.Load(8, R2, R8, value);
        if (s.op == Op::kMax) {
          a.JumpReg(is_signed ? BPF_JSLE : BPF_JLE, R7, R2, out);
        } else {
          a.JumpReg(is_signed ? BPF_JSGE : BPF_JGE, R7, R2, out);
        }
      }
      a.Goto(store);
      a.Bind(fresh);
      a.Store(8, R8, window, R9);
      a.Bind(store);
      if (s.op == Op::kLast) {
        a.Call(BPF_FUNC_ktime_get_ns);
        a.Store(8, R8, time, R0);
      }
      a.Store(8, R8, value, R7);
      a.Goto(out);
    }
  }
  a.Bind(out);
  a.Bind(filtered);
  EmitReturn(&a, s.probe);
  return a.Finish();
}

}  // namespace tpe::bpf
