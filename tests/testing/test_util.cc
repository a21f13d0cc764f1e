#include "testing/test_util.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "perf/perf_event.h"
#include "tracefs/tracefs.h"

namespace tpe::testing {

std::string DataDir() { return TPE_TEST_DATA; }

std::string MappedPath(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash != std::string::npos && line.find(needle) != std::string::npos) return line.substr(slash);
  }
  return "";
}

bool KernelRequired() {
  const char* v = std::getenv("TPE_REQUIRE_KERNEL");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool InGuest() {
  const char* v = std::getenv("TPE_IN_VM_GUEST");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

int ScaledForGuest(int n) { return InGuest() ? std::max(1, n / 4) : n; }

int StretchedForGuest(int ms) { return InGuest() ? ms * 4 : ms; }

bool KernelAvailable(std::string* why) {
  auto tracefs = Tracefs::Discover("auto");
  if (!tracefs.ok()) {
    *why = "kernel test skipped: " + tracefs.status().message();
    return false;
  }
  auto id = tracefs->ReadId({"syscalls", "sys_enter_getppid"});
  if (!id.ok()) {
    *why = "kernel test skipped: " + id.status().message();
    return false;
  }
  TracepointEventOptions o;
  o.tracepoint_id = *id;
  auto fd = OpenPerfEvent(MakeTracepointAttr(o), 0);
  if (!fd.ok()) {
    *why = "kernel test skipped: " + fd.status().message();
    return false;
  }
  return true;
}

}  // namespace tpe::testing
