// A shared library for elf_unittest whose functions have GNU symbol versions, as glibc's do
// (pthread_cond_wait@@GLIBC_2.3.2 beside pthread_cond_wait@GLIBC_2.2.5). `.symver` gives an
// implementation a versioned name: "@@" the default version (what a new link binds), "@" an older
// one; elf_target_versioned.map defines the versions TPE_ELF_1 and TPE_ELF_2 and hides the
// implementations' own names (local).
//
//   tpe_versioned_function  @TPE_ELF_1 and @@TPE_ELF_2 at two addresses (like pthread_cond_wait)
//   tpe_versioned_alias     @TPE_ELF_1 and @@TPE_ELF_2 at one address (like timer_create's
//                           GLIBC_2.3.3 and GLIBC_2.34)
//   tpe_versioned_compat    @TPE_ELF_1 and @TPE_ELF_2 at two addresses, neither the default:
//                           a plain name stays ambiguous
extern "C" {
__attribute__((noinline, used)) long tpe_versioned_function_v1(long x) { return x + 1; }
__attribute__((noinline, used)) long tpe_versioned_function_v2(long x) { return x * 2 + 2; }
__attribute__((noinline, used)) long tpe_versioned_alias_impl(long x) { return x * 3 + 3; }
long tpe_versioned_alias_old(long x) __attribute__((alias("tpe_versioned_alias_impl")));
__attribute__((noinline, used)) long tpe_versioned_compat_v1(long x) { return x * 4 + 4; }
__attribute__((noinline, used)) long tpe_versioned_compat_v2(long x) { return x * 5 + 5; }
}

__asm__(".symver tpe_versioned_function_v1, tpe_versioned_function@TPE_ELF_1");
__asm__(".symver tpe_versioned_function_v2, tpe_versioned_function@@TPE_ELF_2");
__asm__(".symver tpe_versioned_alias_old, tpe_versioned_alias@TPE_ELF_1");
__asm__(".symver tpe_versioned_alias_impl, tpe_versioned_alias@@TPE_ELF_2");
__asm__(".symver tpe_versioned_compat_v1, tpe_versioned_compat@TPE_ELF_1");
__asm__(".symver tpe_versioned_compat_v2, tpe_versioned_compat@TPE_ELF_2");
