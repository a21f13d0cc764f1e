// --list-events[=GLOB]: every tracepoint whose "system:event" matches GLOB (fnmatch(3)), with
// its event id and fields (name, type, size, signedness) — what a config may name.
#pragma once

#include <ostream>
#include <string>

#include "common/status.h"
#include "tracefs/tracefs.h"

namespace tpe {

// Writes the listing to `out`. Errors: NotFound when nothing matches GLOB.
Status ListEvents(const Tracefs& tracefs, const std::string& glob, std::ostream& out);

}  // namespace tpe
