#include "bpf/assembler.h"

#include <cstdio>

namespace tpe::bpf {

uint8_t SizeCode(uint32_t bytes) {
  switch (bytes) {
    case 1:
      return BPF_B;
    case 2:
      return BPF_H;
    case 4:
      return BPF_W;
    default:
      return BPF_DW;
  }
}

void Assembler::Emit(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  insns_.push_back(i);
}

void Assembler::Alu(uint8_t op, Reg dst, int32_t imm) { Emit(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm); }
void Assembler::AluReg(uint8_t op, Reg dst, Reg src) { Emit(BPF_ALU64 | op | BPF_X, dst, src, 0, 0); }

void Assembler::LoadImm64(Reg dst, uint64_t imm) {
  Emit(BPF_LD | BPF_DW | BPF_IMM, dst, 0, 0, static_cast<int32_t>(static_cast<uint32_t>(imm)));
  Emit(0, 0, 0, 0, static_cast<int32_t>(static_cast<uint32_t>(imm >> 32)));
}

void Assembler::LoadMapFd(Reg dst, int map_fd) {
  Emit(BPF_LD | BPF_DW | BPF_IMM, dst, BPF_PSEUDO_MAP_FD, 0, map_fd);
  Emit(0, 0, 0, 0, 0);
}

void Assembler::Load(uint32_t size, Reg dst, Reg src, int16_t off) {
  Emit(BPF_LDX | SizeCode(size) | BPF_MEM, dst, src, off, 0);
}

void Assembler::LoadExtended(uint32_t size, bool is_signed, Reg dst, Reg src, int16_t off) {
  Load(size, dst, src, off);
  if (is_signed && size < 8) {
    const int32_t shift = static_cast<int32_t>(64 - 8 * size);
    Alu(BPF_LSH, dst, shift);
    Alu(BPF_ARSH, dst, shift);
  }
}

void Assembler::Store(uint32_t size, Reg dst, int16_t off, Reg src) {
  Emit(BPF_STX | SizeCode(size) | BPF_MEM, dst, src, off, 0);
}

void Assembler::StoreImm(uint32_t size, Reg dst, int16_t off, int32_t imm) {
  Emit(BPF_ST | SizeCode(size) | BPF_MEM, dst, 0, off, imm);
}

void Assembler::AtomicAdd64(Reg dst, int16_t off, Reg src) {
  Emit(BPF_STX | BPF_DW | BPF_ATOMIC, dst, src, off, BPF_ADD);
}

void Assembler::AtomicXchg64(Reg dst, int16_t off, Reg src) {
  Emit(BPF_STX | BPF_DW | BPF_ATOMIC, dst, src, off, BPF_XCHG);
}

void Assembler::ZeroStack(int16_t off, uint32_t bytes) {
  for (uint32_t i = 0; i < bytes; i += 8) StoreImm(8, R10, static_cast<int16_t>(off + static_cast<int>(i)), 0);
}

void Assembler::Jump(uint8_t op, Reg dst, int32_t imm, Label target) {
  fixups_.push_back({insns_.size(), target.id});
  Emit(BPF_JMP | op | BPF_K, dst, 0, 0, imm);
}

void Assembler::JumpReg(uint8_t op, Reg dst, Reg src, Label target) {
  fixups_.push_back({insns_.size(), target.id});
  Emit(BPF_JMP | op | BPF_X, dst, src, 0, 0);
}

void Assembler::Goto(Label target) {
  fixups_.push_back({insns_.size(), target.id});
  Emit(BPF_JMP | BPF_JA, 0, 0, 0, 0);
}

void Assembler::Call(int helper) { Emit(BPF_JMP | BPF_CALL, 0, 0, 0, helper); }
void Assembler::Exit() { Emit(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }

Label Assembler::NewLabel() {
  labels_.push_back(-1);
  return Label{static_cast<int>(labels_.size() - 1)};
}

void Assembler::Bind(Label l) { labels_.at(static_cast<size_t>(l.id)) = static_cast<int64_t>(insns_.size()); }

StatusOr<std::vector<bpf_insn>> Assembler::Finish() const {
  std::vector<bpf_insn> out = insns_;
  for (const Fixup& f : fixups_) {
    if (f.label < 0 || static_cast<size_t>(f.label) >= labels_.size() || labels_[f.label] < 0) {
      return Internal("BPF program: jump at instruction " + std::to_string(f.insn) + " to an unbound label");
    }
    const int64_t delta = labels_[f.label] - static_cast<int64_t>(f.insn) - 1;
    if (delta < INT16_MIN || delta > INT16_MAX) {
      return Internal("BPF program: jump at instruction " + std::to_string(f.insn) + " is too far (" +
                      std::to_string(delta) + " instructions)");
    }
    out[f.insn].off = static_cast<int16_t>(delta);
  }
  return out;
}

namespace {

const char* AluName(uint8_t op) {
  switch (op) {
    case BPF_ADD:
      return "+=";
    case BPF_SUB:
      return "-=";
    case BPF_MUL:
      return "*=";
    case BPF_DIV:
      return "/=";
    case BPF_OR:
      return "|=";
    case BPF_AND:
      return "&=";
    case BPF_LSH:
      return "<<=";
    case BPF_RSH:
      return ">>=";
    case BPF_MOD:
      return "%=";
    case BPF_XOR:
      return "^=";
    case BPF_MOV:
      return "=";
    case BPF_ARSH:
      return "s>>=";
    default:
      return "?=";
  }
}

const char* JmpName(uint8_t op) {
  switch (op) {
    case BPF_JEQ:
      return "==";
    case BPF_JNE:
      return "!=";
    case BPF_JGT:
      return ">";
    case BPF_JGE:
      return ">=";
    case BPF_JLT:
      return "<";
    case BPF_JLE:
      return "<=";
    case BPF_JSGT:
      return "s>";
    case BPF_JSGE:
      return "s>=";
    case BPF_JSLT:
      return "s<";
    case BPF_JSLE:
      return "s<=";
    case BPF_JSET:
      return "&";
    default:
      return "?";
  }
}

const char* SizeName(uint8_t size) {
  switch (size) {
    case BPF_B:
      return "u8";
    case BPF_H:
      return "u16";
    case BPF_W:
      return "u32";
    default:
      return "u64";
  }
}

}  // namespace

std::string Disassemble(const std::vector<bpf_insn>& insns) {
  std::string out;
  char buf[128];
  for (size_t n = 0; n < insns.size(); ++n) {
    const bpf_insn& i = insns[n];
    const uint8_t cls = BPF_CLASS(i.code);
    buf[0] = 0;
    if (cls == BPF_ALU64) {
      if (BPF_SRC(i.code) == BPF_X) {
        std::snprintf(buf, sizeof(buf), "r%d %s r%d", i.dst_reg, AluName(BPF_OP(i.code)), i.src_reg);
      } else {
        std::snprintf(buf, sizeof(buf), "r%d %s %d", i.dst_reg, AluName(BPF_OP(i.code)), i.imm);
      }
    } else if (i.code == (BPF_LD | BPF_DW | BPF_IMM) && n + 1 < insns.size()) {
      const uint64_t v = static_cast<uint32_t>(i.imm) | static_cast<uint64_t>(static_cast<uint32_t>(insns[n + 1].imm))
                                                            << 32;
      if (i.src_reg == BPF_PSEUDO_MAP_FD) {
        std::snprintf(buf, sizeof(buf), "r%d = map[fd %d] ll", i.dst_reg, i.imm);
      } else {
        std::snprintf(buf, sizeof(buf), "r%d = 0x%llx ll", i.dst_reg, static_cast<unsigned long long>(v));
      }
      out += std::to_string(n) + ": " + buf + "\n";
      ++n;
      continue;
    } else if (cls == BPF_LDX) {
      std::snprintf(buf, sizeof(buf), "r%d = *(%s *)(r%d %+d)", i.dst_reg, SizeName(BPF_SIZE(i.code)), i.src_reg,
                    i.off);
    } else if (cls == BPF_STX && BPF_MODE(i.code) == BPF_ATOMIC && i.imm == BPF_XCHG) {
      std::snprintf(buf, sizeof(buf), "r%d = xchg_64(r%d %+d, r%d)", i.src_reg, i.dst_reg, i.off, i.src_reg);
    } else if (cls == BPF_STX && BPF_MODE(i.code) == BPF_ATOMIC) {
      std::snprintf(buf, sizeof(buf), "lock *(u64 *)(r%d %+d) += r%d", i.dst_reg, i.off, i.src_reg);
    } else if (cls == BPF_STX) {
      std::snprintf(buf, sizeof(buf), "*(%s *)(r%d %+d) = r%d", SizeName(BPF_SIZE(i.code)), i.dst_reg, i.off,
                    i.src_reg);
    } else if (cls == BPF_ST) {
      std::snprintf(buf, sizeof(buf), "*(%s *)(r%d %+d) = %d", SizeName(BPF_SIZE(i.code)), i.dst_reg, i.off, i.imm);
    } else if (cls == BPF_JMP) {
      const uint8_t op = BPF_OP(i.code);
      if (op == BPF_JA) {
        std::snprintf(buf, sizeof(buf), "goto %+d", i.off);
      } else if (op == BPF_CALL) {
        std::snprintf(buf, sizeof(buf), "call %d", i.imm);
      } else if (op == BPF_EXIT) {
        std::snprintf(buf, sizeof(buf), "exit");
      } else if (BPF_SRC(i.code) == BPF_X) {
        std::snprintf(buf, sizeof(buf), "if r%d %s r%d goto %+d", i.dst_reg, JmpName(op), i.src_reg, i.off);
      } else {
        std::snprintf(buf, sizeof(buf), "if r%d %s %d goto %+d", i.dst_reg, JmpName(op), i.imm, i.off);
      }
    } else {
      std::snprintf(buf, sizeof(buf), "(code 0x%02x)", i.code);
    }
    out += std::to_string(n) + ": " + buf + "\n";
  }
  return out;
}

}  // namespace tpe::bpf
