// USDT (SystemTap SDT) probes: the `.note.stapsdt` notes that <sys/sdt.h> emits, and their
// argument specs, for x86-64.
//
// A probe site is a `nop` whose address, together with where to find each argument, the
// compiler recorded in a non-allocated ELF note (name "stapsdt", type 3). Its descriptor is:
//
//   u64 pc           link-time address of the nop
//   u64 base         link-time address of the .stapsdt.base section (0 in very old notes)
//   u64 semaphore    link-time address of `unsigned short provider_name_semaphore` (0 = none)
//   char provider[]  NUL-terminated
//   char name[]      NUL-terminated
//   char args[]      NUL-terminated, space-separated argument specs, e.g. "-4@%eax 8@-16(%rbp)"
//
// Each argument spec is `[SIZE@]OPERAND`: SIZE is the byte size, negative when signed
// ("-4" = int32_t); OPERAND is a gas AT&T operand: "$42" (constant), "%rdi" (register),
// "-16(%rbp)" / "(%rax)" (memory at register + displacement).
//
// Because the note is not allocated, prelink does not relocate it; instead the decoder compares
// the note's `base` with the actual address of the .stapsdt.base section and shifts `pc` and
// `semaphore` by the difference (systemtap wiki "UserSpaceProbeImplementation"; libbpf usdt.c
// applies it to pc, systemtap/bcc also to the semaphore).
//
// Sources: /usr/include/x86_64-linux-gnu/sys/sdt.h (systemtap-sdt-dev),
// https://sourceware.org/systemtap/wiki/UserSpaceProbeImplementation, libbpf src/usdt.c
// (parse_usdt_note, parse_usdt_arg) as reference; the kernel's uprobe fetch-arg register names
// from Documentation/trace/uprobetracer.rst and arch/x86/kernel/ptrace.c (regoffset_table).
//
// Pure: no I/O. Thread-safety: values and free functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "elf/address.h"

namespace tpe::elf {

enum class UsdtArgKind {
  kConstant,  // "$5": `value` is the constant
  kRegister,  // "%rdi": the value is in register `reg`
  kMemory,    // "-16(%rbp)": the value is at address reg + `value` in the probed process
};

// One parsed argument spec.
struct UsdtArgument {
  int size = 8;            // bytes: 1, 2, 4 or 8 (8 when the spec has no "SIZE@")
  bool is_signed = false;  // the spec's size was negative
  UsdtArgKind kind = UsdtArgKind::kRegister;
  // The canonical 64-bit x86-64 register as the kernel's fetch args name it, without '%':
  // "ax","bx","cx","dx","si","di","bp","sp","r8".."r15","ip", whatever sub-register the spec
  // used (%eax, %ax, %al, %r8d -> "ax", "r8"). Empty for kConstant.
  std::string reg;
  int64_t value = 0;  // kConstant: the constant; kMemory: the displacement in bytes; else 0
  std::string spec;   // the original text, e.g. "-4@-16(%rbp)"
  bool operator==(const UsdtArgument&) const = default;
};

// Parses one x86-64 argument spec: "8@%rbp", "-4@-16(%rbp)", "-4@$-9", "8@(%rax)", "%rdi",
// "4@$0x2a". Numbers are decimal or 0x-hex, optionally negative.
// Errors: InvalidArgument naming the spec (bad size, unknown register, malformed operand);
// Unimplemented naming the spec for valid operands this code cannot turn into one fetch arg:
// a symbolic displacement ("8@foo(%rip)") and base+index*scale ("1@-96(%rbp,%rax,8)").
StatusOr<UsdtArgument> ParseUsdtArgument(const std::string& spec);

// Parses a note's space-separated argument specs ("" -> no arguments). Errors: those of
// ParseUsdtArgument, with context "argument #N" (0-based).
StatusOr<std::vector<UsdtArgument>> ParseUsdtArguments(std::string_view args);

// One "stapsdt" note's descriptor, as recorded (link-time addresses, no adjustment).
struct StapsdtNote {
  uint64_t pc = 0;
  uint64_t base = 0;
  uint64_t semaphore = 0;
  std::string provider;
  std::string name;
  std::string args;  // raw argument specs ("" when the probe has none)
  bool operator==(const StapsdtNote&) const = default;
};

// Parses the bytes of a `.note.stapsdt` section of a little-endian ELF64 file: a sequence of
// notes (u32 namesz, u32 descsz, u32 type, name and desc each padded to 4 bytes). Notes that are
// not name "stapsdt" type 3 are skipped.
// Errors: InvalidArgument naming the byte offset of the culprit note: a header or payload that
// runs past the section (truncated), a descriptor shorter than 3 addresses + 3 strings, a
// string that is not NUL-terminated, an empty provider or name.
StatusOr<std::vector<StapsdtNote>> ParseStapsdtNotes(std::string_view section);

// A USDT probe site resolved for uprobe_events (`PATH:0xfile_offset(0xsemaphore_file_offset)`).
struct UsdtProbe {
  std::string provider;
  std::string name;
  uint64_t address = 0;                // pc after the .stapsdt.base adjustment (virtual)
  uint64_t file_offset = 0;            // of `address`, through the PT_LOAD segments
  uint64_t semaphore_address = 0;      // after the same adjustment; 0 = no semaphore
  uint64_t semaphore_file_offset = 0;  // 0 = no semaphore (the kernel's ref_ctr_offset)
  std::string args_spec;               // the note's raw argument specs
  std::vector<UsdtArgument> args;      // parsed `args_spec` (empty when args_status is not ok)
  Status args_status;                  // why `args_spec` could not be parsed; ok otherwise
  std::string FullName() const { return provider + ":" + name; }
};

// Resolves a note: shifts pc and semaphore by `stapsdt_base - note.base` when both are nonzero
// (`stapsdt_base` is the sh_addr of the file's .stapsdt.base section, 0 when it has none), maps
// them to file offsets through `segments`, and parses the arguments (a failure there goes to
// args_status, not to the result, so the probe can still be counted).
// Errors: InvalidArgument naming the probe when the pc is in no executable file-backed segment
// or the semaphore in no writable one.
StatusOr<UsdtProbe> ResolveUsdtProbe(const StapsdtNote& note, uint64_t stapsdt_base,
                                     const std::vector<LoadSegment>& segments);

}  // namespace tpe::elf
