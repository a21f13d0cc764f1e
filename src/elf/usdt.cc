#include "elf/usdt.h"

#include <charconv>
#include <cstdio>
#include <cstring>

namespace tpe::elf {
namespace {

constexpr uint32_t kStapsdtNoteType = 3;  // sdt.h _SDT_NOTE_TYPE
constexpr size_t kNoteHeaderBytes = 12;   // Elf64_Nhdr: namesz, descsz, type (u32 each)

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The kernel's x86-64 fetch-arg name for a register and all its gas spellings.
struct RegisterNames {
  const char* canonical;
  const char* spellings[4];  // 64, 32, 16, 8 bit
};
constexpr RegisterNames kRegisters[] = {
    {"ax", {"rax", "eax", "ax", "al"}},       {"bx", {"rbx", "ebx", "bx", "bl"}},
    {"cx", {"rcx", "ecx", "cx", "cl"}},       {"dx", {"rdx", "edx", "dx", "dl"}},
    {"si", {"rsi", "esi", "si", "sil"}},      {"di", {"rdi", "edi", "di", "dil"}},
    {"bp", {"rbp", "ebp", "bp", "bpl"}},      {"sp", {"rsp", "esp", "sp", "spl"}},
    {"ip", {"rip", "eip", "ip", "ip"}},       {"r8", {"r8", "r8d", "r8w", "r8b"}},
    {"r9", {"r9", "r9d", "r9w", "r9b"}},      {"r10", {"r10", "r10d", "r10w", "r10b"}},
    {"r11", {"r11", "r11d", "r11w", "r11b"}}, {"r12", {"r12", "r12d", "r12w", "r12b"}},
    {"r13", {"r13", "r13d", "r13w", "r13b"}}, {"r14", {"r14", "r14d", "r14w", "r14b"}},
    {"r15", {"r15", "r15d", "r15w", "r15b"}},
};

// "" when `name` (without '%') is not a general-purpose register we can fetch.
std::string CanonicalRegister(std::string_view name) {
  for (const RegisterNames& r : kRegisters) {
    for (const char* s : r.spellings) {
      if (name == s) return r.canonical;
    }
  }
  return "";
}

// Parses all of `text` as [-](decimal | 0xhex) into a 64-bit two's complement value.
bool ParseInteger(std::string_view text, int64_t* out) {
  bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  if (text.empty()) return false;
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), magnitude, base);
  if (ec != std::errc() || end != text.data() + text.size()) return false;
  if (negative && magnitude > (uint64_t{1} << 63)) return false;
  *out = static_cast<int64_t>(negative ? 0 - magnitude : magnitude);
  return true;
}

// True when `text` is [-]digits (a "SIZE" before '@').
bool IsSizePrefix(std::string_view text) {
  if (!text.empty() && text[0] == '-') text.remove_prefix(1);
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

uint64_t ReadU64(const char* p) {
  uint64_t v;  // x86-64 ELF is little-endian, like the only host this code builds for
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint32_t ReadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t Align4(uint64_t n) { return (n + 3) & ~uint64_t{3}; }

// Parses a stapsdt descriptor; `where` prefixes errors.
StatusOr<StapsdtNote> ParseDescriptor(std::string_view desc, const std::string& where) {
  constexpr size_t kAddrBytes = 3 * sizeof(uint64_t);
  if (desc.size() < kAddrBytes + 3) {
    return InvalidArgument(where + ": descriptor is " + std::to_string(desc.size()) +
                           " bytes, shorter than 3 addresses and 3 strings");
  }
  StapsdtNote note;
  note.pc = ReadU64(desc.data());
  note.base = ReadU64(desc.data() + 8);
  note.semaphore = ReadU64(desc.data() + 16);
  std::string_view rest = desc.substr(kAddrBytes);
  std::string* fields[] = {&note.provider, &note.name, &note.args};
  const char* labels[] = {"provider", "name", "argument specs"};
  for (int i = 0; i < 3; ++i) {
    size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) return InvalidArgument(where + ": " + labels[i] + " is not NUL-terminated");
    *fields[i] = std::string(rest.substr(0, nul));
    rest.remove_prefix(nul + 1);
  }
  if (note.provider.empty() || note.name.empty()) {
    return InvalidArgument(where + ": empty provider or name (\"" + note.provider + ":" + note.name + "\")");
  }
  return note;
}

}  // namespace

