// Dropping privileges once every perf event is open (--security.drop-capabilities).
//
// Trade-off: the open perf event fds and mapped rings keep working without capabilities, so
// counting and scraping go on; but a reload must open new perf events, so after the drop a
// SIGHUP reload fails (PermissionDenied, counted in tracepoint_exporter_config_reloads_total
// {result="failure"}) and the running config stays. Restart the service to change the config.
//
// Source: capabilities(7), prctl(2) PR_SET_NO_NEW_PRIVS; done with libcap.
#pragma once

#include "common/status.h"

namespace tpe {

// Clears every capability (effective, permitted, inheritable), the ambient set, and sets
// no_new_privs. Errors: Internal naming the failing call.
Status DropAllCapabilities();

}  // namespace tpe
