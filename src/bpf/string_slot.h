// The size of a string's slot, shared by the program shapes (programs.h: a __data_loc string in a
// key) and the probe records (probe_record.h: a string argument in the record a probe program
// builds), so that probe_record.cc needs no programs.h (which includes probe_record.h).
//
// Pure; a constant.
#pragma once

#include <cstdint>

namespace tpe::bpf {

// __data_loc strings are keyed up to this many bytes (including the NUL the kernel's
// bpf_probe_read_kernel_str writes): longer strings are cut at 127 bytes. A probe record reads
// each string argument into a slot of this size.
inline constexpr uint32_t kStringSlotBytes = 128;

}  // namespace tpe::bpf
