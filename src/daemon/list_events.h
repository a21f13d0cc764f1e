// --list-events[=GLOB]: every tracepoint whose "system:event" matches GLOB (fnmatch(3)), with
// its event id and fields (name, type, size, signedness, and the label decodes that fit each
// field — FittingDecodes, the same checks the config loader applies) — what a config may name.
// A probe GLOB lists a binary's probe points instead: 'usdt:PATH:GLOB' its USDT probes (GLOB over
// "provider:name" or the name) with their argument specs, 'uprobe:PATH:GLOB' its functions.
#pragma once

#include <ostream>
#include <string>

#include "common/status.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe {

// Writes the listing to `out`; `enums` resolves enum names in __print_symbolic tables (so
// "symbolic" is listed where the kernel's BTF gives them values). Errors: NotFound when nothing
// matches GLOB; elf::ElfFile::Open's for a probe GLOB's PATH; InvalidArgument for a malformed
// probe GLOB (and for kprobe:, whose functions the kernel lists).
Status ListEvents(const Tracefs& tracefs, const std::string& glob, std::ostream& out,
                  const KernelEnums& enums = KernelEnums());

}  // namespace tpe
