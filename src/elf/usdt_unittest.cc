#include "elf/usdt.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tpe::elf {
namespace {

UsdtArgument Arg(int size, bool is_signed, UsdtArgKind kind, std::string reg, int64_t value, std::string spec) {
  return UsdtArgument{size, is_signed, kind, std::move(reg), value, std::move(spec)};
}

// Specs as gcc -O0/-O2 and clang write them (see `readelf -n` of python3.11 and of testdata/).
TEST(ParseUsdtArgumentTest, RealSpecs) {
  using K = UsdtArgKind;
  const UsdtArgument cases[] = {
      Arg(4, true, K::kRegister, "ax", 0, "-4@%eax"),
      Arg(8, false, K::kRegister, "dx", 0, "8@%rdx"),
      Arg(8, true, K::kMemory, "bp", -24, "-8@-24(%rbp)"),
      Arg(4, false, K::kConstant, "", 42, "4@$42"),
      Arg(1, false, K::kRegister, "si", 0, "1@%sil"),
      Arg(8, false, K::kRegister, "r12", 0, "8@%r12"),
      Arg(4, true, K::kRegister, "r9", 0, "-4@%r9d"),
      Arg(8, false, K::kRegister, "bp", 0, "8@%rbp"),
      Arg(4, true, K::kMemory, "bp", -16, "-4@-16(%rbp)"),
      Arg(4, true, K::kConstant, "", -9, "-4@$-9"),
      Arg(8, false, K::kMemory, "ax", 0, "8@(%rax)"),
      Arg(8, false, K::kRegister, "di", 0, "%rdi"),  // no size: 8 bytes, unsigned
      Arg(2, true, K::kRegister, "di", 0, "-2@%di"),
      Arg(1, true, K::kRegister, "ax", 0, "-1@%al"),
      Arg(2, false, K::kRegister, "r15", 0, "2@%r15w"),
      Arg(1, false, K::kRegister, "r8", 0, "1@%r8b"),
      Arg(8, false, K::kMemory, "sp", 8, "8@8(%rsp)"),
      Arg(8, false, K::kMemory, "ip", 0x10, "8@0x10(%rip)"),
      Arg(4, false, K::kConstant, "", 0x2a, "4@$0x2a"),
      Arg(8, true, K::kConstant, "", INT64_MIN, "-8@$-9223372036854775808"),
      Arg(8, false, K::kConstant, "", -1, "8@$18446744073709551615"),
      Arg(8, false, K::kConstant, "", 5, "$5"),
      Arg(8, false, K::kMemory, "bp", -16, "-16(%rbp)"),  // no size
  };
  for (const UsdtArgument& want : cases) {
    auto got = ParseUsdtArgument(want.spec);
    ASSERT_TRUE(got.ok()) << want.spec << ": " << got.status().ToString();
    EXPECT_EQ(*got, want) << want.spec << " -> size " << got->size << " signed " << got->is_signed << " reg "
                          << got->reg << " value " << got->value;
  }
}

TEST(ParseUsdtArgumentTest, Rejects) {
  struct Case {
    std::string spec;
    StatusCode code;
  };
  const Case cases[] = {
      {"", StatusCode::kInvalidArgument},
      {"8@", StatusCode::kInvalidArgument},
      {"3@%eax", StatusCode::kInvalidArgument},
      {"16@%rax", StatusCode::kInvalidArgument},
      {"8@%xmm0", StatusCode::kInvalidArgument},
      {"1@%ah", StatusCode::kInvalidArgument},
      {"8@-8(%rbp", StatusCode::kInvalidArgument},
      {"8@-8()", StatusCode::kInvalidArgument},
      {"8@$", StatusCode::kUnimplemented},
      {"8@foo(%rip)", StatusCode::kUnimplemented},
      {"8@foo+8(%rip)", StatusCode::kUnimplemented},
      {"1@-96(%rbp,%rax,8)", StatusCode::kUnimplemented},
      {"8@(%rbp,%rax)", StatusCode::kUnimplemented},
      {"4@$sym", StatusCode::kUnimplemented},
      {"8@1234", StatusCode::kUnimplemented},
  };
  for (const Case& c : cases) {
    auto got = ParseUsdtArgument(c.spec);
    ASSERT_FALSE(got.ok()) << c.spec;
    EXPECT_EQ(got.status().code(), c.code) << c.spec << ": " << got.status().ToString();
    EXPECT_NE(got.status().message().find("\"" + c.spec + "\""), std::string::npos) << got.status().ToString();
  }
}

TEST(ParseUsdtArgumentsTest, SplitsOnSpaces) {
  auto args = ParseUsdtArguments("-4@%edi -8@%rsi  8@%rdx");
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  ASSERT_EQ(args->size(), 3u);
  EXPECT_EQ((*args)[0].spec, "-4@%edi");
  EXPECT_EQ((*args)[1].reg, "si");
  EXPECT_EQ((*args)[2].reg, "dx");
  auto none = ParseUsdtArguments("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto bad = ParseUsdtArguments("8@%rdi 8@foo(%rip)");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad.status().message().find("argument #1"), std::string::npos) << bad.status().ToString();
}

// One ELF64 note: namesz, descsz, type, name (padded to 4), desc (padded to 4).
std::string Note(const std::string& name, uint32_t type, const std::string& desc) {
  std::string out;
  auto u32 = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  u32(static_cast<uint32_t>(name.size() + 1));
  u32(static_cast<uint32_t>(desc.size()));
  u32(type);
  out += name;
  out.push_back('\0');
  out.resize((out.size() + 3) & ~size_t{3}, '\0');
  out += desc;
  out.resize((out.size() + 3) & ~size_t{3}, '\0');
  return out;
}

std::string Desc(uint64_t pc, uint64_t base, uint64_t sema, const std::string& strings) {
  std::string out;
  for (uint64_t v : {pc, base, sema}) out.append(reinterpret_cast<const char*>(&v), 8);
  return out + strings;
}

TEST(ParseStapsdtNotesTest, ParsesAndSkipsOtherNotes) {
  std::string section = Note("GNU", 3, "build-id-bytes") +
                        Note("stapsdt", 3, Desc(0x1226, 0x2068, 0, std::string("prov\0name\0-4@%edi 8@%rdx\0", 25))) +
                        Note("stapsdt", 3, Desc(0x13ec, 0x2068, 0x4040, std::string("p\0n\0\0", 5)));
  auto notes = ParseStapsdtNotes(section);
  ASSERT_TRUE(notes.ok()) << notes.status().ToString();
  ASSERT_EQ(notes->size(), 2u);
  EXPECT_EQ((*notes)[0], (StapsdtNote{0x1226, 0x2068, 0, "prov", "name", "-4@%edi 8@%rdx"}));
  EXPECT_EQ((*notes)[1], (StapsdtNote{0x13ec, 0x2068, 0x4040, "p", "n", ""}));
  auto empty = ParseStapsdtNotes("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ParseStapsdtNotesTest, RejectsTruncatedAndMalformedNotes) {
  std::string good = Note("stapsdt", 3, Desc(1, 2, 0, std::string("p\0n\0a\0", 6)));
  const std::pair<std::string, std::string> cases[] = {
      {good.substr(0, good.size() - 4), "truncated"},                                // payload cut
      {good.substr(0, 8), "truncated header"},                                       // header cut
      {good + std::string(5, '\0'), "note at byte " + std::to_string(good.size())},  // trailing junk
      {Note("stapsdt", 3, Desc(1, 2, 0, "")), "shorter than 3 addresses"},
      {Note("stapsdt", 3, Desc(1, 2, 0, std::string("p\0n\0abc", 7))), "argument specs is not NUL-terminated"},
      {Note("stapsdt", 3, Desc(1, 2, 0, std::string("p\0\0\0", 4))), "empty provider or name"},
  };
  for (const auto& [bytes, why] : cases) {
    auto notes = ParseStapsdtNotes(bytes);
    ASSERT_FALSE(notes.ok()) << why;
    EXPECT_EQ(notes.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(notes.status().message().find(why), std::string::npos) << notes.status().ToString();
  }
}

const std::vector<LoadSegment> kSegments = {
    {.vaddr = 0x400000, .offset = 0, .filesz = 0x1000, .memsz = 0x1000},
    {.vaddr = 0x401000, .offset = 0x1000, .filesz = 0x2000, .memsz = 0x2000, .executable = true},
    {.vaddr = 0x604e10, .offset = 0x3e10, .filesz = 0x220, .memsz = 0x400, .writable = true},
};

TEST(FileOffsetForAddressTest, ThroughSegments) {
  EXPECT_EQ(*FileOffsetForAddress(kSegments, 0x400040), 0x40u);
  EXPECT_EQ(*FileOffsetForAddress(kSegments, 0x401000), 0x1000u);
  EXPECT_EQ(*FileOffsetForAddress(kSegments, 0x402fff), 0x2fffu);
  EXPECT_EQ(*FileOffsetForAddress(kSegments, 0x605020), 0x4020u);
  for (uint64_t address : {uint64_t{0}, uint64_t{0x403000}, uint64_t{0x605030} /* .bss tail */, ~uint64_t{0}}) {
    auto off = FileOffsetForAddress(kSegments, address);
    ASSERT_FALSE(off.ok()) << address;
    EXPECT_EQ(off.status().code(), StatusCode::kNotFound);
  }
  EXPECT_NE(FileOffsetForAddress(kSegments, 0x403000).status().message().find("0x403000"), std::string::npos);
}

TEST(ResolveUsdtProbeTest, AppliesStapsdtBaseDelta) {
  // As after prelink moved .stapsdt.base from 0x402000 (recorded in the note) to 0x402010.
  StapsdtNote note{0x401226, 0x402000, 0x604e20, "prov", "name", "-4@%edi 8@-8(%rbp)"};
  auto probe = ResolveUsdtProbe(note, 0x402010, kSegments);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->address, 0x401236u);
  EXPECT_EQ(probe->file_offset, 0x1236u);
  EXPECT_EQ(probe->semaphore_address, 0x604e30u);
  EXPECT_EQ(probe->semaphore_file_offset, 0x3e30u);
  EXPECT_TRUE(probe->args_status.ok());
  ASSERT_EQ(probe->args.size(), 2u);
  EXPECT_EQ(probe->args[1].value, -8);
  EXPECT_EQ(probe->FullName(), "prov:name");

  // No adjustment when the file has no .stapsdt.base or the note records none; no semaphore.
  note.semaphore = 0;
  for (auto [base, note_base] : {std::pair<uint64_t, uint64_t>{0, 0x402000}, {0x402010, 0}}) {
    note.base = note_base;
    auto p = ResolveUsdtProbe(note, base, kSegments);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->file_offset, 0x1226u);
    EXPECT_EQ(p->semaphore_address, 0u);
    EXPECT_EQ(p->semaphore_file_offset, 0u);
  }
}

TEST(ResolveUsdtProbeTest, ErrorsNameTheProbe) {
  StapsdtNote note{0x400100 /* not executable */, 0, 0, "prov", "name", ""};
  auto p = ResolveUsdtProbe(note, 0, kSegments);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("prov:name"), std::string::npos) << p.status().ToString();
  note.pc = 0x401000;
  note.semaphore = 0x401500;  // executable, not writable
  p = ResolveUsdtProbe(note, 0, kSegments);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("semaphore 0x401500"), std::string::npos) << p.status().ToString();
  // A bad argument spec keeps the probe (it can still be counted) and says why in args_status.
  note.semaphore = 0;
  note.args = "8@%rdi 8@foo(%rip)";
  p = ResolveUsdtProbe(note, 0, kSegments);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->args_status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(p->args_status.message().find("prov:name"), std::string::npos) << p->args_status.ToString();
  EXPECT_TRUE(p->args.empty());
  EXPECT_EQ(p->args_spec, "8@%rdi 8@foo(%rip)");
}

}  // namespace
}  // namespace tpe::elf
