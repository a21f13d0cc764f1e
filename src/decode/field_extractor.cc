#include "decode/field_extractor.h"

#include <arpa/inet.h>
#include <seccomp.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace tpe {

std::optional<LabelDecode> ParseLabelDecode(std::string_view s) { return FromName<LabelDecode>(s); }

std::string LabelDecodeNames() { return NameList<LabelDecode>(); }

std::string ErrnoName(int64_t v) {
  if (v >= 0 || v < -static_cast<int64_t>(INT_MAX)) return "";
  const char* name = strerrorname_np(static_cast<int>(-v));
  return name == nullptr ? "" : name;
}

std::string SyscallName(int64_t nr) {
  if (nr < 0 || nr > INT32_MAX) return std::to_string(nr);
  char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, static_cast<int>(nr));
  if (name == nullptr) return std::to_string(nr);
  std::string out(name);
  std::free(name);
  return out;
}

std::string FormatInetAddress(Bytes addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.size() == 4) {
    inet_ntop(AF_INET, addr.data(), buf, sizeof(buf));
  } else if (addr.size() == 16) {
    inet_ntop(AF_INET6, addr.data(), buf, sizeof(buf));
  } else {
    return "";
  }
  return buf;
}

Status FieldExtractor::CheckFits(const FieldFormat& f, LabelDecode d, const SymbolTable* s) {
  const std::string what = "field \"" + f.name + "\" (" + f.type + ", " + std::to_string(f.size) + " bytes)";
  switch (d) {
    case LabelDecode::kAuto:
      break;
    case LabelDecode::kHex:
      if (!f.IsNumeric() && f.kind != FieldKind::kArray && f.kind != FieldKind::kBytes &&
          !((f.kind == FieldKind::kDataLoc || f.kind == FieldKind::kRelLoc) && !f.IsString())) {
        return InvalidArgument("decode \"hex\" needs an integer or byte array; " + what + " is text: use \"auto\"");
      }
      break;
    case LabelDecode::kInet: {
      bool addr_array = f.kind == FieldKind::kArray && (f.size == 4 || f.size == 16);
      bool addr_int = f.kind == FieldKind::kInteger && f.size == 4;
      if (!addr_array && !addr_int) {
        return InvalidArgument("decode \"inet\" needs a 4-byte (IPv4) or 16-byte (IPv6) address; " + what +
                               " is not one: use \"auto\" or \"hex\"");
      }
      break;
    }
    case LabelDecode::kSyscall:
      if (f.kind != FieldKind::kInteger) {
        return InvalidArgument(
            "decode \"syscall\" needs an integer field holding a system call number (e.g. "
            "raw_syscalls:sys_enter id); " +
            what + " is not one");
      }
      break;
    case LabelDecode::kSymbolic:
      if (!f.IsNumeric()) return InvalidArgument("decode \"symbolic\" needs an integer field; " + what + " is not");
      if (s == nullptr) {
        return InvalidArgument(
            "decode \"symbolic\": the event's print fmt has no __print_symbolic or "
            "__print_flags table for " +
            what + "; use \"auto\" or \"hex\"");
      }
      if (s->entries.empty()) {
        return InvalidArgument("decode \"symbolic\": the table for " + what +
                               " has no numeric values (unresolved names such as " +
                               (s->unresolved.empty() ? std::string("?") : s->unresolved.front()) +
                               "; kernel BTF is needed to resolve them); use \"auto\"");
      }
      break;
    case LabelDecode::kErrno:
      if (f.kind != FieldKind::kInteger) {
        return InvalidArgument(
            "decode \"errno\" needs an integer field holding a negative errno (e.g. "
            "syscalls:sys_exit_openat ret); " +
            what + " is not one: use \"auto\"");
      }
      break;
    case LabelDecode::kBlkdev:
      if (f.kind != FieldKind::kInteger) {
        return InvalidArgument(
            "decode \"blkdev\" needs an integer field holding a kernel dev_t (e.g. "
            "block:block_rq_issue dev); " +
            what + " is not one: use \"auto\"");
      }
      break;
    case LabelDecode::kKsym:
      if (f.kind != FieldKind::kPointer && !(f.kind == FieldKind::kInteger && f.size == 8)) {
        return InvalidArgument(
            "decode \"ksym\" needs a pointer or 8-byte integer field holding a kernel address (e.g. "
            "workqueue:workqueue_execute_start function); " +
            what + " is not one: use \"auto\" or \"hex\"");
      }
      break;
  }
  return Status::Ok();
}

