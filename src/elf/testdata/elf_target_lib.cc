// A shared library for elf_unittest: one exported function with a USDT probe inside.
#include <sys/sdt.h>

extern "C" __attribute__((noinline, visibility("default"))) long tpe_elf_lib_function(long x) {
  STAP_PROBE1(tpe_elf_lib, lib_probe, x);
  return x * 3 + 1;
}
