// Fuzzes ElfFile (src/elf/elf_file.h) on files a user could craft: the input is the whole file,
// read through a memfd with ElfFile::OpenFd and the default ElfLimits. Checks that every error
// names the file, and that a file that reads is consistent: Symbols() sorted as documented,
// SymbolAt() finding each function with a size, FindFunction answering for each name,
// memory_bytes() covering the symbols, USDT probes resolving to file offsets.
// Seeds: crafted minimal ELF files (fuzz/make_corpus.py); run.sh's -rss_limit_mb=2048 catches
// an allocation the limits missed.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "elf/elf_file.h"
#include "fuzz/fuzz_util.h"

using namespace tpe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("elf_fuzzer", MFD_CLOEXEC);
  TPE_FUZZ_CHECK(fd >= 0, "memfd_create failed");
  TPE_FUZZ_CHECK(::ftruncate(fd, 0) == 0, "ftruncate");
  TPE_FUZZ_CHECK(::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size), "pwrite");
  auto f = elf::ElfFile::OpenFd(fd, "fuzz.elf");
  if (!f.ok()) {
    TPE_FUZZ_CHECK(f.status().message().starts_with("fuzz.elf"), "error does not name the file: %s",
                   f.status().message().c_str());
    return 0;
  }
  const std::vector<elf::Symbol> symbols = f->Symbols();
  TPE_FUZZ_CHECK(f->memory_bytes() >= symbols.size() * sizeof(elf::Symbol), "memory_bytes %llu for %zu symbols",
                 static_cast<unsigned long long>(f->memory_bytes()), symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) {
    const elf::Symbol& s = symbols[i];
    if (i > 0) {
      const elf::Symbol& p = symbols[i - 1];
      TPE_FUZZ_CHECK(std::tie(p.name, p.address, p.version) < std::tie(s.name, s.address, s.version),
                     "Symbols() not sorted and unique at %zu (%s)", i, s.name.c_str());
    }
    TPE_FUZZ_CHECK(!s.name.empty(), "a function without a name");
    if (s.size != 0) {
      const elf::Symbol* at = f->SymbolAt(s.address);
      TPE_FUZZ_CHECK(at != nullptr && at->address == s.address, "SymbolAt(0x%llx) misses %s",
                     static_cast<unsigned long long>(s.address), s.name.c_str());
    }
    // A name with '@' is a versioned query to FindFunction (a .dynsym name may hold one raw).
    if (s.name.find('@') != std::string::npos) continue;
    auto found = f->FindFunction(s.name);
    if (found.ok()) {
      TPE_FUZZ_CHECK(found->name == s.name, "FindFunction(%s) gave %s", s.name.c_str(), found->name.c_str());
    } else {
      TPE_FUZZ_CHECK(found.status().code() == StatusCode::kInvalidArgument, "FindFunction(%s): %s", s.name.c_str(),
                     found.status().ToString().c_str());
    }
  }
  for (const elf::UsdtProbe& p : f->UsdtProbes()) {
    auto sites = f->FindUsdt(p.provider, p.name);
    TPE_FUZZ_CHECK(sites.ok() && !sites->empty(), "FindUsdt(%s) after UsdtProbes listed it", p.FullName().c_str());
  }
  (void)f->FindFunction("main");
  return 0;
}