StatusOr<FieldExtractor> FieldExtractor::Compile(const FieldFormat& f, LabelDecode d, const SymbolTable* s,
                                                 const DecodeSources& sources) {
  TPE_RETURN_IF_ERROR(CheckFits(f, d, s));
  FieldExtractor ex(f, d, s == nullptr ? nullptr : std::make_shared<const SymbolTable>(*s));
  if (d == LabelDecode::kKsym) {
    auto syms = KernelSymbols::Load(sources.kallsyms);
    if (!syms.ok()) return syms.status().WithContext("decode \"ksym\"");
    ex.ksyms_ = std::move(*syms);
  }
  if (d == LabelDecode::kBlkdev) ex.blkdevs_ = BlockDevNames::Shared(sources.sys_dev_block);
  return ex;
}

namespace {

bool NameHas(const FieldFormat& f, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) {
    if (f.name.find(p) != std::string::npos) return true;
  }
  return false;
}

// Whether a decode that fits `f`'s shape is worth suggesting for it (see FittingDecodes).
bool Suggested(const FieldFormat& f, LabelDecode d) {
  switch (d) {
    case LabelDecode::kInet:
      return f.kind == FieldKind::kArray || NameHas(f, {"addr"});
    case LabelDecode::kSyscall:
      return f.name == "id" || f.name == "nr" || f.name.ends_with("syscall_nr");
    case LabelDecode::kBlkdev:
      return f.type.find("dev_t") != std::string::npos || f.name == "dev";
    case LabelDecode::kErrno:  // signed, and not one of the ints that are never error codes
      return f.is_signed && !f.is_common && !NameHas(f, {"pid", "cpu", "prio", "state"});
    case LabelDecode::kKsym:
      return f.kind == FieldKind::kPointer || f.name == "ip" || f.name.ends_with("_ip") ||
             NameHas(f, {"call_site", "func", "caller"});
    default:
      return true;
  }
}

}  // namespace

std::vector<std::string> FittingDecodes(const FieldFormat& field, const SymbolTable* symbols) {
  std::vector<std::string> out;
  for (const EnumName<LabelDecode>& d : kLabelDecodeNames) {
    if (FieldExtractor::CheckFits(field, d.value, symbols).ok() && Suggested(field, d.value)) {
      out.emplace_back(d.name);
    }
  }
  return out;
}

std::string FormatCpumask(Bytes mask) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  bool started = false;
  for (size_t i = mask.size(); i-- > 0;) {  // little-endian longs: the last byte is most significant
    for (int shift : {4, 0}) {
      int nibble = (mask[i] >> shift) & 0xf;
      if (nibble == 0 && !started) continue;
      started = true;
      out += kHex[nibble];
    }
  }
  if (!started) out += '0';
  return out;
}

bool FieldExtractor::ReadInteger(Bytes raw, int64_t* out) const {
  if (!field_.IsNumeric()) return false;
  switch (field_.size) {
    case 1: {
      auto v = LoadAt<uint8_t>(raw, field_.offset);
      if (!v) return false;
      *out = field_.is_signed ? static_cast<int8_t>(*v) : *v;
      return true;
    }
    case 2: {
      auto v = LoadAt<uint16_t>(raw, field_.offset);
      if (!v) return false;
      *out = field_.is_signed ? static_cast<int16_t>(*v) : *v;
      return true;
    }
    case 4: {
      auto v = LoadAt<uint32_t>(raw, field_.offset);
      if (!v) return false;
      *out = field_.is_signed ? static_cast<int32_t>(*v) : static_cast<int64_t>(*v);
      return true;
    }
    case 8: {
      auto v = LoadAt<uint64_t>(raw, field_.offset);
      if (!v) return false;
      *out = static_cast<int64_t>(*v);
      return true;
    }
    default:
      return false;
  }
}

