// The semaphore-guarded USDT probe of elf_target. Its own translation unit: with
// _SDT_HAS_SEMAPHORES, sys/sdt.h gives every probe of the unit a semaphore.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

// sdt.h's semaphore convention (what `dtrace -G` generates): `provider_name_semaphore` in .probes.
extern "C" {
__attribute__((used, section(".probes"))) volatile unsigned short tpe_elf_test_guarded_semaphore = 0;
}

extern "C" __attribute__((noinline)) long tpe_elf_guarded_function(long x) {
  if (tpe_elf_test_guarded_semaphore) STAP_PROBE1(tpe_elf_test, guarded, x);
  return x + 7;
}
