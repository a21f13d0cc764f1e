// A profile's raw stacks (collectors/profile.h) rendered as a pprof Profile: frames named by a
// Symbolizer, kernel frames below the user frames they were entered from (pprof's leaf-first
// order: kernel leaf ... kernel entry, user leaf ... user root), the profile's labels and the process id
// as the label "pid". A part the engine lost (StackCount::kernel_lost/user_lost) is one frame
// "[kernel stack lost: <reason>]" in its place, so the samples still add up.
//
// Thread-safety: uses `symbolizer` (not thread-safe) for the call.
#pragma once

#include <string>
#include <vector>

#include "collectors/profile.h"
#include "profile/pprof_builder.h"
#include "profile/symbolizer.h"

namespace tpe {

// Adds every stack of `stacks` to `builder` (one pprof Sample each).
void AddStacks(const std::vector<StackCount>& stacks, Symbolizer* symbolizer, PprofBuilder* builder);

}  // namespace tpe