StatusOr<UsdtArgument> ParseUsdtArgument(const std::string& spec) {
  auto invalid = [&](const std::string& why) { return InvalidArgument("USDT argument \"" + spec + "\": " + why); };
  auto unimplemented = [&](const std::string& why) { return Unimplemented("USDT argument \"" + spec + "\": " + why); };
  UsdtArgument arg;
  arg.spec = spec;
  std::string_view s = spec;
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);

  size_t at = s.find('@');
  if (at != std::string_view::npos && IsSizePrefix(s.substr(0, at))) {
    int64_t size = 0;
    if (!ParseInteger(s.substr(0, at), &size)) return invalid("bad size");
    arg.is_signed = size < 0;
    arg.size = static_cast<int>(size < 0 ? -size : size);
    if (arg.size != 1 && arg.size != 2 && arg.size != 4 && arg.size != 8) {
      return invalid("size " + std::to_string(size) + " is not 1, 2, 4 or 8 bytes (negative = signed)");
    }
    s.remove_prefix(at + 1);
  }
  if (s.empty()) return invalid("no operand");

  if (s[0] == '$') {
    arg.kind = UsdtArgKind::kConstant;
    if (ParseInteger(s.substr(1), &arg.value)) return arg;
    return unimplemented("symbolic or malformed constant \"" + std::string(s) + "\"");
  }
  if (s[0] == '%') {
    arg.kind = UsdtArgKind::kRegister;
    arg.reg = CanonicalRegister(s.substr(1));
    if (arg.reg.empty()) return invalid("unknown register \"" + std::string(s) + "\"");
    return arg;
  }

  // Memory: [DISP](%BASE[,%INDEX[,SCALE]]).
  size_t open = s.find('(');
  if (open == std::string_view::npos) return unimplemented("absolute memory operand \"" + std::string(s) + "\"");
  if (s.back() != ')') return invalid("memory operand does not end in ')'");
  std::string_view disp = s.substr(0, open);
  std::string_view inside = s.substr(open + 1, s.size() - open - 2);
  if (inside.find(',') != std::string_view::npos) {
    return unimplemented("base+index*scale operand \"" + std::string(s) + "\" is not one fetch arg");
  }
  arg.kind = UsdtArgKind::kMemory;
  if (!disp.empty() && !ParseInteger(disp, &arg.value)) {
    return unimplemented("symbolic displacement \"" + std::string(disp) + "\"");
  }
  if (inside.empty() || inside[0] != '%') return invalid("memory operand has no base register");
  arg.reg = CanonicalRegister(inside.substr(1));
  if (arg.reg.empty()) return invalid("unknown register \"" + std::string(inside) + "\"");
  return arg;
}

StatusOr<std::vector<UsdtArgument>> ParseUsdtArguments(std::string_view args) {
  std::vector<UsdtArgument> out;
  size_t i = 0;
  while (i < args.size()) {
    if (IsSpace(args[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < args.size() && !IsSpace(args[end])) ++end;
    auto arg = ParseUsdtArgument(std::string(args.substr(i, end - i)));
    if (!arg.ok()) return arg.status().WithContext("argument #" + std::to_string(out.size()));
    out.push_back(std::move(arg).value());
    i = end;
  }
  return out;
}

StatusOr<std::vector<StapsdtNote>> ParseStapsdtNotes(std::string_view section) {
  std::vector<StapsdtNote> notes;
  uint64_t off = 0;
  while (off < section.size()) {
    std::string where = "note at byte " + std::to_string(off) + " of .note.stapsdt";
    if (section.size() - off < kNoteHeaderBytes) {
      return InvalidArgument(where + ": truncated header (" + std::to_string(section.size() - off) + " bytes left)");
    }
    uint32_t namesz = ReadU32(section.data() + off);
    uint32_t descsz = ReadU32(section.data() + off + 4);
    uint32_t type = ReadU32(section.data() + off + 8);
    uint64_t name_off = off + kNoteHeaderBytes;
    uint64_t desc_off = name_off + Align4(namesz);
    if (desc_off > section.size() || descsz > section.size() - desc_off) {
      return InvalidArgument(where + ": name (" + std::to_string(namesz) + " bytes) and descriptor (" +
                             std::to_string(descsz) + " bytes) run past the section's " +
                             std::to_string(section.size()) + " bytes (truncated)");
    }
    std::string_view name = section.substr(name_off, namesz);
    while (!name.empty() && name.back() == '\0') name.remove_suffix(1);
    if (name == "stapsdt" && type == kStapsdtNoteType) {
      TPE_ASSIGN_OR_RETURN(StapsdtNote note, ParseDescriptor(section.substr(desc_off, descsz), where));
      notes.push_back(std::move(note));
    }
    off = desc_off + Align4(descsz);
  }
  return notes;
}

StatusOr<UsdtProbe> ResolveUsdtProbe(const StapsdtNote& note, uint64_t stapsdt_base,
                                     const std::vector<LoadSegment>& segments) {
  UsdtProbe probe;
  probe.provider = note.provider;
  probe.name = note.name;
  // Unsigned wrap-around makes this right whichever way the section moved.
  uint64_t delta = (stapsdt_base != 0 && note.base != 0) ? stapsdt_base - note.base : 0;
  probe.address = note.pc + delta;
  // The file offset of `address` in a segment with the wanted permission, or why not.
  auto offset_in = [&](uint64_t address, bool executable, const std::string& what) -> StatusOr<uint64_t> {
    const LoadSegment* seg = SegmentForAddress(segments, address);
    if (seg == nullptr || (executable ? !seg->executable : !seg->writable)) {
      return InvalidArgument("USDT probe " + probe.FullName() + ": " + what + " " + Hex(address) + " is in no " +
                             (executable ? "executable" : "writable file-backed") + " PT_LOAD segment");
    }
    return address - seg->vaddr + seg->offset;
  };
  TPE_ASSIGN_OR_RETURN(probe.file_offset, offset_in(probe.address, true, "pc"));
  if (note.semaphore != 0) {
    probe.semaphore_address = note.semaphore + delta;
    TPE_ASSIGN_OR_RETURN(probe.semaphore_file_offset, offset_in(probe.semaphore_address, false, "semaphore"));
  }
  probe.args_spec = note.args;
  auto args = ParseUsdtArguments(note.args);
  if (args.ok()) {
    probe.args = std::move(args).value();
  } else {
    probe.args_status = args.status().WithContext("USDT probe " + probe.FullName());
  }
  return probe;
}

}  // namespace tpe::elf
