#include "unwind/cfi_table.h"

#include <dwarf.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/byte_reader.h"
#include "elf/sections.h"

namespace tpe::unwind {

void FreeFrame::operator()(Dwarf_Frame* f) const { std::free(f); }

StatusOr<std::unique_ptr<CfiTable>> CfiTable::Read(int fd, const std::string& display, const Limits& limits) {
  if (elf_version(EV_CURRENT) == EV_NONE) return Internal("libelf: elf_version failed");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return InvalidArgument(display + " is not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  std::unique_ptr<CfiTable> t(new CfiTable());
  t->display_ = display;
  t->elf_ = elf_begin(fd, ELF_C_READ, nullptr);
  if (t->elf_ == nullptr || elf_kind(t->elf_) != ELF_K_ELF) {
    return InvalidArgument(display + " is not an ELF file");
  }
  GElf_Ehdr eh;
  if (gelf_getehdr(t->elf_, &eh) == nullptr || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
    return InvalidArgument(display + " is not an x86-64 ELF64 file");
  }
  size_t phnum = 0;
  if (elf_getphdrnum(t->elf_, &phnum) != 0) return InvalidArgument(display + ": unreadable program headers");
  for (size_t i = 0; i < phnum && t->segments_.size() < limits.max_segments; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(t->elf_, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD) continue;
    if (ph.p_offset > file_size || ph.p_filesz > file_size - ph.p_offset) continue;
    elf::LoadSegment s;
    s.vaddr = ph.p_vaddr;
    s.offset = ph.p_offset;
    s.filesz = ph.p_filesz;
    s.memsz = ph.p_memsz;
    s.executable = (ph.p_flags & PF_X) != 0;
    s.writable = (ph.p_flags & PF_W) != 0;
    t->segments_.push_back(s);
  }
  // The CFI sections' sizes, checked before libdw reads them.
  bool has_debug_frame = false;
  std::optional<elf::SectionHeader> eh_frame_hdr;  // read for ForEachRow
  for (const elf::SectionHeader& sh : elf::ReadSectionHeaders(t->elf_, fd, file_size, limits.max_section_bytes)) {
    const bool eh = sh.name == ".eh_frame" || sh.name == ".eh_frame_hdr";
    const bool debug = sh.name == ".debug_frame";
    if (!eh && !debug) continue;
    if (sh.type != SHT_NOBITS &&
        (sh.size > limits.max_section_bytes || sh.offset > file_size || sh.size > file_size - sh.offset)) {
      return InvalidArgument(display + ": " + sh.name + " of " + std::to_string(sh.size) +
                             " bytes is past the file or the bound (" + std::to_string(limits.max_section_bytes) +
                             " bytes)");
    }
    t->bytes_ += sh.size;
    has_debug_frame |= debug && sh.type != SHT_NOBITS;
    if (sh.name == ".eh_frame_hdr" && sh.type == SHT_PROGBITS) eh_frame_hdr = sh;
  }
  t->eh_frame_ = dwarf_getcfi_elf(t->elf_);
  // .eh_frame_hdr's bytes for ForEachRow (libelf's, bounded above with the other CFI sections).
  if (eh_frame_hdr) {
    Elf_Data* data = elf_getdata(elf_getscn(t->elf_, eh_frame_hdr->index), nullptr);
    if (data != nullptr && data->d_buf != nullptr) {
      t->eh_frame_hdr_ = std::span<const uint8_t>(static_cast<const uint8_t*>(data->d_buf), data->d_size);
      t->eh_frame_hdr_address_ = eh_frame_hdr->addr;
    }
  }
  if (has_debug_frame) {
    t->dwarf_ = dwarf_begin_elf(t->elf_, DWARF_C_READ, nullptr);
    if (t->dwarf_ != nullptr) t->debug_frame_ = dwarf_getcfi(t->dwarf_);
  }
  if (t->eh_frame_ == nullptr && t->debug_frame_ == nullptr)
    return NotFound(display + " has no call frame information");
  // Everything libdw needs is read: the descriptor may be closed.
  elf_cntl(t->elf_, ELF_C_FDDONE);
  t->bytes_ += sizeof(CfiTable) + t->segments_.size() * sizeof(elf::LoadSegment) + 4096 + kRowMemo * sizeof(Memo);
  return t;
}

CfiTable::~CfiTable() {
  if (eh_frame_ != nullptr) dwarf_cfi_end(eh_frame_);
  if (dwarf_ != nullptr) dwarf_end(dwarf_);
  if (elf_ != nullptr) elf_end(elf_);
}

FramePtr CfiTable::RowAt(uint64_t offset, bool* signal) const {
  *signal = false;
  auto address = elf::AddressForFileOffset(segments_, offset);
  if (!address.ok()) return nullptr;
  for (Dwarf_CFI* cfi : {eh_frame_, debug_frame_}) {
    if (cfi == nullptr) continue;
    Dwarf_Frame* frame = nullptr;
    if (dwarf_cfi_addrframe(cfi, *address, &frame) != 0 || frame == nullptr) continue;
    Dwarf_Addr start = 0, end = 0;
    dwarf_frame_info(frame, &start, &end, signal);
    return FramePtr(frame);
  }
  return nullptr;
}

namespace {

// The compact form of a libdw row, if it has one (the shapes dwarf_frame_cfa and
// dwarf_frame_register give for the rules CompactRow keeps: libdw's cfi.c and frame_register.c).
bool Compact(Dwarf_Frame* frame, CompactRow* row) {
  auto fits = [](int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; };
  Dwarf_Op* ops = nullptr;
  size_t nops = 0;
  if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops != 1) return false;
  int64_t cfa_offset = 0;
  uint64_t cfa_register = 0;
  if (ops[0].atom == DW_OP_bregx) {
    cfa_register = ops[0].number;
    cfa_offset = static_cast<int64_t>(ops[0].number2);
  } else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
    cfa_register = ops[0].atom - DW_OP_breg0;
    cfa_offset = static_cast<int64_t>(ops[0].number);
  } else {
    return false;
  }
  if (cfa_register >= kDwarfRegisters || !fits(cfa_offset)) return false;
  row->cfa_register = static_cast<uint8_t>(cfa_register);
  row->cfa_offset = static_cast<int32_t>(cfa_offset);
  for (int slot = 0; slot < CompactRow::kSlots; ++slot) {
    const int r = CompactRow::kRegisters[static_cast<size_t>(slot)];
    Dwarf_Op mem[3];
    ops = nullptr;
    nops = 0;
    auto& rule = row->rule[static_cast<size_t>(slot)];
    auto& offset = row->offset[static_cast<size_t>(slot)];
    offset = 0;
    if (dwarf_frame_register(frame, r, mem, &ops, &nops) != 0) {
      if (r == kDwarfRip) return false;     // the full path says bad_rule
      rule = CompactRow::Rule::kUndefined;  // as the full path: the caller's value is not known
      continue;
    }
    if (nops == 0) {
      rule = ops == nullptr ? CompactRow::Rule::kSame : CompactRow::Rule::kUndefined;
      continue;
    }
    if (ops[0].atom != DW_OP_call_frame_cfa) return false;
    size_t i = 1;
    int64_t n = 0;
    if (i < nops && ops[i].atom == DW_OP_plus_uconst) n = static_cast<int64_t>(ops[i++].number);
    bool value = false;
    if (i < nops && ops[i].atom == DW_OP_stack_value) {
      value = true;
      ++i;
    }
    if (i != nops || !fits(n)) return false;
    rule = value ? CompactRow::Rule::kIsCfa : CompactRow::Rule::kAtCfa;
    offset = static_cast<int32_t>(n);
  }
  return true;
}

// The size of a value in DWARF pointer encoding `enc` (its low nibble: DW_EH_PE_udata4/sdata4
// and udata8/sdata8), or 0 for the forms ForEachRow does not read.
size_t EncodedSize(uint8_t enc) {
  switch (enc & 0x0f) {
    case DW_EH_PE_udata4:
    case DW_EH_PE_sdata4:
      return 4;
    case DW_EH_PE_udata8:
    case DW_EH_PE_sdata8:
      return 8;
    default:
      return 0;
  }
}

}  // namespace

