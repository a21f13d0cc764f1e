// Name tables of enums: one array of {value, "name"} pairs per enum (bpftrace's probe_types.h
// style), from which parsing a name, printing a value and the list of valid names in an error
// message all come, so that the three never disagree.
//
// An enum takes part by declaring, in its own namespace (found by argument-dependent lookup):
//
//   inline constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kBlue, "blue"}};
//   constexpr std::span<const EnumName<Color>> NameTable(Color) { return kColorNames; }
//
// A value left out of the table (e.g. a kNone meaning "not set") has the name "" and no name
// parses to it.
//
// Pure, constexpr where it can be; thread-safe.
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tpe {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
  // Said after the name in a list of valid names, in parentheses ("dwarf (the default: ...)");
  // empty: nothing.
  std::string_view note = {};
};

template <typename E>
concept NamedEnum = requires(E e) {
  { NameTable(e) } -> std::convertible_to<std::span<const EnumName<E>>>;
};

// The value named `name` (exactly: case matters), or nullopt when no entry has that name.
template <NamedEnum E>
constexpr std::optional<E> FromName(std::string_view name) {
  for (const EnumName<E>& e : NameTable(E{})) {
    if (e.name == name) return e.value;
  }
  return std::nullopt;
}

// The name of `value`; "" for a value that has no entry.
template <NamedEnum E>
constexpr std::string_view NameOf(E value) {
  for (const EnumName<E>& e : NameTable(E{})) {
    if (e.value == value) return e.name;
  }
  return {};
}

// Every name of the table but those of `except`, in table order, comma-separated, each with its
// note: "auto, bpf, perf", "dwarf (the default: ...), frame_pointer (...)".
template <NamedEnum E>
std::string NameList(std::initializer_list<E> except = {}) {
  std::string out;
  for (const EnumName<E>& e : NameTable(E{})) {
    bool skip = false;
    for (E x : except) skip |= x == e.value;
    if (skip) continue;
    if (!out.empty()) out += ", ";
    out += e.name;
    if (!e.note.empty()) {
      out += " (";
      out += e.note;
      out += ")";
    }
  }
  return out;
}

// The error text for a name that is none of E's (or one of `except`): `culprit` (the name as the
// caller shows untrusted text, e.g. quoted and escaped) + " is not one of " + NameList(except).
template <NamedEnum E>
std::string NotOneOf(std::string_view culprit, std::initializer_list<E> except = {}) {
  return std::string(culprit) + " is not one of " + NameList<E>(except);
}

}  // namespace tpe
