// Gauges in a program (programs.h GaugeShape): an up/down side adds to its slot; a max, min or
// last gauge keeps the extreme (or latest) value of the open scrape window.
#include "bpf/programs_internal.h"

namespace tpe::bpf {
using namespace internal;  // NOLINT(google-build-using-namespace): the programs' shared helpers

StatusOr<std::vector<bpf_insn>> EmitGauge(const GaugeShape& s, const MapFds& maps) {
  using Op = GaugeShape::Op;
  if (s.key.size > kMaxKeyBytes) {
    return Unimplemented("labels of " + std::to_string(s.key.size) + " key bytes (the bpf engine takes at most " +
                         std::to_string(kMaxKeyBytes) + ")");
  }
  if (s.op != Op::kAdd && !s.value) return Unimplemented("a max, min or last gauge without a value field");
  if (s.op == Op::kAdd && s.slot >= kUpDownSlots) return Unimplemented("an up/down slot over 1");
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
  EmitFindHistogram(&a, maps, out);  // R8: this CPU's value of the series
  if (s.op == Op::kAdd) {
    EmitPerCpuAdd(&a, R8, static_cast<int16_t>(8 * s.slot), R7);
  } else {
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
