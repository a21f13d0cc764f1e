#include "bpf/probe_record.h"

#include <algorithm>
#include <cstdlib>

#include "bpf/string_slot.h"

namespace tpe::bpf {
namespace {

uint32_t Align8(uint32_t n) { return (n + 7) & ~7u; }

// Bytes of an integer fetch type ("u8".."s64"), 0 for strings, -1 for an unknown type.
int TypeBytes(const std::string& t) {
  if (t == "ustring" || t == "string") return 0;
  if (t.size() < 2 || (t[0] != 'u' && t[0] != 's' && t[0] != 'x')) return -1;
  const std::string bits = t.substr(1);
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  return -1;
}

// *(size *)(R6 + off) = src: one store when aligned, else byte by byte (clobbers src).
void StoreField(Assembler* a, uint32_t off, uint32_t size, Reg src) {
  if (off % size == 0) {
    a->Store(size, R6, static_cast<int16_t>(off), src);
    return;
  }
  for (uint32_t i = 0; i < size; ++i) {
    a->Store(1, R6, static_cast<int16_t>(off + i), src);
    if (i + 1 < size) a->Alu(BPF_RSH, src, 8);
  }
}

}  // namespace

int PtRegsOffset(const std::string& name) {
  static const char* const kNames[] = {"r15", "r14", "r13", "r12", "bp",      "bx", "r11", "r10",   "r9", "r8", "ax",
                                       "cx",  "dx",  "si",  "di",  "orig_ax", "ip", "cs",  "flags", "sp", "ss"};
  for (int i = 0; i < static_cast<int>(sizeof(kNames) / sizeof(kNames[0])); ++i) {
    if (name == kNames[i]) return 8 * i;
  }
  return -1;
}

StatusOr<ProbeRecord> BuildProbeRecord(const std::vector<std::pair<std::string, std::string>>& fetch_args,
                                       const EventFormat& format, bool user) {
  ProbeRecord r;
  r.user = user;
  for (const FieldFormat& f : format.fields) r.fixed = std::max(r.fixed, f.offset + f.size);
  uint32_t strings = 0;
  for (const auto& [field, arg] : fetch_args) {
    const std::string culprit = "probe field \"" + field + "\" (" + arg + ")";
    const size_t colon = arg.rfind(':');
    const std::string place = arg.substr(0, colon), type = colon == std::string::npos ? "u64" : arg.substr(colon + 1);
    const int bytes = TypeBytes(type);
    if (bytes < 0)
      return InvalidArgument(culprit + ": type " + type + " (the bpf engine takes u8-s64, ustring, string)");
    ProbeFetch p;
    p.field = field;
    p.string = bytes == 0;
    p.user_memory = user || type == "ustring";
    std::string reg;
    if (place == "$retval") {
      reg = "ax";
    } else if (!place.empty() && place[0] == '%') {
      reg = place.substr(1);
    } else if (!place.empty() && (place[0] == '+' || place[0] == '-') && place.back() == ')') {
      const size_t open = place.find('(');
      if (open == std::string::npos || place.compare(open, 2, "(%") != 0) {
        return InvalidArgument(culprit + ": not a +OFFSET(%REG) operand");
      }
      char* end = nullptr;
      const long disp = std::strtol(place.c_str(), &end, 10);
      if (end != place.c_str() + open || disp < -(1L << 30) || disp > (1L << 30)) {
        return InvalidArgument(culprit + ": bad offset");
      }
      p.memory = true;
      p.disp = static_cast<int32_t>(disp);
      reg = place.substr(open + 2, place.size() - open - 3);
    } else {
      return InvalidArgument(culprit + ": the bpf engine fetches %REG, $retval and +OFFSET(%REG)");
    }
    if (p.string && !p.memory) return InvalidArgument(culprit + ": a string is fetched as +OFFSET(%REG)");
    const int off = PtRegsOffset(reg);
    if (off < 0) return InvalidArgument(culprit + ": unknown register \"" + reg + "\"");
    p.reg_offset = static_cast<uint32_t>(off);
    const FieldFormat* f = format.FindField(field);
    if (f == nullptr) return InvalidArgument(culprit + ": not in the event's format");
    const uint32_t want = p.string ? 4 : static_cast<uint32_t>(bytes);
    if (f->size != want || (p.string != (f->kind == FieldKind::kDataLoc))) {
      return InvalidArgument(culprit + ": the format says " + f->type + " of " + std::to_string(f->size) + " bytes");
    }
    p.offset = f->offset;
    p.size = want;
    strings += p.string ? 1 : 0;
    r.fetches.push_back(p);
  }
  r.size = Align8(r.fixed + strings * kStringSlotBytes);
  if (r.size < 8) r.size = 8;
  return r;
}

std::vector<std::string> ProbeRecord::UserStringFields() const {
  std::vector<std::string> out;
  for (const ProbeFetch& p : fetches) {
    if (p.string && p.user_memory) out.push_back(p.field);
  }
  return out;
}

namespace {
// Adds 1 to slot `slot` of the per-CPU stats array `stats_fd` (atomic: a probe program may be
// preempted). Uses the stack bytes at R10 + index_off; clobbers R0-R2.
void CountStat(Assembler* a, int stats_fd, uint32_t slot, int16_t index_off) {
  Label out = a->NewLabel();
  a->StoreImm(4, R10, index_off, static_cast<int32_t>(slot));
  a->LoadMapFd(R1, stats_fd);
  a->MovReg(R2, R10);
  a->Alu(BPF_ADD, R2, index_off);
  a->Call(BPF_FUNC_map_lookup_elem);
  a->Jump(BPF_JEQ, R0, 0, out);
  a->Mov(R1, 1);
  a->AtomicAdd64(R0, 0, R1);
  a->Bind(out);
}
}  // namespace

void EmitProbeRecord(Assembler* a, const ProbeRecord& r, int record_fd, int stats_fd, uint32_t busy_slot,
                     uint32_t fault_slot, int16_t index_off) {
  a->MovReg(R7, R1);
  a->StoreImm(4, R10, index_off, 0);
  a->LoadMapFd(R1, record_fd);
  a->MovReg(R2, R10);
  a->Alu(BPF_ADD, R2, index_off);
  a->Call(BPF_FUNC_map_lookup_elem);
  Label have = a->NewLabel(), acquired = a->NewLabel(), busy = a->NewLabel(), out = a->NewLabel();
  a->Jump(BPF_JNE, R0, 0, have);
  a->Mov(R0, 1);  // an array's entry 0 always exists: the verifier's null check
  a->Exit();
  a->Bind(have);
  a->MovReg(R6, R0);
  if (r.atomic_guard) {
    a->Mov(R1, 1);
    a->AtomicXchg64(R6, 0, R1);  // R1 = the old guard
    a->Jump(BPF_JEQ, R1, 0, acquired);
  } else {
    a->Load(8, R1, R6, 0);
    a->Jump(BPF_JNE, R1, 0, busy);
    a->StoreImm(8, R6, 0, 1);
    a->Goto(acquired);
  }
  a->Bind(busy);                                 // another run of this program on this CPU holds the record
  CountStat(a, stats_fd, busy_slot, index_off);  // atomic: the holder may be preempted inside a plain add
  a->Bind(out);
  a->Mov(R0, 1);
  a->Exit();

  a->Bind(acquired);
  a->Mov(R8, static_cast<int32_t>(r.fixed));  // where the next string goes
  for (const ProbeFetch& p : r.fetches) {
    const int read = p.user_memory ? BPF_FUNC_probe_read_user : BPF_FUNC_probe_read_kernel;
    const int read_str = p.user_memory ? BPF_FUNC_probe_read_user_str : BPF_FUNC_probe_read_kernel_str;
    if (p.string) {
      Label fault = a->NewLabel(), done = a->NewLabel();
      a->Load(8, R3, R7, static_cast<int16_t>(p.reg_offset));
      if (p.disp != 0) a->Alu(BPF_ADD, R3, p.disp);
      a->MovReg(R1, R6);
      a->AluReg(BPF_ADD, R1, R8);
      a->Mov(R2, static_cast<int32_t>(kStringSlotBytes));
      a->Call(read_str);  // R0 = bytes copied with the NUL, or -errno (the slot zeroed)
      a->Jump(BPF_JSLE, R0, 0, fault);
      a->Jump(BPF_JGT, R0, static_cast<int32_t>(kStringSlotBytes), fault);
      a->MovReg(R1, R0);
      a->Alu(BPF_LSH, R1, 16);
      a->AluReg(BPF_OR, R1, R8);
      StoreField(a, p.offset, 4, R1);
      a->AluReg(BPF_ADD, R8, R0);
      a->Goto(done);
      a->Bind(fault);  // the kernel: length 0 at the current offset
      a->MovReg(R1, R8);
      StoreField(a, p.offset, 4, R1);
      CountStat(a, stats_fd, fault_slot, index_off);
      a->Bind(done);
    } else if (p.memory) {
      a->Load(8, R3, R7, static_cast<int16_t>(p.reg_offset));
      if (p.disp != 0) a->Alu(BPF_ADD, R3, p.disp);
      a->MovReg(R1, R6);
      a->Alu(BPF_ADD, R1, static_cast<int32_t>(p.offset));
      a->Mov(R2, static_cast<int32_t>(p.size));
      a->Call(read);  // a fault leaves zeros
    } else {
      a->Load(8, R1, R7, static_cast<int16_t>(p.reg_offset));
      StoreField(a, p.offset, p.size, R1);
    }
  }
}

void EmitProbeRecordRelease(Assembler* a) { a->StoreImm(8, R6, 0, 0); }

}  // namespace tpe::bpf
