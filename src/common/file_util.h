// Small file helpers. All opens use O_CLOEXEC.
#pragma once

#include <string>

#include "common/status.h"

namespace tpe {

// Reads a whole (possibly procfs/tracefs, size-0-reporting) file into a string.
// Errors: NotFound / PermissionDenied / Internal naming `path`.
StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `data` to an existing file (truncating). Errors name `path` and the errno text.
Status WriteStringToFile(const std::string& path, const std::string& data);

// Removes leading and trailing ASCII whitespace.
std::string Trim(const std::string& s);

// File descriptors this process has open now (entries of /proc/self/fd, not counting the one
// used to list them); 0 when /proc is not mounted.
size_t OpenFdCount();

}  // namespace tpe
