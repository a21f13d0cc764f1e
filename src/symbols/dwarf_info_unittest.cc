#include "symbols/dwarf_info.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace tpe::symbols {
namespace {

const std::string kDebug = std::string(TPE_DEBUG_SPLIT_DIR) + "/no_frame_pointers_g.debug";

std::string NameOf(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (int name : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name, DW_AT_name}) {
    if (dwarf_attr_integrate(die, name, &attr) != nullptr) {
      if (const char* s = dwarf_formstring(&attr)) return s;
    }
  }
  return "";
}

// What eu-addr2line -i answers, the way it finds it: libdw's scopes at the address
// (dwarf_getscopes, a walk of the unit's DIEs), the innermost function among them, then its
// enclosing scopes (dwarf_getscopes_die) with each inlined instance's call site. The index
// DwarfInfo builds once per unit must give the same answer at every address.
std::vector<DwarfInfo::Line> ByScopes(Dwarf* dwarf, uint64_t address) {
  std::vector<DwarfInfo::Line> out;
  Dwarf_Die cu;
  if (dwarf_addrdie(dwarf, address, &cu) == nullptr) return out;
  // The innermost function's own line comes from the line table (dwarf_getsrc_die), the same
  // call in both: left out here and in the comparison.
  std::string file;
  int64_t line = 0;
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (dwarf_getsrcfiles(&cu, &files, &nfiles) != 0) files = nullptr;
  Dwarf_Die* scopes = nullptr;
  const int nscopes = dwarf_getscopes(&cu, address, &scopes);
  Dwarf_Die innermost;
  bool found = false;
  for (int i = 0; i < nscopes && !found; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
      innermost = scopes[i];
      found = true;
    }
  }
  free(scopes);
  if (!found) return out;
  out.push_back(DwarfInfo::Line{NameOf(&innermost), file, line});
  if (dwarf_tag(&innermost) != DW_TAG_inlined_subroutine) return out;
  Dwarf_Die* chain = nullptr;
  const int nchain = dwarf_getscopes_die(&innermost, &chain);
  int inlined = 0;
  for (int i = 1; i < nchain && out.size() < 64; ++i) {
    const int tag = dwarf_tag(&chain[i]);
    if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine) continue;
    file.clear();
    line = 0;
    Dwarf_Attribute attr;
    Dwarf_Word v = 0;
    if (files != nullptr && dwarf_formudata(dwarf_attr(&chain[inlined], DW_AT_call_file, &attr), &v) == 0 &&
        v < nfiles) {
      if (const char* f = dwarf_filesrc(files, v, nullptr, nullptr)) file = f;
    }
    if (dwarf_formudata(dwarf_attr(&chain[inlined], DW_AT_call_line, &attr), &v) == 0) line = static_cast<int64_t>(v);
    out.push_back(DwarfInfo::Line{NameOf(&chain[i]), file, line});
    if (tag == DW_TAG_subprogram) break;
    inlined = i;
  }
  free(chain);
  return out;
}

// The functions and each caller's call site (the innermost function's own line left out).
std::string Show(const std::vector<DwarfInfo::Line>& lines) {
  std::string s;
  for (size_t i = 0; i < lines.size(); ++i) {
    s += lines[i].function;
    if (i > 0) s += "@" + lines[i].file + ":" + std::to_string(lines[i].line);
    s += " ";
  }
  return s;
}

// Compares DwarfInfo::Lookup with ByScopes at every `step`th address of every unit of the file
// (at most `max_addresses`); returns how many addresses had an inlined frame.
size_t CompareWithScopes(const std::string& path, uint64_t step, size_t max_addresses) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return 0;
  auto info = DwarfInfo::Open(fd, path, uint64_t{1} << 30);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  Dwarf* dwarf = dwarf_begin(fd, DWARF_C_READ);
  EXPECT_NE(dwarf, nullptr);
  size_t compared = 0, inlined = 0, mismatches = 0, only_indexed = 0;
  Dwarf_Off offset = 0, next = 0;
  size_t header = 0;
  while (info.ok() && dwarf != nullptr && compared < max_addresses &&
         dwarf_nextcu(dwarf, offset, &next, &header, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(dwarf, offset + header, &cu) != nullptr) {
      Dwarf_Addr base = 0, low = 0, high = 0;
      for (ptrdiff_t r = 0; compared < max_addresses && (r = dwarf_ranges(&cu, r, &base, &low, &high)) > 0;) {
        // A range at 0 is code the linker discarded (its tombstone): many functions overlap there.
        if (low == 0) continue;
        for (uint64_t a = low; a < high && compared < max_addresses; a += step, ++compared) {
          const auto want = ByScopes(dwarf, a);
          const auto got = (*info)->Lookup(a);
          if (want.size() > 1) ++inlined;
          // The scope walk does not look into class types, so a function defined in one (a
          // lambda's operator() in a function's local class) is named by the index alone.
          if (want.empty() && !got.empty()) {
            ++only_indexed;
            continue;
          }
          if (Show(got) != Show(want) && ++mismatches <= 5) {
            ADD_FAILURE() << path << " at 0x" << std::hex << a << ": index gives " << Show(got) << ", scopes give "
                          << Show(want);
          }
        }
      }
    }
    offset = next;
  }
  EXPECT_EQ(mismatches, 0u) << "of " << compared;
  EXPECT_GT(compared, 0u);
  EXPECT_LE(only_indexed * 20, compared) << "named by the index alone";
  if (dwarf != nullptr) dwarf_end(dwarf);
  ::close(fd);
  return inlined;
}

// The test program with its inlined function, every address.
TEST(DwarfInfoIndexTest, SameAsTheScopeWalkAtEveryAddressOfTheTestProgram) {
  EXPECT_GT(CompareWithScopes(kDebug, 1, 1 << 20), 0u);
}

// This test binary (built with -g: C++ with deep inlining from gtest, the standard library and
// the project's own code), every 997th address of its units (400: the scope walk costs milliseconds per address here).
TEST(DwarfInfoIndexTest, SameAsTheScopeWalkOnThisTestBinary) {
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  int fd = ::open(self, O_RDONLY | O_CLOEXEC);
  Dwarf* dwarf = dwarf_begin(fd, DWARF_C_READ);
  ::close(fd);
  if (dwarf == nullptr) GTEST_SKIP() << "this build has no DWARF (built without -g)";
  dwarf_end(dwarf);
  EXPECT_GT(CompareWithScopes(self, 997, 400), 20u);
}

}  // namespace
}  // namespace tpe::symbols
