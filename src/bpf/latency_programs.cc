// The latency shapes' programs (programs.h LatencyStartShape, LatencyEndShape): a start records
// its time (and start labels) under the match key in the starts map; an end looks it up, takes
// it and observes the difference.
#include <string>
#include <vector>

#include "bpf/programs.h"
#include "bpf/programs_internal.h"

namespace tpe::bpf {
using namespace internal;  // NOLINT(google-build-using-namespace): the emitters' shared pieces
namespace {

constexpr size_t kMaxMatchFields = 4;  // the match key at kMatchOff: up to 4 fields of 8 bytes

void EmitMatchKey(Assembler* a, const std::vector<FieldRef>& match) {
  a->ZeroStack(kMatchOff, 8 * kMaxMatchFields);
  for (size_t i = 0; i < match.size(); ++i) {
    EmitLoadInt(a, match[i], R1);
    a->Store(8, R10, static_cast<int16_t>(kMatchOff + 8 * static_cast<int>(i)), R1);
  }
}

Status CheckMatch(const std::vector<FieldRef>& match) {
  if (match.empty() || match.size() > kMaxMatchFields) {
    return Unimplemented("a latency key of " + std::to_string(match.size()) + " fields (the bpf engine takes 1 to " +
                         std::to_string(kMaxMatchFields) + ")");
  }
  return Status::Ok();
}

// The beginning of the end shape: the prologue, R9 = now (ns), the match key, and its start
// looked up: to `found` with R0 = the start's value, else on (no start).
Status EmitEndLookup(Assembler* a, const MapFds& maps, const LatencyEndShape& s, Label filtered, Label found) {
  TPE_RETURN_IF_ERROR(EmitPrologue(a, maps, s.probe, s.filter, filtered));
  a->Call(BPF_FUNC_ktime_get_ns);
  a->MovReg(R9, R0);
  EmitMatchKey(a, s.match);
  a->LoadMapFd(R1, maps.starts);
  StackPtr(a, R2, kMatchOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  a->Jump(BPF_JNE, R0, 0, found);
  return Status::Ok();
}

// The end of the start shape: the labels `nomem` and `full` count kNoMemory and kTableFull,
// then `out` and `filtered` return (releasing a probe program's record).
StatusOr<std::vector<bpf_insn>> FinishStart(Assembler* a, const MapFds& maps, const ProbeRecord* probe, Label nomem,
                                            Label full, Label out, Label filtered) {
  a->Bind(nomem);
  EmitStat(a, maps, kNoMemory);
  a->Goto(out);
  a->Bind(full);
  EmitStat(a, maps, kTableFull);
  a->Bind(out);
  a->Bind(filtered);
  EmitReturn(a, probe);
  return a->Finish();
}

}  // namespace

StatusOr<std::vector<bpf_insn>> EmitLatencyStart(const LatencyStartShape& s, const MapFds& maps) {
  TPE_RETURN_IF_ERROR(CheckMatch(s.match));
  Assembler a;
  Label filtered = a.NewLabel(), out = a.NewLabel(), full = a.NewLabel();
  TPE_RETURN_IF_ERROR(EmitPrologue(&a, maps, s.probe, s.filter, filtered));
  EmitMatchKey(&a, s.match);
  a.ZeroStack(kKeyOff, s.labels.MapKeySize());
  EmitKey(&a, s.labels, kKeyOff);
  a.Call(BPF_FUNC_ktime_get_ns);
  a.Store(8, R10, kStartValOff, R0);
  // Insert, or replace a pending start whole (the new start wins, as in the perf engine). A
  // replace whose start an end consumed meanwhile (-ENOENT) inserts once more.
  Label replace = a.NewLabel(), nomem = a.NewLabel(), insert_again = a.NewLabel();
  auto update = [&](int32_t flags) { EmitStartUpdate(&a, maps, flags); };
  update(BPF_NOEXIST);
  a.Jump(BPF_JEQ, R0, 0, out);
  a.Jump(BPF_JEQ, R0, -EEXIST, replace);
  a.Jump(BPF_JEQ, R0, -ENOMEM, nomem);
  a.Goto(full);
  a.Bind(replace);
  update(BPF_EXIST);
  a.Jump(BPF_JEQ, R0, -ENOENT, insert_again);
  a.Jump(BPF_JEQ, R0, -ENOMEM, nomem);
  a.Jump(BPF_JNE, R0, 0, full);
  EmitStat(&a, maps, kReplaced);
  a.Goto(out);
  a.Bind(insert_again);
  update(BPF_NOEXIST);
  a.Jump(BPF_JEQ, R0, 0, out);
  a.Jump(BPF_JEQ, R0, -ENOMEM, nomem);
  a.Goto(full);
  return FinishStart(&a, maps, s.probe, nomem, full, out, filtered);
}

StatusOr<std::vector<bpf_insn>> EmitLatencyEnd(const LatencyEndShape& s, const MapFds& maps) {
  TPE_RETURN_IF_ERROR(CheckMatch(s.match));
  if (s.start_label_bytes + s.labels.size > kMaxKeyBytes) {
    return Unimplemented("labels of " + std::to_string(s.start_label_bytes + s.labels.size) +
                         " key bytes (the bpf engine takes at most " + std::to_string(kMaxKeyBytes) + ")");
  }
  const uint32_t cell_off = Align8(s.start_label_bytes + s.labels.size);
  if (s.native && cell_off + kNativeCellBytes > kMaxKeyBytes) {
    return Unimplemented("labels of " + std::to_string(s.start_label_bytes + s.labels.size) +
                         " key bytes with native buckets (at most " + std::to_string(kMaxKeyBytes - kNativeCellBytes) +
                         ")");
  }
  if (s.keyless_series && (s.start_label_bytes + s.labels.size != 0 || s.native)) {
    return Internal("a key-less latency series with labels or native buckets");
  }
  Assembler a;
  Label filtered = a.NewLabel(), out = a.NewLabel(), found = a.NewLabel(), forward = a.NewLabel();
  if (!s.observe) {  // an inflight gauge: the start taken out, no time read, nothing observed
    TPE_RETURN_IF_ERROR(EmitPrologue(&a, maps, s.probe, s.filter, filtered));
    EmitMatchKey(&a, s.match);
    a.LoadMapFd(R1, maps.starts);
    StackPtr(&a, R2, kMatchOff);
    a.Call(BPF_FUNC_map_delete_elem);
    a.Jump(BPF_JEQ, R0, 0, out);
    EmitStat(&a, maps, kNoStart);
    a.Bind(out);
    a.Bind(filtered);
    EmitReturn(&a, s.probe);
    return a.Finish();
  }
  TPE_RETURN_IF_ERROR(EmitEndLookup(&a, maps, s, filtered, found));
  EmitStat(&a, maps, kNoStart);
  a.Goto(out);
  a.Bind(found);
  a.Load(8, R1, R0, 0);
  a.MovReg(R7, R9);
  a.AluReg(BPF_SUB, R7, R1);  // now - start: ns
  a.Jump(BPF_JSGE, R7, 0, forward);
  a.Mov(R7, 0);  // a start stamped on another CPU a hair later than this end
  a.Bind(forward);
  const uint32_t key_bytes =
      s.native ? cell_off + kNativeCellBytes : std::max<uint32_t>(8, s.start_label_bytes + s.labels.size);
  if (!s.keyless_series) a.ZeroStack(kKeyOff, Align8(key_bytes));
  for (uint32_t i = 0; i < s.start_label_bytes; i += 8) {  // the start labels, kept beside the time
    a.Load(8, R1, R0, static_cast<int16_t>(8 + i));
    a.Store(8, R10, static_cast<int16_t>(kKeyOff + static_cast<int>(i)), R1);
  }
  a.LoadMapFd(R1, maps.starts);
  StackPtr(&a, R2, kMatchOff);
  a.Call(BPF_FUNC_map_delete_elem);
  Label in_time = a.NewLabel(), mine = a.NewLabel();
  a.Jump(BPF_JEQ, R0, 0, mine);
  EmitStat(&a, maps, kNoStart);  // another end (another CPU) consumed this start first
  a.Goto(out);
  a.Bind(mine);
  a.LoadImm64(R1, s.timeout_ns);
  a.JumpReg(BPF_JLE, R7, R1, in_time);
  EmitStat(&a, maps, kExpired);
  a.Goto(out);
  a.Bind(in_time);
  EmitKey(&a, s.labels, static_cast<int16_t>(kKeyOff + static_cast<int>(s.start_label_bytes)));
  if (s.native) {
    EmitObserveNative(&a, maps, s.thresholds, false, *s.native, cell_off, out, /*small=*/true);
  } else if (s.keyless_series) {
    EmitFindKeyless(&a, maps, R8, out);
    EmitObserve(&a, s.thresholds, false, /*small=*/true);  // ns >= 0 as a signed number
  } else {
    EmitFindHistogram(&a, maps, out);
    EmitObserve(&a, s.thresholds, false, /*small=*/true);
  }
  a.Bind(out);
  a.Bind(filtered);
  EmitReturn(&a, s.probe);
  return a.Finish();
}

namespace internal {

// map_update_elem(starts, the match key, the start value, `flags`); R0 = its result.
void EmitStartUpdate(Assembler* a, const MapFds& maps, int32_t flags) {
  a->LoadMapFd(R1, maps.starts);
  StackPtr(a, R2, kMatchOff);
  StackPtr(a, R3, kStartValOff);
  a->Mov(R4, flags);
  CallMapUpdate(a);
}

}  // namespace internal
}  // namespace tpe::bpf
