// How a field label's value is rendered ("decode" of a label in the config): the enum and its
// one name table (common/name_table.h), which the config parser, the decode suggestions and
// every message take their names from. FieldExtractor (decode/field_extractor.h) implements each.
//
// Pure; thread-safe.
#pragma once

#include <span>

#include "common/name_table.h"

namespace tpe {

enum class LabelDecode {
  kAuto,      // integers in decimal (pointers in hex), strings as text, arrays as hex bytes
  kHex,       // integers as 0x<hex>
  kInet,      // 4-byte (IPv4) or 16-byte (IPv6) address arrays, or a 4-byte integer (IPv4)
  kSymbolic,  // the name from the format's __print_symbolic / __print_flags table
  kSyscall,   // a system call number as its name on this architecture (libseccomp), e.g. "read"
  kErrno,     // a negative errno as its name (glibc strerrorname_np), -2 -> "ENOENT"; else the number
  kBlkdev,    // a kernel dev_t (MAJOR = dev >> 20) as the disk name from /sys/dev/block, or "M:m"
  kKsym,      // a kernel address as "symbol" or "symbol+0xoff" from /proc/kallsyms
};

inline constexpr EnumName<LabelDecode> kLabelDecodeNames[] = {
    {LabelDecode::kAuto, "auto"},         {LabelDecode::kHex, "hex"},         {LabelDecode::kInet, "inet"},
    {LabelDecode::kSymbolic, "symbolic"}, {LabelDecode::kSyscall, "syscall"}, {LabelDecode::kErrno, "errno"},
    {LabelDecode::kBlkdev, "blkdev"},     {LabelDecode::kKsym, "ksym"},
};
constexpr std::span<const EnumName<LabelDecode>> NameTable(LabelDecode) { return kLabelDecodeNames; }

}  // namespace tpe