bool FieldExtractor::DynamicBytes(Bytes raw, Bytes* out) const {
  uint32_t begin = 0, len = 0;
  if (field_.kind == FieldKind::kCharArray) {
    begin = field_.offset;
    len = field_.size;
  } else {
    auto loc = LoadAt<uint32_t>(raw, field_.offset);
    if (!loc) return false;
    begin = *loc & 0xffff;
    len = *loc >> 16;
    if (field_.kind == FieldKind::kRelLoc) begin += field_.offset + field_.size;
  }
  if (begin > raw.size() || raw.size() - begin < len) return false;
  size_t n = len;
  if (field_.IsString()) n = strnlen(reinterpret_cast<const char*>(raw.data() + begin), len);  // stop at the NUL
  *out = raw.subspan(begin, std::min(n, kMaxStringLabelBytes));
  return true;
}

bool FieldExtractor::AppendKey(Bytes raw, std::string* key) const {
  if (field_.IsString() || IsDynamic()) {
    Bytes s;
    if (!DynamicBytes(raw, &s)) return false;
    uint16_t n = static_cast<uint16_t>(s.size());
    key->append(reinterpret_cast<const char*>(&n), sizeof(n));
    key->append(reinterpret_cast<const char*>(s.data()), s.size());
    return true;
  }
  if (field_.IsNumeric()) {
    int64_t v = 0;
    if (!ReadInteger(raw, &v)) return false;
    key->append(reinterpret_cast<const char*>(&v), sizeof(v));
    return true;
  }
  // Fixed arrays and opaque bytes: the raw bytes, a fixed-size segment.
  if (field_.offset > raw.size() || raw.size() - field_.offset < field_.size) return false;
  key->append(reinterpret_cast<const char*>(raw.data() + field_.offset), field_.size);
  return true;
}

std::string FieldExtractor::Render(std::string_view key, size_t* pos) const {
  auto bytes_at = [&](size_t n) {
    std::string_view seg = key.substr(std::min(*pos, key.size()), n);
    *pos += n;
    return seg;
  };
  char buf[40];
  if (field_.IsString() || IsDynamic()) {
    uint16_t n = 0;
    std::string_view len = bytes_at(sizeof(n));
    if (len.size() == sizeof(n)) std::memcpy(&n, len.data(), sizeof(n));
    std::string_view seg = bytes_at(n);
    if (field_.IsString()) return std::string(seg);
    Bytes b(reinterpret_cast<const uint8_t*>(seg.data()), seg.size());
    if (field_.type.find("cpumask") != std::string::npos) return FormatCpumask(b);
    std::string out = "0x";
    for (uint8_t c : b) {
      std::snprintf(buf, sizeof(buf), "%02x", c);
      out += buf;
    }
    return out;
  }
  if (field_.IsNumeric()) {
    int64_t v = 0;
    std::string_view seg = bytes_at(sizeof(v));
    if (seg.size() == sizeof(v)) std::memcpy(&v, seg.data(), sizeof(v));
    return RenderInteger(v);
  }
  std::string_view seg = bytes_at(field_.size);
  Bytes b(reinterpret_cast<const uint8_t*>(seg.data()), seg.size());
  if (decode_ == LabelDecode::kInet) return FormatInetAddress(b);
  std::string out = "0x";
  for (uint8_t c : b) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

std::string FieldExtractor::RenderInteger(int64_t v) const {
  char buf[40];
  switch (decode_) {
    case LabelDecode::kErrno: {
      std::string name = ErrnoName(v);
      if (!name.empty()) return name;
      break;  // the number, as "auto" shows it
    }
    case LabelDecode::kBlkdev:
      return blkdevs_->Name(static_cast<uint64_t>(v) & 0xffffffffu);
    case LabelDecode::kKsym:
      return ksyms_->Resolve(static_cast<uint64_t>(v));
    case LabelDecode::kSymbolic:
      return symbols_->Render(static_cast<uint64_t>(v));
    case LabelDecode::kSyscall:
      return SyscallName(v);
    case LabelDecode::kInet: {
      uint32_t a = static_cast<uint32_t>(v);
      return FormatInetAddress(Bytes(reinterpret_cast<const uint8_t*>(&a), 4));
    }
    case LabelDecode::kHex:
      std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
      return buf;
    case LabelDecode::kAuto:
      break;
  }
  if (field_.kind == FieldKind::kPointer) {
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  } else if (field_.is_signed) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(v));
  }
  return buf;
}

}  // namespace tpe
