#include "bpf/programs.h"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <limits>

#include "bpf/filter_compiler.h"
#include "bpf/programs_internal.h"

namespace tpe::bpf {
using namespace internal;  // NOLINT(google-build-using-namespace): this file's own helpers
namespace {

// Stack layout (offsets from R10; the stack is the 512 bytes below it).
constexpr int16_t kValueOff = -16;              // u64 scratch value
constexpr int16_t kScratchOff = -48;            // 32 bytes for the filter code (COMM)
constexpr int16_t kWideValueOff = kScratchOff;  // after the filter: a new series' wide sum (24 bytes)

}  // namespace
namespace internal {
// *(u64 *)(ptr + off) += val on a per-CPU map value, with a plain load, add and store (clobbers
// R1; `val` is not R1). No lock prefix is needed: only our tracing programs write these slots (user space reads and
// deletes them, and an aligned 64-bit load never tears), and the kernel runs at most one tracing
// program at a time on a CPU. trace_call_bpf() (kernel/trace/bpf_trace.c, every kernel since
// 4.x) skips the run while bpf_prog_active is raised on that CPU, by another program (a
// preempted one included: on PREEMPT_RT programs run with migration disabled, so the preempting
// task's program is skipped on that same CPU) or by a BPF map syscall
// (bpf_disable_instrumentation); the map's this-CPU slot is the one of the CPU that raised it.
void EmitPerCpuAdd(Assembler* a, Reg ptr, int16_t off, Reg val) {
  a->Load(8, R1, ptr, off);
  a->AluReg(BPF_ADD, R1, val);
  a->Store(8, ptr, off, R1);
}
// *(u64 *)(ptr + off) += 1 on a per-CPU map value (as EmitPerCpuAdd). Clobbers R1.
void EmitPerCpuIncrement(Assembler* a, Reg ptr, int16_t off) {
  a->Load(8, R1, ptr, off);
  a->Alu(BPF_ADD, R1, 1);
  a->Store(8, ptr, off, R1);
}

namespace {
// The wide sum at ptr + off += d, d <= 2^63 (T rises by at most 1: collectors/wide_sum.h).
// Clobbers R1 and R3.
void EmitWideAddSmall(Assembler* a, Reg ptr, int16_t off, Reg d) {
  Label plain = a->NewLabel(), done = a->NewLabel();
  const int16_t commit = static_cast<int16_t>(off + 8 * kWideCommit), lo = static_cast<int16_t>(off + 8 * kWideLo),
                announce = static_cast<int16_t>(off + 8 * kWideAnnounce);
  a->Load(8, R1, ptr, lo);
  a->MovReg(R3, R1);
  a->AluReg(BPF_ADD, R3, d);   // the new lo
  a->AluReg(BPF_XOR, R1, R3);  // top bit: whether lo's top bit flips (T + 1)
  a->Jump(BPF_JSGE, R1, 0, plain);
  a->Load(8, R1, ptr, commit);
  a->Alu(BPF_ADD, R1, 1);
  a->Store(8, ptr, announce, R1);
  a->Store(8, ptr, lo, R3);
  a->Store(8, ptr, commit, R1);
  a->Goto(done);
  a->Bind(plain);
  a->Store(8, ptr, lo, R3);
  a->Bind(done);
}
}  // namespace

void EmitWideAdd(Assembler* a, Reg ptr, int16_t off, Reg val, bool is_signed, bool small) {
  Label done = a->NewLabel();
  if (is_signed) {
    Label positive = a->NewLabel();
    a->Jump(BPF_JSGE, val, 0, positive);
    a->Alu(BPF_NEG, val, 0);  // INT64_MIN: 2^63 as a u64
    EmitWideAddSmall(a, ptr, static_cast<int16_t>(off + 8 * kWideWords), val);
    a->Goto(done);
    a->Bind(positive);
  } else if (!small) {
    Label one = a->NewLabel();
    a->Jump(BPF_JSGE, val, 0, one);  // below 2^63: one add
    a->MovReg(R2, val);
    a->Alu(BPF_RSH, R2, 1);
    a->AluReg(BPF_SUB, val, R2);
    EmitWideAddSmall(a, ptr, off, R2);
    a->Bind(one);
  }
  EmitWideAddSmall(a, ptr, off, val);
  a->Bind(done);
}
}  // namespace internal
namespace internal {

// stats[slot] += 1. Clobbers R0-R5.
void EmitStat(Assembler* a, const MapFds& maps, Stat slot) {
  Label skip = a->NewLabel();
  a->StoreImm(4, R10, kIndexOff, static_cast<int32_t>(slot));
  a->LoadMapFd(R1, maps.stats);
  a->MovReg(R2, R10);
  a->Alu(BPF_ADD, R2, kIndexOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  a->Jump(BPF_JEQ, R0, 0, skip);
  EmitPerCpuIncrement(a, R0, 0);
  a->Bind(skip);
}

// dst = the integer `f` (sign- or zero-extended to 64 bits). Clobbers R0-R5 for common_pid.
void EmitLoadInt(Assembler* a, const FieldRef& f, Reg dst) {
  if (f.current_tid) {
    a->Call(BPF_FUNC_get_current_pid_tgid);
    a->Alu(BPF_LSH, R0, 32);
    a->Alu(BPF_ARSH, R0, 32);  // common_pid is a signed int
    if (dst != R0) a->MovReg(dst, R0);
    return;
  }
  a->LoadExtended(f.size, f.is_signed, dst, R6, static_cast<int16_t>(f.offset));
}

// Copies `bytes` from ctx + `src_off` to R10 + `dst_off` with constant-offset loads.
void EmitCopyFromCtx(Assembler* a, uint32_t src_off, int16_t dst_off, uint32_t bytes) {
  uint32_t done = 0;
  while (done < bytes) {
    // The largest load that fits and is aligned at both ends: the verifier refuses misaligned
    // ctx loads and stack stores (dst_off is 8-aligned).
    uint32_t n = 8;
    while (n > bytes - done || (src_off + done) % n != 0 || done % n != 0) n /= 2;
    a->Load(n, R1, R6, static_cast<int16_t>(src_off + done));
    a->Store(n, R10, static_cast<int16_t>(dst_off + static_cast<int>(done)), R1);
    done += n;
  }
}

// Fills the label slots of `layout` at R10 + base (already zeroed). Clobbers R0-R5.
void EmitKey(Assembler* a, const KeyLayout& layout, int16_t base) {
  for (const KeySegment& s : layout.segments) {
    const int16_t off = static_cast<int16_t>(base + static_cast<int>(s.key_offset));
    switch (s.source) {
      case LabelSource::kField:
        switch (s.kind) {
          case KeySegment::Kind::kInteger:
            EmitLoadInt(a, s.field, R1);
            a->Store(8, R10, off, R1);
            break;
          case KeySegment::Kind::kBytes:
            EmitCopyFromCtx(a, s.field.offset, off, s.field.size);
            break;
          case KeySegment::Kind::kCharArray: {
            // Byte by byte up to the first NUL; the slot is zeroed, so what follows stays 0.
            Label end = a->NewLabel();
            for (uint32_t i = 0; i < s.field.size; ++i) {
              a->Load(1, R1, R6, static_cast<int16_t>(s.field.offset + i));
              a->Jump(BPF_JEQ, R1, 0, end);
              a->Store(1, R10, static_cast<int16_t>(off + static_cast<int>(i)), R1);
            }
            a->Bind(end);
            break;
          }
          case KeySegment::Kind::kString: {
            // r3 = ctx + (loc & 0xffff): the string the __data_loc word points at; r2 = its
            // length (loc >> 16, the NUL included), at most the slot less its final NUL.
            Label skip = a->NewLabel(), bounded = a->NewLabel();
            a->Load(4, R3, R6, static_cast<int16_t>(s.field.offset));
            a->MovReg(R2, R3);
            a->Alu(BPF_RSH, R2, 16);
            a->Jump(BPF_JEQ, R2, 0, skip);
            a->Jump(BPF_JLE, R2, static_cast<int32_t>(s.key_size - 1), bounded);
            a->Mov(R2, static_cast<int32_t>(s.key_size - 1));
            a->Bind(bounded);
            a->Alu(BPF_AND, R3, 0xffff);
            a->AluReg(BPF_ADD, R3, R6);
            a->MovReg(R1, R10);
            a->Alu(BPF_ADD, R1, off);
            a->Call(BPF_FUNC_probe_read_kernel);  // exactly r2 bytes; ToLabelKey cuts at the NUL
            a->Bind(skip);
            break;
          }
        }
        break;
      case LabelSource::kComm:
        a->MovReg(R1, R10);
        a->Alu(BPF_ADD, R1, off);
        a->Mov(R2, 16);
        a->Call(BPF_FUNC_get_current_comm);
        break;
      case LabelSource::kPid:
        a->Call(BPF_FUNC_get_current_pid_tgid);
        a->Alu(BPF_RSH, R0, 32);
        a->Store(8, R10, off, R0);
        break;
      case LabelSource::kTid:
        a->Call(BPF_FUNC_get_current_pid_tgid);
        a->Alu(BPF_LSH, R0, 32);
        a->Alu(BPF_RSH, R0, 32);
        a->Store(8, R10, off, R0);
        break;
      case LabelSource::kCpu:
        a->Call(BPF_FUNC_get_smp_processor_id);
        a->Store(8, R10, off, R0);
        break;
      case LabelSource::kCgroup:
        a->Call(BPF_FUNC_get_current_cgroup_id);
        a->Store(8, R10, off, R0);
        break;
    }
  }
}

// The prologue of every shape: R6 = ctx (a probe's: its materialized record), count the run,
// apply the filter (to `filtered`).
Status EmitPrologue(Assembler* a, const MapFds& maps, const ProbeRecord* probe, const FilterExpr* filter,
                    Label filtered, bool count_runs) {
  if (probe != nullptr) {
    EmitProbeRecord(a, *probe, maps.record, maps.stats, kBusy, kStringFaults, kIndexOff);
  } else {
    a->MovReg(R6, R1);
  }
  if (count_runs) EmitStat(a, maps, kRuns);
  if (filter != nullptr) {
    FilterCodeContext cx;
    cx.ctx = R6;
    cx.scratch_off = kScratchOff;
    TPE_RETURN_IF_ERROR(CompileFilter(*filter, cx, a, filtered));
  }
  return Status::Ok();
}

// `perf_event`: CounterShape::perf_event.
void EmitReturn(Assembler* a, const ProbeRecord* probe, bool perf_event) {
  if (probe != nullptr) EmitProbeRecordRelease(a);
  // 1: other perf events on this tracepoint still get the hit. 0 on a perf event's overflow:
  // no sample is written for it.
  a->Mov(R0, perf_event ? 0 : 1);
  a->Exit();
}

// R2 = R10 + off.
void StackPtr(Assembler* a, Reg r, int16_t off) {
  a->MovReg(r, R10);
  a->Alu(BPF_ADD, r, off);
}
}  // namespace internal
namespace internal {
// Compares R7 with `t` and jumps to `target` when R7 > t (signed or unsigned).
void EmitJumpAbove(Assembler* a, uint64_t t, bool is_signed, Label target) {
  const int64_t s = static_cast<int64_t>(t);
  const bool fits = is_signed ? (s >= INT32_MIN && s <= INT32_MAX) : t <= static_cast<uint64_t>(INT32_MAX);
  if (fits) {
    a->Jump(is_signed ? BPF_JSGT : BPF_JGT, R7, static_cast<int32_t>(s), target);
  } else {
    a->LoadImm64(R1, t);
    a->JumpReg(is_signed ? BPF_JSGT : BPF_JGT, R7, R1, target);
  }
}
}  // namespace internal
namespace internal {

// Buckets [lo, hi] of R7 by binary search over `t`; each leaf adds 1 to bucket i of the value
// at R8, then goes to `done`.
void EmitBucketTree(Assembler* a, const std::vector<uint64_t>& t, bool is_signed, size_t lo, size_t hi, Label done) {
  if (lo == hi) {
    EmitPerCpuIncrement(a, R8, static_cast<int16_t>(8 * lo));
    a->Goto(done);
    return;
  }
  const size_t mid = (lo + hi) / 2;  // bucket mid holds values <= t[mid]
  Label right = a->NewLabel();
  EmitJumpAbove(a, t[mid], is_signed, right);
  EmitBucketTree(a, t, is_signed, lo, mid, done);
  a->Bind(right);
  EmitBucketTree(a, t, is_signed, mid + 1, hi, done);
}

// map_update_elem, then R0 sign-extended from its low 32 bits. Before Linux 6.4 the verifier
// turns the helper into a direct call of the map's update op, which returned int (kernel commit
// d7ba4cc900bf "bpf: return long from bpf_map_ops funcs"), so an errno reached R0
// zero-extended: -EEXIST as 0xffffffef, which a 64-bit compare with -EEXIST misses (seen on
// Debian's 6.1: a replaced latency start was counted as table_full and the new start lost).
void CallMapUpdate(Assembler* a) {
  a->Call(BPF_FUNC_map_update_elem);
  a->Alu(BPF_LSH, R0, 32);
  a->Alu(BPF_ARSH, R0, 32);
}

// dst = the value of a key-less metric: entry 0 of its 1-entry per-CPU array (programs.h), or
// to `out` on the null the verifier makes us check for (an array's entry always exists).
void EmitFindKeyless(Assembler* a, const MapFds& maps, Reg dst, Label out) {
  a->StoreImm(4, R10, kKeyOff, 0);
  a->LoadMapFd(R1, maps.values);
  StackPtr(a, R2, kKeyOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  if (dst != R0) a->MovReg(dst, R0);
  a->Jump(BPF_JEQ, dst, 0, out);
}
}  // namespace internal
namespace internal {
// R8 = the histogram value of the key at R10 + kKeyOff, created zeroed from the `zero` map when
// new; a full map counts kDropped (ENOMEM: kNoMemory) and goes to `out`.
void EmitFindHistogram(Assembler* a, const MapFds& maps, Label out) {
  Label have = a->NewLabel(), again = a->NewLabel(), full = a->NewLabel(), nomem = a->NewLabel();
  a->LoadMapFd(R1, maps.values);
  StackPtr(a, R2, kKeyOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  a->MovReg(R8, R0);
  a->Jump(BPF_JNE, R8, 0, have);
  a->StoreImm(4, R10, kIndexOff, 0);
  a->LoadMapFd(R1, maps.zero);
  StackPtr(a, R2, kIndexOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  a->Jump(BPF_JEQ, R0, 0, out);
  a->MovReg(R3, R0);
  a->LoadMapFd(R1, maps.values);
  StackPtr(a, R2, kKeyOff);
  a->Mov(R4, BPF_NOEXIST);
  CallMapUpdate(a);
  a->Jump(BPF_JEQ, R0, 0, again);
  a->Jump(BPF_JEQ, R0, -ENOMEM, nomem);
  a->Jump(BPF_JNE, R0, -EEXIST, full);  // else another task created it first
  a->Bind(again);
  a->LoadMapFd(R1, maps.values);
  StackPtr(a, R2, kKeyOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  a->MovReg(R8, R0);
  a->Jump(BPF_JNE, R8, 0, have);
  a->Bind(full);
  EmitStat(a, maps, kDropped);
  a->Goto(out);
  a->Bind(nomem);
  EmitStat(a, maps, kNoMemory);
  a->Goto(out);
  a->Bind(have);
}
}  // namespace internal
namespace internal {

// Observes R7 into the histogram value at R8 (bucket by `t`, then the wide sum; `small`: R7 is
// at most 2^63, as a latency's ns). Clobbers R1-R3 and R7.
void EmitObserve(Assembler* a, const std::vector<uint64_t>& t, bool is_signed, bool small) {
  Label sum = a->NewLabel();
  EmitBucketTree(a, t, is_signed, 0, t.size(), sum);
  a->Bind(sum);
  EmitWideAdd(a, R8, static_cast<int16_t>(8 * (t.size() + 1)), R7, is_signed, small);
}

}  // namespace internal

StatusOr<FieldRef> IntegerField(const FieldFormat& f) {
  FieldRef r;
  r.name = f.name;
  if (f.name == "common_pid") {
    r.current_tid = true;
    r.size = 4;
    r.is_signed = true;
    return r;
  }
  if (f.is_common || f.offset < 8) {
    return Unimplemented("field \"" + f.name +
                         "\": a BPF program's record has a pt_regs pointer in place of common_* fields (only "
                         "common_pid is taken from the current task)");
  }
  if (!f.IsNumeric() || (f.size != 1 && f.size != 2 && f.size != 4 && f.size != 8)) {
    return Unimplemented("field \"" + f.name + "\" is not a 1, 2, 4 or 8-byte integer");
  }
  if (f.offset % f.size != 0) {  // tp_prog_is_valid_access() refuses misaligned loads
    return Unimplemented("field \"" + f.name + "\" is not aligned to its size (offset " + std::to_string(f.offset) +
                         ")");
  }
  r.offset = f.offset;
  r.size = f.size;
  r.is_signed = f.is_signed;
  return r;
}

StatusOr<KeyLayout> LayoutKey(const LabelSet& labels) {
  KeyLayout out;
  for (const LabelSpec& l : labels.labels()) {
    KeySegment s;
    s.source = l.source;
    s.key_offset = out.size;
    s.key_size = 8;
    if (l.source == LabelSource::kComm) s.key_size = 16;
    if (l.source == LabelSource::kField) {
      const FieldFormat& f = l.extractor->field();
      const std::string culprit = "label \"" + l.name + "\" (field " + f.name + ")";
      if (f.IsNumeric()) {
        auto ref = IntegerField(f);
        if (!ref.ok()) return Unimplemented(culprit + ": " + ref.status().message());
        s.kind = KeySegment::Kind::kInteger;
        s.field = *ref;
      } else {
        if (f.is_common || f.offset < 8) return Unimplemented(culprit + ": a common_* field");
        s.field.name = f.name;
        s.field.offset = f.offset;
        s.field.size = f.size;
        if (f.kind == FieldKind::kDataLoc && f.IsString()) {
          s.kind = KeySegment::Kind::kString;
          s.key_size = kStringSlotBytes;
        } else if (f.kind == FieldKind::kCharArray || f.kind == FieldKind::kArray || f.kind == FieldKind::kBytes) {
          if (f.size == 0 || f.size > 64) {
            return Unimplemented(culprit + ": " + std::to_string(f.size) + " bytes (the bpf engine keys at most 64)");
          }
          s.kind = f.kind == FieldKind::kCharArray ? KeySegment::Kind::kCharArray : KeySegment::Kind::kBytes;
          s.key_size = Align8(f.size);
        } else {
          return Unimplemented(culprit + ": a " + FieldKindName(f.kind) + " field (" + f.type + ")");
        }
      }
    }
    out.size += s.key_size;
    out.segments.push_back(s);
  }
  if (out.size > kMaxKeyBytes) {
    return Unimplemented("labels of " + std::to_string(out.size) + " key bytes (the bpf engine takes at most " +
                         std::to_string(kMaxKeyBytes) + ")");
  }
  return out;
}

std::string ToLabelKey(const KeyLayout& layout, std::string_view bpf_key) {
  std::string out;
  auto slot = [&](const KeySegment& s) {
    if (s.key_offset >= bpf_key.size()) return std::string_view();
    return bpf_key.substr(s.key_offset, s.key_size);
  };
  auto until_nul = [](std::string_view v, size_t max) {
    v = v.substr(0, std::min(max, v.size()));
    size_t n = v.find('\0');
    return n == std::string_view::npos ? v : v.substr(0, n);
  };
  for (const KeySegment& s : layout.segments) {
    std::string_view v = slot(s);
    std::string bytes(v);
    bytes.resize(s.key_size, '\0');
    switch (s.source) {
      case LabelSource::kField:
        if (s.kind == KeySegment::Kind::kInteger) {
          out.append(bytes.data(), 8);
        } else if (s.kind == KeySegment::Kind::kBytes) {
          out.append(bytes.data(), s.field.size);
        } else {
          std::string_view str = until_nul(bytes, s.kind == KeySegment::Kind::kString ? s.key_size : s.field.size);
          const uint16_t n = static_cast<uint16_t>(str.size());
          out.append(reinterpret_cast<const char*>(&n), sizeof(n));
          out.append(str);
        }
        break;
      case LabelSource::kComm: {
        std::string_view str = until_nul(bytes, 16);
        out.push_back(static_cast<char>(str.size()));
        out.append(str);
        break;
      }
      case LabelSource::kPid:
      case LabelSource::kTid:
      case LabelSource::kCpu:
        out.append(bytes.data(), 4);
        break;
      case LabelSource::kCgroup:
        out.append(bytes.data(), 8);
        break;
    }
  }
  return out;
}

std::vector<uint64_t> Thresholds(const Buckets& buckets, double scale, bool is_signed) {
  const size_t n = buckets.bounds().size();
  std::vector<uint64_t> out(n);
  // Index(raw × scale) is monotonic in raw: find the largest raw with index <= i.
  auto index_of = [&](uint64_t raw) {
    const double v = is_signed ? static_cast<double>(static_cast<int64_t>(raw)) : static_cast<double>(raw);
    return buckets.Index(v * scale);
  };
  // Work in an order-preserving unsigned space: signed values shifted by 2^63.
  const uint64_t bias = is_signed ? (uint64_t{1} << 63) : 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t lo = 0, hi = std::numeric_limits<uint64_t>::max();  // biased
    if (index_of(lo ^ bias) > i) {
      out[i] = lo ^ bias;  // nothing fits (cannot happen for scale > 0): an empty bucket
      continue;
    }
    while (lo < hi) {  // invariant: index_of(lo) <= i
      const uint64_t mid = lo + (hi - lo) / 2 + 1;
      if (index_of(mid ^ bias) <= i) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    out[i] = lo ^ bias;
  }
  return out;
}

Status CheckThresholds(const Buckets& buckets, double scale, bool is_signed) {
  if (!(scale > 0)) {
    return Unimplemented("a histogram scale of " + std::to_string(scale) + " (the bpf engine takes scales > 0)");
  }
  const double lowest = is_signed ? static_cast<double>(std::numeric_limits<int64_t>::min()) : 0.0;
  if (buckets.Index(lowest * scale) > 0) {
    return Unimplemented("bucket bounds below the smallest value the field can have (" +
                         std::to_string(lowest * scale) + ")");
  }
  return Status::Ok();
}

bool CountsRuns(const CounterShape& s) { return !(s.key.size == 0 && s.filter == nullptr && !s.value); }
bool CountsRuns(const HistogramShape& s) { return s.native || !(s.key.size == 0 && s.filter == nullptr); }

namespace internal {

// Fills a profile's StackKey at R10 + `off` (CounterShape::stacks) from the ctx in R9: the
// process, the stack ids, and the process image of the user stack (MapFds::image_stamps).
// Clobbers R0-R5.
void EmitStackKey(Assembler* a, const CounterShape::Stacks& st, const MapFds& maps, int16_t off) {
  a->Call(BPF_FUNC_get_current_pid_tgid);
  a->Alu(BPF_RSH, R0, 32);
  a->Store(4, R10, static_cast<int16_t>(off + offsetof(StackKey, tgid)), R0);
  auto id = [&](bool take, uint64_t flags, size_t at) {
    if (!take) {
      a->StoreImm(4, R10, static_cast<int16_t>(off + at), kStackNotTaken);
      return;
    }
    a->MovReg(R1, R9);
    a->LoadMapFd(R2, maps.stacks);
    a->Mov(R3, static_cast<int32_t>(flags));
    a->Call(BPF_FUNC_get_stackid);  // the id, or a negative errno (its low 32 bits: an int)
    a->Store(4, R10, static_cast<int16_t>(off + at), R0);
  };
  id(st.kernel, 0, offsetof(StackKey, kernel_id));
  id(st.user, BPF_F_USER_STACK, offsetof(StackKey, user_id));
  // The process image the user stack is of: image_stamps[tgid], else 0.
  const int16_t image = static_cast<int16_t>(off + offsetof(StackKey, image_ns));
  a->StoreImm(8, R10, image, 0);
  if (st.user && maps.image_stamps >= 0) {
    Label none = a->NewLabel();
    a->LoadMapFd(R1, maps.image_stamps);
    a->MovReg(R2, R10);
    a->Alu(BPF_ADD, R2, static_cast<int32_t>(off + offsetof(StackKey, tgid)));
    a->Call(BPF_FUNC_map_lookup_elem);
    a->Jump(BPF_JEQ, R0, 0, none);
    a->Load(8, R0, R0, 0);
    a->Store(8, R10, image, R0);
    a->Bind(none);
  }
}

// values[key at R10 + kKeyOff] += R7 (a per-CPU hash of u64; `wide`: of an unsigned wide sum),
// the series created when new: on to `added`; a full map counts kDropped and goes to `out`;
// ENOMEM counts kNoMemory and falls through to the next instruction, which must lead to `out`.
// Clobbers R0-R5 (and R7 when `wide`). Jumps go forward only (kernels before 5.3 refuse back-edges).
void EmitAddToSeries(Assembler* a, const MapFds& maps, Label out, Label added, bool wide) {
  Label create = a->NewLabel(), full = a->NewLabel(), nomem = a->NewLabel(), found = a->NewLabel();
  a->LoadMapFd(R1, maps.values);
  StackPtr(a, R2, kKeyOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  if (wide) {
    a->Jump(BPF_JNE, R0, 0, found);  // the wide add is emitted once, at the end
  } else {
    a->Jump(BPF_JEQ, R0, 0, create);
    EmitPerCpuAdd(a, R0, 0, R7);
    a->Goto(added);
  }
  a->Bind(create);
  if (wide) {  // the sum R7 at rest: {T, R7, T}, T = R7 >> 63 (collectors/wide_sum.h)
    a->MovReg(R1, R7);
    a->Alu(BPF_RSH, R1, 63);
    a->Store(8, R10, static_cast<int16_t>(kWideValueOff + 8 * kWideCommit), R1);
    a->Store(8, R10, static_cast<int16_t>(kWideValueOff + 8 * kWideLo), R7);
    a->Store(8, R10, static_cast<int16_t>(kWideValueOff + 8 * kWideAnnounce), R1);
  } else {
    a->Store(8, R10, kValueOff, R7);
  }
  a->LoadMapFd(R1, maps.values);
  StackPtr(a, R2, kKeyOff);
  StackPtr(a, R3, wide ? kWideValueOff : kValueOff);
  a->Mov(R4, BPF_NOEXIST);
  CallMapUpdate(a);
  a->Jump(BPF_JEQ, R0, 0, added);
  a->Jump(BPF_JEQ, R0, -ENOMEM, nomem);
  a->Jump(BPF_JNE, R0, -EEXIST, full);
  a->LoadMapFd(R1, maps.values);  // another task on this CPU created it first
  StackPtr(a, R2, kKeyOff);
  a->Call(BPF_FUNC_map_lookup_elem);
  if (wide) {
    a->Jump(BPF_JNE, R0, 0, found);
  } else {
    a->Jump(BPF_JEQ, R0, 0, full);
    EmitPerCpuAdd(a, R0, 0, R7);
    a->Goto(added);
  }
  a->Bind(full);
  EmitStat(a, maps, kDropped);
  a->Goto(out);
  a->Bind(nomem);
  EmitStat(a, maps, kNoMemory);  // falls through: the caller binds `out` next (or jumps there)
  if (wide) {
    a->Goto(out);
    a->Bind(found);  // the value at R0
    EmitWideAdd(a, R0, 0, R7, false);
    a->Goto(added);
  }
}

}  // namespace internal

StatusOr<std::vector<bpf_insn>> EmitCounter(const CounterShape& s, const MapFds& maps) {
  Assembler a;
  Label filtered = a.NewLabel(), out = a.NewLabel();
  TPE_RETURN_IF_ERROR(EmitPrologue(&a, maps, s.probe, s.filter, filtered, CountsRuns(s)));
  // A profile's stacks are taken from the program's context: the record (R6) of a tracepoint's
  // program, the pt_regs (R7, probe_record.h) of a probe's.
  if (s.stacks) a.MovReg(R9, s.probe != nullptr ? R7 : R6);
  if (s.value) {
    EmitLoadInt(&a, *s.value, R7);
    if (s.value->is_signed) {
      Label ok = a.NewLabel();
      a.Jump(BPF_JSGE, R7, 0, ok);
      EmitStat(&a, maps, kDecodeErrors);
      a.Goto(out);
      a.Bind(ok);
    }
  } else {
    a.Mov(R7, 1);
  }
  const bool wide = s.value.has_value();  // a sum of values: 128 bits (CounterValueBytes)
  if (s.key.size == 0) {                  // a 1-entry per-CPU array: its one value always exists
    EmitFindKeyless(&a, maps, R0, out);
    if (wide) {
      EmitWideAdd(&a, R0, 0, R7, false);
    } else {
      EmitPerCpuAdd(&a, R0, 0, R7);
    }
    a.Bind(out);
    a.Bind(filtered);
    EmitReturn(&a, s.probe, s.perf_event);
    return a.Finish();
  }
  a.ZeroStack(kKeyOff, s.key.MapKeySize());
  EmitKey(&a, s.key, kKeyOff);
  if (s.stacks)
    EmitStackKey(&a, *s.stacks, maps, static_cast<int16_t>(kKeyOff + static_cast<int>(s.stacks->key_offset)));
  EmitAddToSeries(&a, maps, out, out, wide);
  a.Bind(out);
  a.Bind(filtered);
  EmitReturn(&a, s.probe, s.perf_event);
  return a.Finish();
}

StatusOr<std::vector<bpf_insn>> EmitHistogram(const HistogramShape& s, const MapFds& maps) {
  Assembler a;
  Label filtered = a.NewLabel(), out = a.NewLabel();
  TPE_RETURN_IF_ERROR(EmitPrologue(&a, maps, s.probe, s.filter, filtered, CountsRuns(s)));
  if (s.native) {
    const uint32_t cell_off = Align8(s.key.size);
    if (cell_off + kNativeCellBytes > kMaxKeyBytes) {
      return Unimplemented("labels of " + std::to_string(s.key.size) + " key bytes with native buckets (at most " +
                           std::to_string(kMaxKeyBytes - kNativeCellBytes) + ")");
    }
    a.ZeroStack(kKeyOff, cell_off + kNativeCellBytes);
    if (s.key.size > 0) EmitKey(&a, s.key, kKeyOff);
    EmitLoadInt(&a, s.value, R7);
    EmitObserveNative(&a, maps, s.thresholds, s.value.is_signed, *s.native, cell_off, out);
    a.Bind(out);
    a.Bind(filtered);
    EmitReturn(&a, s.probe);
    return a.Finish();
  }
  if (s.key.size == 0) {
    EmitFindKeyless(&a, maps, R8, out);
  } else {
    a.ZeroStack(kKeyOff, s.key.MapKeySize());
    EmitKey(&a, s.key, kKeyOff);
    EmitFindHistogram(&a, maps, out);
  }
  EmitLoadInt(&a, s.value, R7);
  EmitObserve(&a, s.thresholds, s.value.is_signed);
  a.Bind(out);
  a.Bind(filtered);
  EmitReturn(&a, s.probe);
  return a.Finish();
}

}  // namespace tpe::bpf