Status CfiTable::ForEachRow(uint64_t max_rows,
                            const std::function<void(uint64_t, RowForm, const CompactRow&)>& f) const {
  // .eh_frame_hdr: version 1, eh_frame_ptr_enc, fde_count_enc, table_enc, eh_frame_ptr, fde_count,
  // then fde_count pairs (initial location, FDE address), sorted by initial location.
  const Bytes h = eh_frame_hdr_;
  if (h.empty() || eh_frame_ == nullptr) return NotFound(display_ + " has no .eh_frame_hdr");
  const size_t ptr_size = h.size() >= 4 ? EncodedSize(h[1]) : 0;
  const auto count = LoadAt<uint32_t>(h, 4 + ptr_size);
  if (h.size() < 4 || h[0] != 1 || ptr_size == 0 || h[2] != DW_EH_PE_udata4 ||
      h[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4) || !count) {
    return NotFound(display_ +
                    ": .eh_frame_hdr without the search table linkers write (version 1, a udata4 count, "
                    "a datarel sdata4 table)");
  }
  const size_t table = 4 + ptr_size + 4;
  if (*count > (h.size() - table) / 8) {
    return NotFound(display_ + ": .eh_frame_hdr's search table of " + std::to_string(*count) + " entries is past its " +
                    std::to_string(h.size()) + " bytes");
  }
  auto start_of = [&](uint64_t i) {  // within the table, checked above
    return eh_frame_hdr_address_ + static_cast<uint64_t>(int64_t{LoadAt<int32_t>(h, table + 8 * i).value()});
  };
  const CompactRow none{};
  uint64_t rows = 0;
  uint64_t last_offset = 0;
  bool any = false;
  // One row per call, in offset order (an out-of-order or overlapping entry is skipped).
  // Every row visited counts against the bound, emitted or not (a crafted table's rows outside
  // the file's segments cost as much to visit).
  auto emit = [&](uint64_t address, RowForm form, const CompactRow& row) {
    if (++rows > max_rows) return false;
    auto offset = elf::FileOffsetForAddress(segments_, address);
    // A gap that starts where a segment's file bytes end (its last function's FDE ends there)
    // still ends the row before it: one past the segment's last byte.
    if (!offset.ok() && form == RowForm::kNone && address > 0) {
      if (auto last = elf::FileOffsetForAddress(segments_, address - 1); last.ok()) offset = *last + 1;
    }
    if (!offset.ok() || (any && *offset <= last_offset)) return true;
    any = true;
    last_offset = *offset;
    f(*offset, form, row);
    return true;
  };
  auto exhausted = [&] {
    return Unavailable(display_ + ": more than " + std::to_string(max_rows) + " unwind table rows");
  };
  if (*count > max_rows) return exhausted();  // every FDE has a row at least
  for (uint64_t i = 0; i < *count; ++i) {
    const uint64_t next_fde = i + 1 < *count ? start_of(i + 1) : UINT64_MAX;
    uint64_t address = start_of(i);
    // The FDE's rows: each row's end (dwarf_frame_info) is the next row's start.
    while (address < next_fde) {
      Dwarf_Frame* raw = nullptr;
      if (dwarf_cfi_addrframe(eh_frame_, address, &raw) != 0 || raw == nullptr) break;
      FramePtr frame(raw);
      Dwarf_Addr start = 0, end = 0;
      bool signal = false;
      dwarf_frame_info(frame.get(), &start, &end, &signal);
      CompactRow row;
      const RowForm form = !signal && Compact(frame.get(), &row) ? RowForm::kCompact : RowForm::kFull;
      if (!emit(address, form, form == RowForm::kCompact ? row : none)) return exhausted();
      if (end <= address) break;  // a malformed row that does not advance
      address = end;
    }
    // Up to the next FDE (or past the last one), no FDE covers the code.
    if (address < next_fde && !emit(address, RowForm::kNone, none)) return exhausted();
  }
  return Status::Ok();
}

RowForm CfiTable::CompactRowAt(uint64_t offset, CompactRow* row) const {
  static_assert(kRowMemo == 512, "the hash below keeps 9 bits");
  if (memo_.empty()) memo_.resize(kRowMemo);
  // Code offsets of neighbouring frames differ in their low bits: a multiplicative hash spreads them.
  Memo& m = memo_[(offset * 0x9e3779b97f4a7c15ull) >> 55];
  if (m.offset_plus_1 != offset + 1) {
    m.offset_plus_1 = offset + 1;
    bool signal = false;
    FramePtr frame = RowAt(offset, &signal);
    if (frame == nullptr) {
      m.form = RowForm::kNone;
    } else {
      m.form = !signal && Compact(frame.get(), &m.row) ? RowForm::kCompact : RowForm::kFull;
    }
  }
  if (m.form == RowForm::kCompact) *row = m.row;
  return m.form;
}

}  // namespace tpe::unwind
