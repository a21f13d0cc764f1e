#include "profile/renderer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "symbols/dwarf_info.h"

extern "C" __attribute__((noinline)) int tpe_render_test_leaf(int x) {
  asm volatile("" ::: "memory");
  return x + 1;
}
extern "C" __attribute__((noinline)) int tpe_render_test_caller(int x) {
  asm volatile("" ::: "memory");
  return tpe_render_test_leaf(x) * 2;
}

namespace tpe {
namespace {

int NoProc(uint32_t, char*, size_t) { return -1; }

// From samples to folded stacks: a collector fed callchains of this process's own functions
// renders them named, kernel frames below, with exact counts.
TEST(RenderTest, CollectorStacksToNamedFoldedStacks) {
  MappedFiles files;
  ProcessImages images(&files);
  ProfileCollector p("stacks", "h", LabelSet(), 10);
  p.set_user_stacks(&images, nullptr);
  CommTable comms(NoProc);
  const uint64_t leaf = reinterpret_cast<uint64_t>(&tpe_render_test_leaf);
  const uint64_t caller = reinterpret_cast<uint64_t>(&tpe_render_test_caller) + 4;  // a return address inside it
  const std::vector<uint64_t> ips = {static_cast<uint64_t>(PERF_CONTEXT_KERNEL), 0xffffffff810a1c4b,
                                     static_cast<uint64_t>(PERF_CONTEXT_USER), leaf, caller};
  Sample s;
  s.pid = s.tid = static_cast<uint32_t>(getpid());
  s.callchain = Bytes(reinterpret_cast<const uint8_t*>(ips.data()), ips.size() * 8);
  for (int i = 0; i < 7; ++i) p.OnSample(0, s, &comms);

  auto k = Kallsyms::Parse("ffffffff810a1c40 T __x64_sys_getppid\nffffffff810a1c80 T next\n");
  ASSERT_TRUE(k.ok());
  Symbolizer sym(&files, std::make_shared<const Kallsyms>(std::move(k).value()));
  PprofBuilder b("samples", "count");
  AddStacks(p.Stacks(), &sym, &b);
  EXPECT_EQ(FoldedStacks(b.profile()), "tpe_render_test_caller;tpe_render_test_leaf;__x64_sys_getppid 7\n");
  ASSERT_EQ(b.profile().sample_size(), 1);
  const auto& label = b.profile().sample(0).label(0);
  EXPECT_EQ(b.profile().string_table(label.key()), "pid");
  EXPECT_EQ(b.profile().string_table(label.str()), std::to_string(getpid()));
}

// A part the bpf engine lost is one frame naming the reason, in its place: two reasons stay two
// locations (pprof keys frames by mapping and address, and both are 0 here), and StacksSince
// tells stacks apart by their reasons.
TEST(RenderTest, LostPartsAreOneFrameNamingTheReason) {
  StackCount a;
  a.pid = 7;
  a.kernel = {0xffffffff810a1c4b};
  a.user_lost = "hash_collision";
  a.value = 5;
  StackCount b = a;
  b.user_lost = "stack_map_full";
  b.value = 2;
  auto k = Kallsyms::Parse("ffffffff810a1c40 T __x64_sys_getppid\nffffffff810a1c80 T next\n");
  ASSERT_TRUE(k.ok());
  Symbolizer sym(nullptr, std::make_shared<const Kallsyms>(std::move(k).value()));
  PprofBuilder builder("samples", "count");
  AddStacks({a, b}, &sym, &builder);
  EXPECT_EQ(FoldedStacks(builder.profile()),
            "[user_stack_lost:_hash_collision];__x64_sys_getppid 5\n"
            "[user_stack_lost:_stack_map_full];__x64_sys_getppid 2\n");
  EXPECT_EQ(builder.profile().location_size(), 3);

  StackCount a2 = a;
  a2.value = 8;
  StackCount b2 = b;
  const std::vector<StackCount> gained = StacksSince({a, b}, {a2, b2});
  ASSERT_EQ(gained.size(), 1u);
  EXPECT_EQ(gained[0].user_lost, "hash_collision");
  EXPECT_EQ(gained[0].value, 3u);

  // Two series that render the same (two stack ids both lost to collisions) are one: before
  // 5 + 3, after 5 + 4 is 1 gained, not 9; nothing gained is nothing.
  StackCount c = a, d = a, d2 = a;
  c.value = 5;
  d.value = 3;
  d2.value = 4;
  const std::vector<StackCount> once = StacksSince({c, d}, {c, d2});
  ASSERT_EQ(once.size(), 1u);
  EXPECT_EQ(once[0].value, 1u);
  EXPECT_TRUE(StacksSince({c, d}, {c, d}).empty());
}

// Frames shared by stacks are named once per builder and counted every time: a second stack
// with the same frames reuses their locations, its unnamed kernel frame still counts as
// unsymbolized, and a later builder with the same symbolizer (perhaps at the same address)
// gets its own mappings and locations, rendering the same text.
TEST(RenderTest, SharedFramesAreNamedOnceAndCountedEveryTime) {
  const uint64_t leaf = reinterpret_cast<uint64_t>(&tpe_render_test_leaf);
  const uint64_t caller = reinterpret_cast<uint64_t>(&tpe_render_test_caller) + 4;
  MappedFiles files;
  ProcessImages images(&files);
  StackCount a;
  a.pid = static_cast<uint32_t>(getpid());
  a.labels = {{"comm", "a"}};
  a.kernel = {0xffffffff810a1c4b, 0xffffffff00000010};  // named; below every symbol
  images.Normalize(a.pid, std::vector<uint64_t>{leaf, caller}, 1, &a.user_frames);
  a.value = 3;
  StackCount b = a;
  b.labels = {{"comm", "b"}};
  b.value = 4;
  StackCount c = a;
  c.kernel = {0xffffffff810a1c4b};
  c.user_frames.clear();
  c.value = 5;
  auto k = Kallsyms::Parse("ffffffff810a1c40 T __x64_sys_getppid\nffffffff810a1c80 T next\n");
  ASSERT_TRUE(k.ok());
  Symbolizer sym(&files, std::make_shared<const Kallsyms>(std::move(k).value()));
  std::string first;
  for (int round = 0; round < 2; ++round) {
    PprofBuilder builder("samples", "count");
    AddStacks({a, b, c}, &sym, &builder);
    const auto& prof = builder.profile();
    EXPECT_EQ(prof.location_size(), 4) << "round " << round;  // 2 kernel (one "[unknown]") + 2 user
    EXPECT_EQ(prof.mapping_size(), 2) << "round " << round;   // [kernel.kallsyms], this binary
    ASSERT_EQ(prof.sample_size(), 3);
    EXPECT_EQ(std::vector<uint64_t>(prof.sample(0).location_id().begin(), prof.sample(0).location_id().end()),
              std::vector<uint64_t>(prof.sample(1).location_id().begin(), prof.sample(1).location_id().end()));
    const std::string folded = FoldedStacks(prof);
    EXPECT_NE(folded.find("tpe_render_test_caller;tpe_render_test_leaf;"), std::string::npos) << folded;
    EXPECT_NE(folded.find("__x64_sys_getppid 5\n"), std::string::npos) << folded;
    if (round == 0) first = folded;
    EXPECT_EQ(folded, first);
  }
  // Per render: a and b have 4 frames each, c one; a's and b's second kernel frame is unnamed.
  EXPECT_EQ(sym.stats().frames, 2u * 9);
  EXPECT_EQ(sym.stats().kernel_unsymbolized, 2u * 2);
  EXPECT_EQ(sym.stats().unsymbolized, 2u * 2);
  EXPECT_EQ(sym.stats().unknown_mapping, 0u);
}

// A stripped binary (tests/triggers: no_frame_pointers_g, debug info split off) named through
// its build-id debug file under a fake root: the chain's functions, and an always-inlined
// function as a Line of its caller's Location (innermost first), with source files and lines;
// folded stacks show it as a frame above its caller. Without the debug file: offsets only.
TEST(RenderTest, StrippedBinaryNamedFromItsDebugFileWithInlinedFrames) {
  namespace fs = std::filesystem;
  const std::string dir = TPE_DEBUG_SPLIT_DIR;
  const std::string stripped = dir + "/no_frame_pointers_g.stripped", debug = dir + "/no_frame_pointers_g.debug";
  auto bin = elf::ElfFile::Open(stripped);
  ASSERT_TRUE(bin.ok()) << bin.status().ToString();
  ScopedFd dfd(::open(debug.c_str(), O_RDONLY | O_CLOEXEC));
  auto dbg = elf::ElfFile::OpenDebugFd(dfd.get(), debug, bin->segments());
  ASSERT_TRUE(dbg.ok()) << dbg.status().ToString();
  auto dwarf = symbols::DwarfInfo::Open(dfd.get(), debug);
  ASSERT_TRUE(dwarf.ok());
  // An address of tpe_nfp_leaf where tpe_nfp_inlined's code is, and tpe_nfp_c's start.
  auto leaf = dbg->FindFunction("tpe_nfp_leaf");
  auto c = dbg->FindFunction("tpe_nfp_c");
  ASSERT_TRUE(leaf.ok() && c.ok());
  uint64_t inlined_at = 0;
  for (uint64_t a = leaf->address; a < leaf->address + leaf->size && inlined_at == 0; ++a) {
    if ((*dwarf)->Lookup(a).size() == 2) inlined_at = a;
  }
  ASSERT_NE(inlined_at, 0u);
  struct stat st {};
  ASSERT_EQ(::stat(stripped.c_str(), &st), 0);
  MappedFiles files;
  MappedFile f;
  f.path = stripped;
  f.inode = st.st_ino;
  const FileId id = files.Intern(f);
  StackCount sc;
  sc.pid = 1;
  sc.user_frames = {UserFrame{id, inlined_at - leaf->address + leaf->file_offset},
                    UserFrame{id, c->file_offset + 1}};  // a return address: named by the byte before
  sc.value = 7;

  for (bool with_debug_file : {false, true}) {
    std::string tmpl = ::testing::TempDir() + "/tpe_render_root.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    const std::string& id_hex = bin->build_id();
    if (with_debug_file) {
      const fs::path to =
          fs::path(tmpl) / "usr/lib/debug/.build-id" / id_hex.substr(0, 2) / (id_hex.substr(2) + ".debug");
      fs::create_directories(to.parent_path());
      fs::copy_file(debug, to);
    }
    ProfileRenderer::Options o;
    o.proc_root = "/nonexistent-proc";
    o.kallsyms_path = "/nonexistent-kallsyms";
    o.debug_lookup.host_root = tmpl;
    ProfileRenderer renderer(nullptr, &files, o);
    ProfileRenderer::Rendered r = renderer.Render({sc}, "samples", "count", 1, 0, 0);
    fs::remove_all(tmpl);
    const auto& p = r.builder->profile();
    const std::string folded = FoldedStacks(p);
    if (!with_debug_file) {
      EXPECT_EQ(folded.find("tpe_nfp"), std::string::npos) << folded;
      EXPECT_EQ(r.stats.unsymbolized, 2u);
      EXPECT_EQ(renderer.debug_counts().Get(symbols::DebugSource::kBuildIdDir, symbols::DebugResult::kMissing), 1u);
      EXPECT_EQ(renderer.debug_counts().Get(symbols::DebugSource::kDebugLink, symbols::DebugResult::kMissing), 1u);
      continue;
    }
    EXPECT_EQ(folded, "tpe_nfp_c;tpe_nfp_leaf;tpe_nfp_inlined 7\n");
    // The next render finds what this one found: no second lookup.
    EXPECT_EQ(FoldedStacks(renderer.Render({sc}, "samples", "count", 1, 0, 0).builder->profile()), folded);
    EXPECT_EQ(r.stats.frames, 2u);
    EXPECT_EQ(r.stats.inlined, 1u);
    EXPECT_EQ(r.stats.unsymbolized, 0u);
    EXPECT_EQ(renderer.debug_counts().Get(symbols::DebugSource::kBuildIdDir, symbols::DebugResult::kFound), 1u);
    ASSERT_EQ(p.sample_size(), 1);
    const auto& loc = p.location(static_cast<int>(p.sample(0).location_id(0) - 1));
    ASSERT_EQ(loc.line_size(), 2);
    auto fn = [&](const perftools::profiles::Line& l) { return p.function(static_cast<int>(l.function_id() - 1)); };
    EXPECT_EQ(p.string_table(fn(loc.line(0)).name()), "tpe_nfp_inlined");
    EXPECT_EQ(p.string_table(fn(loc.line(1)).name()), "tpe_nfp_leaf");
    EXPECT_TRUE(p.string_table(fn(loc.line(0)).filename()).ends_with("no_frame_pointers.cc"));
    EXPECT_GT(loc.line(0).line(), 0);
    EXPECT_GT(loc.line(1).line(), loc.line(0).line()) << "the call site, below the inlined function's body";
    const auto& m = p.mapping(static_cast<int>(loc.mapping_id() - 1));
    EXPECT_EQ(p.string_table(m.build_id()), id_hex);
  }
}

}  // namespace
}  // namespace tpe
