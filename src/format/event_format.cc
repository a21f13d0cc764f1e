#include "format/event_format.h"

#include <cctype>
#include <charconv>

namespace tpe {
namespace {

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Finds "key:<value>;" in `line` and returns the trimmed value.
bool FindAttr(std::string_view line, std::string_view key, std::string_view* value) {
  size_t pos = 0;
  while ((pos = line.find(key, pos)) != std::string_view::npos) {
    bool at_word_start = pos == 0 || !std::isalnum(static_cast<unsigned char>(line[pos - 1]));
    size_t after = pos + key.size();
    // Allow whitespace between the key and ':' (seen in hand-formatted copies).
    while (after < line.size() && line[after] == ' ') ++after;
    if (at_word_start && after < line.size() && line[after] == ':') {
      size_t end = line.find(';', after);
      if (end == std::string_view::npos) return false;
      *value = TrimView(line.substr(after + 1, end - after - 1));
      return true;
    }
    pos += key.size();
  }
  return false;
}

bool ParseU32(std::string_view s, uint32_t* out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The bytes of one element of an array whose element type is `type` ("char", "__u8",
// "unsigned short", "u32", "long"...), or 0 when the type is not a C scalar this knows.
uint32_t ElementBytes(std::string_view type) {
  auto has = [&](std::string_view w) { return type.find(w) != std::string_view::npos; };
  if (type.find('*') != std::string_view::npos) return 8;  // x86-64 pointers
  if (has("char") || has("u8") || has("s8") || has("bool")) return 1;
  if (has("short") || has("u16") || has("s16")) return 2;
  if (has("u64") || has("s64") || has("long")) return 8;
  if (has("int") || has("u32") || has("s32") || has("pid_t") || has("gfp_t")) return 4;
  return 0;
}

// The element count of "[LEN]": a number, as kernels since 5.x print it. Older kernels (5.10 and
// before: ftrace:branch "char func[30+1]", smbus "__u8 buf[32 + 2]", tcp:tcp_probe
// "__u8 saddr[sizeof(struct sockaddr_in6)]") print the length as the source spells it; a sum,
// difference or product of numbers is evaluated, anything else is the field's size over its
// element's size. False when neither works.
bool ParseArrayLength(std::string_view len, std::string_view type, uint32_t size, uint32_t* out) {
  if (ParseU32(len, out)) return true;
  // NUMBER ((+|-|*) NUMBER)*: products first, then sums and differences, left to right.
  int64_t sum = 0, product = 1;
  int sign = 1;
  bool shape_ok = true;
  size_t i = 0;
  while (shape_ok) {
    while (i < len.size() && len[i] == ' ') ++i;
    const size_t start = i;
    while (i < len.size() && std::isdigit(static_cast<unsigned char>(len[i]))) ++i;
    uint32_t n = 0;
    if (start == i || !ParseU32(len.substr(start, i - start), &n)) {
      shape_ok = false;
      break;
    }
    product *= n;
    if (product > UINT32_MAX) shape_ok = false;
    while (i < len.size() && len[i] == ' ') ++i;
    if (i == len.size() || len[i] != '*') {
      sum += sign * product;
      product = 1;
    }
    if (i == len.size()) break;
    if (len[i] == '+' || len[i] == '-') sign = len[i] == '-' ? -1 : 1;
    if (len[i] != '+' && len[i] != '-' && len[i] != '*') shape_ok = false;
    ++i;
  }
  if (shape_ok && sum >= 0 && sum <= UINT32_MAX) {
    *out = static_cast<uint32_t>(sum);
    return true;
  }
  const uint32_t elem = ElementBytes(type);
  if (elem == 0 || size % elem != 0) return false;
  *out = size / elem;
  return true;
}

// Splits a declaration "unsigned char prev_comm[16]" into type "char[16]"-style parts.
Status ParseDecl(std::string_view decl, FieldFormat* f, const std::string& where) {
  decl = TrimView(decl);
  std::string_view array_part;
  size_t bracket = decl.rfind('[');
  std::string_view before = decl;
  if (bracket != std::string_view::npos && decl.back() == ']') {
    array_part = decl.substr(bracket);  // "[16]" or "[]"
    before = TrimView(decl.substr(0, bracket));
  }
  // The name is the last identifier of `before`.
  size_t end = before.size();
  size_t start = end;
  while (start > 0 && (std::isalnum(static_cast<unsigned char>(before[start - 1])) || before[start - 1] == '_')) {
    --start;
  }
  if (start == end) return InvalidArgument(where + ": no field name in \"" + std::string(decl) + "\"");
  f->name = std::string(before.substr(start));
  std::string_view type = TrimView(before.substr(0, start));
  // `__data_loc char[] name`: the brackets belong to the type, before the name.
  f->type = std::string(type);
  if (!array_part.empty()) f->type += std::string(array_part);
  if (type.empty()) return InvalidArgument(where + ": no type for field \"" + f->name + "\"");

  bool is_char = type.find("char") != std::string_view::npos;
  if (type.find("__data_loc") != std::string_view::npos) {
    f->kind = FieldKind::kDataLoc;
  } else if (type.find("__rel_loc") != std::string_view::npos) {
    f->kind = FieldKind::kRelLoc;
  } else if (!array_part.empty()) {
    std::string_view len = array_part.substr(1, array_part.size() - 2);
    uint32_t n = 0;
    if (!len.empty() && !ParseArrayLength(len, type, f->size, &n)) {
      return InvalidArgument(where + ": array length \"" + std::string(len) + "\" of field \"" + f->name +
                             "\" is neither a number, nor a sum or product of numbers, nor a size this type's "
                             "elements divide (size " +
                             std::to_string(f->size) + ")");
    }
    f->array_len = n;
    f->kind = is_char ? FieldKind::kCharArray : FieldKind::kArray;
  } else if (type.find('*') != std::string_view::npos) {
    f->kind = FieldKind::kPointer;
  } else if (f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8) {
    f->kind = FieldKind::kInteger;
  } else {
    f->kind = FieldKind::kBytes;
  }
  return Status::Ok();
}

}  // namespace

const char* FieldKindName(FieldKind kind) {
  switch (kind) {
    case FieldKind::kInteger:
      return "integer";
    case FieldKind::kPointer:
      return "pointer";
    case FieldKind::kCharArray:
      return "char array";
    case FieldKind::kArray:
      return "array";
    case FieldKind::kDataLoc:
      return "__data_loc";
    case FieldKind::kRelLoc:
      return "__rel_loc";
    case FieldKind::kBytes:
      return "bytes";
  }
  return "?";
}

bool FieldFormat::IsString() const {
  if (kind == FieldKind::kCharArray) return true;
  if (kind == FieldKind::kDataLoc || kind == FieldKind::kRelLoc) {
    return type.find("char") != std::string::npos;
  }
  return false;
}

const FieldFormat* EventFormat::FindField(std::string_view n) const {
  for (const auto& f : fields) {
    if (f.name == n) return &f;
  }
  return nullptr;
}

std::string EventFormat::DescribeFields() const {
  std::string out;
  for (const auto& f : fields) {
    if (f.is_common) continue;
    if (!out.empty()) out += ", ";
    out += f.name + " (" + f.type + ")";
  }
  out += out.empty() ? "common_pid" : ", common_pid";
  return out;
}

StatusOr<EventFormat> ParseFormat(std::string_view text, const std::string& source) {
  EventFormat ev;
  bool have_name = false, have_id = false;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    std::string_view line = TrimView(raw);
    std::string where = source + ":" + std::to_string(line_no);
    if (line.empty() || line == "format:") continue;
    if (line.starts_with("name:")) {
      ev.name = std::string(TrimView(line.substr(5)));
      have_name = true;
    } else if (line.starts_with("ID:")) {
      std::string_view v = TrimView(line.substr(3));
      auto r = std::from_chars(v.data(), v.data() + v.size(), ev.id);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size()) {
        return InvalidArgument(where + ": ID \"" + std::string(v) + "\" is not a number");
      }
      have_id = true;
    } else if (line.starts_with("print fmt:")) {
      // The print fmt is the last section and may span lines (e.g. ext4:ext4_fsmap_low_key).
      std::string rest(raw.substr(raw.find("print fmt:") + 10));
      if (!text.empty()) rest += "\n" + std::string(text);
      ev.print_fmt = std::string(TrimView(rest));
      break;
    } else if (line.starts_with("field")) {
      FieldFormat f;
      std::string_view decl, off, size, sign;
      size_t colon = line.find(':');
      size_t semi = line.find(';');
      if (colon == std::string_view::npos || semi == std::string_view::npos || semi < colon) {
        return InvalidArgument(where + ": expected \"field:<type> <name>;\"");
      }
      decl = line.substr(colon + 1, semi - colon - 1);
      std::string_view rest = line.substr(semi + 1);
      if (!FindAttr(rest, "offset", &off) || !FindAttr(rest, "size", &size)) {
        return InvalidArgument(where + ": expected \"offset:<n>; size:<n>;\" after the field");
      }
      if (!ParseU32(off, &f.offset) || !ParseU32(size, &f.size)) {
        return InvalidArgument(where + ": offset \"" + std::string(off) + "\" or size \"" + std::string(size) +
                               "\" is not a number");
      }
      if (FindAttr(rest, "signed", &sign)) f.is_signed = sign == "1";
      TPE_RETURN_IF_ERROR(ParseDecl(decl, &f, where));
      if ((f.kind == FieldKind::kDataLoc || f.kind == FieldKind::kRelLoc) && f.size != 4) {
        return InvalidArgument(where + ": " + FieldKindName(f.kind) + " field \"" + f.name + "\" has size " +
                               std::to_string(f.size) + ", expected 4");
      }
      f.is_common = f.name.starts_with("common_");
      ev.fields.push_back(std::move(f));
    } else {
      return InvalidArgument(where + ": unexpected line \"" + std::string(line.substr(0, 60)) +
                             "\" (expected name:, ID:, format:, field:, or print fmt:)");
    }
  }
  if (!have_name) return InvalidArgument(source + ": no \"name:\" line; is this a tracefs format file?");
  if (!have_id) return InvalidArgument(source + ": no \"ID:\" line; is this a tracefs format file?");
  if (ev.fields.empty()) return InvalidArgument(source + ": no \"field:\" lines");
  return ev;
}

}  // namespace tpe
