#include "profile/flame_graph.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "profile/pprof_builder.h"

namespace tpe {
namespace {

// Whether `svg` is well-formed as far as a flame graph needs: every tag closed in order, every
// '&' one of XML's five entities, no control byte, no U+FFFE or U+FFFF.
::testing::AssertionResult WellFormed(const std::string& svg) {
  std::vector<std::string> open;
  size_t i = svg.find("?>");
  if (!svg.starts_with("<?xml") || i == std::string::npos) return ::testing::AssertionFailure() << "no XML declaration";
  for (i += 2; i < svg.size(); ++i) {
    const char c = svg[i];
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n')
      return ::testing::AssertionFailure() << "control byte at " << i;
    if (svg.compare(i, 3, "\xEF\xBF\xBE") == 0 || svg.compare(i, 3, "\xEF\xBF\xBF") == 0) {
      return ::testing::AssertionFailure() << "U+FFFE or U+FFFF (no XML character) at " << i;
    }
    if (c == '&') {
      bool known = false;
      for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
        known |= svg.compare(i, std::strlen(e), e) == 0;
      if (!known) return ::testing::AssertionFailure() << "bare & at " << i;
    }
    if (c != '<') continue;
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    std::string tag = svg.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return ::testing::AssertionFailure() << "'<' inside a tag at " << i;
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1))
        return ::testing::AssertionFailure() << "</" << tag << " unopened";
      open.pop_back();
    } else if (!tag.ends_with("/")) {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
    i = end;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> not closed";
  return ::testing::AssertionSuccess();
}

// The <g> of the frame whose title starts with `title`.
std::string Frame(const std::string& svg, const std::string& title) {
  const size_t t = svg.find("<title>" + title);
  if (t == std::string::npos) return "";
  const size_t g = svg.rfind("<g", t);
  return svg.substr(g, svg.find("</g>", t) + 4 - g);
}

std::string Attr(const std::string& element, const std::string& name) {
  const size_t a = element.find(" " + name + "=\"");
  if (a == std::string::npos) return "";
  const size_t v = a + name.size() + 3;
  return element.substr(v, element.find('"', v) - v);
}

// main -> path_a -> leaf -> __x64_sys_getppid 3000 times, main -> path_b -> leaf 1000 times, as
// the trigger's profile on sys_enter_getppid.
PprofBuilder TwoPaths() {
  PprofBuilder b("samples", "count");
  const uint64_t exe = b.AddMapping({0x400000, 0x402000, 0, "/usr/bin/trigger", ""});
  const uint64_t kernel = b.AddMapping({0, ~0ull, 0, "[kernel.kallsyms]", ""});
  const ProfileFrame sys{0xffffffff810a1c4b, kernel, "__x64_sys_getppid"};
  const ProfileFrame leaf{0x401136, exe, "leaf"};
  const ProfileFrame a{0x401180, exe, "path_a"}, bb{0x4011a0, exe, "path_b"};
  const ProfileFrame main_a{0x4011c0, exe, "main"}, main_b{0x4011d0, exe, "main"};
  const std::vector<ProfileFrame> s1 = {sys, leaf, a, main_a}, s2 = {sys, leaf, bb, main_b};
  b.AddSample(s1, {}, 3000);
  b.AddSample(s2, {}, 1000);
  return b;
}

TEST(FlameGraphTest, FramesAreSizedByTheirShareAndStackedOnTheirCallers) {
  const std::string svg = FlameGraphSvg(TwoPaths().profile(), FlameGraphOptions{"p: since start"});
  EXPECT_TRUE(WellFormed(svg));
  // 1200 px wide, 10 px each side: 1180 px for 4000 samples.
  const std::string all = Frame(svg, "all (4000 samples, 100.00%)");
  ASSERT_FALSE(all.empty()) << svg;
  EXPECT_EQ(Attr(all, "width"), "1180.0");
  EXPECT_EQ(Attr(all, "x"), "10.0");
  const std::string a = Frame(svg, "path_a (3000 samples, 75.00%)"), b = Frame(svg, "path_b (1000 samples, 25.00%)");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(Attr(a, "width"), "885.0");
  EXPECT_EQ(Attr(a, "x"), "10.0");
  EXPECT_EQ(Attr(b, "width"), "295.0");
  EXPECT_EQ(Attr(b, "x"), "895.0");
  EXPECT_EQ(Attr(a, "class"), "user");
  // "main" at two addresses is one frame; the kernel frame tops each path.
  const std::string main = Frame(svg, "main (4000 samples, 100.00%)");
  ASSERT_FALSE(main.empty());
  const std::string sys = Frame(svg, "__x64_sys_getppid (3000 samples, 75.00%)");
  ASSERT_FALSE(sys.empty());
  EXPECT_EQ(Attr(sys, "class"), "kernel");
  // Depths 0 (all) to 4 (the kernel frame): 62 px of heading, 5 rows of 16 px, 10 px below.
  EXPECT_EQ(Attr(svg.substr(svg.find("<svg")), "height"), "152.0");
  EXPECT_EQ(Attr(all, "y"), "126.0");
  EXPECT_EQ(Attr(main, "y"), "110.0");
  EXPECT_EQ(Attr(sys, "y"), "62.0");
  EXPECT_NE(svg.find(">path_a</text>"), std::string::npos);
  EXPECT_NE(svg.find("4000 samples in 2 stacks"), std::string::npos);
  EXPECT_NE(svg.find(">p: since start</text>"), std::string::npos);
}

TEST(FlameGraphTest, NamesAreEscapedAndCutToTheirFrame) {
  PprofBuilder b("samples", "count");
  const uint64_t exe = b.AddMapping({0x400000, 0x402000, 0, "/usr/bin/x", ""});
  const std::string hostile = "operator<<(std::ostream&, \"x\")\x01\xff";
  const std::string lng = "a_function_name_far_too_long_for_a_frame_of_one_percent";
  b.AddSample(std::vector<ProfileFrame>{{0x401000, exe, hostile}}, {}, 95);
  b.AddSample(std::vector<ProfileFrame>{{0x401100, exe, lng}}, {}, 5);
  const std::string svg = FlameGraphSvg(b.profile(), FlameGraphOptions{"<title> & co"});
  EXPECT_TRUE(WellFormed(svg));
  // The control byte as '?', the byte that begins no UTF-8 sequence as U+FFFD.
  EXPECT_NE(svg.find("operator&lt;&lt;(std::ostream&amp;, &quot;x&quot;)?\xEF\xBF\xBD"), std::string::npos) << svg;
  EXPECT_NE(svg.find("&lt;title&gt; &amp; co"), std::string::npos);
  // 5 % of 1180 px is 59 px: room for 7 characters of 7.2 px (3 px padding each side), "a_fun..".
  const std::string f = Frame(svg, lng);
  ASSERT_FALSE(f.empty());
  EXPECT_NE(f.find(">a_fun..</text>"), std::string::npos) << f;
}

TEST(FlameGraphTest, NarrowFramesAreLeftOutAndCounted) {
  PprofBuilder b("samples", "count");
  const uint64_t exe = b.AddMapping({0x400000, 0x500000, 0, "/usr/bin/x", ""});
  b.AddSample(std::vector<ProfileFrame>{{0x400000, exe, "hot"}}, {}, 1000000);
  for (int i = 1; i <= 1000; ++i) {
    // Each 1180 / 1001000 px wide, with a callee above it that is left out with it.
    b.AddSample(std::vector<ProfileFrame>{{0x400000 + 16u * i, exe, "callee" + std::to_string(i)},
                                          {0x400008 + 16u * i, exe, "cold" + std::to_string(i)}},
                {}, 1);
  }
  const std::string svg = FlameGraphSvg(b.profile(), FlameGraphOptions{"t"});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_NE(svg.find("1001000 samples in 1001 stacks; 1000 frames left out with the frames above them (narrower than "
                     "0.1 px, or past the 20000 widest)"),
            std::string::npos);
  EXPECT_EQ(svg.find("cold"), std::string::npos);
  EXPECT_EQ(svg.find("callee"), std::string::npos);
  EXPECT_FALSE(Frame(svg, "hot (1000000 samples, 99.90%)").empty());
}

TEST(FlameGraphTest, KindsOfCodeAndValueUnits) {
  PprofBuilder b("alloc_space", "bytes");
  const uint64_t jit = b.AddMapping({0x7f0000000000, 0x7f0000100000, 0, "", ""});
  const uint64_t unknown = b.AddMapping({0, ~0ull, 0, "[unknown]", ""});
  const uint64_t vdso = b.AddMapping({0x7ffd00000000, 0x7ffd00002000, 0, "[vdso]", ""});
  b.AddSample(std::vector<ProfileFrame>{{0x7f0000000100, jit, "LazyCompile:*work"}, {0x1234, unknown, ""}}, {}, 512);
  b.AddSample(std::vector<ProfileFrame>{{0, 0, "[user stack lost: hash_collision]"}}, {}, 256);
  b.AddSample(std::vector<ProfileFrame>{{0x7ffd00000900, vdso, "__vdso_clock_gettime"}}, {}, 256);
  const std::string svg = FlameGraphSvg(b.profile(), FlameGraphOptions{"t"});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(Attr(Frame(svg, "LazyCompile:*work (512 bytes, 50.00%)"), "class"), "jit") << svg;
  EXPECT_EQ(Attr(Frame(svg, "[unknown]+0x1234 (512 bytes"), "class"), "unknown");
  EXPECT_EQ(Attr(Frame(svg, "[user stack lost: hash_collision] (256 bytes, 25.00%)"), "class"), "unknown");
  EXPECT_EQ(Attr(Frame(svg, "__vdso_clock_gettime"), "class"), "user");
  EXPECT_NE(svg.find("1024 bytes in 3 stacks"), std::string::npos);
}

TEST(FlameGraphTest, AtMostMaxFramesAreDrawnTheWidestFirst) {
  FlameGraphOptions options{"t"};
  options.max_frames = 3;  // all, main, path_a (885 px); path_b (295 px) and path_a's callee are not
  const std::string svg = FlameGraphSvg(TwoPaths().profile(), options);
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_FALSE(Frame(svg, "path_a (3000").empty());
  EXPECT_TRUE(Frame(svg, "path_b").empty());
  EXPECT_TRUE(Frame(svg, "leaf").empty());
  EXPECT_NE(svg.find("; 2 frames left out with the frames above them"), std::string::npos) << svg;
  // The height is that of the frames drawn: depths 0 to 2.
  EXPECT_EQ(Attr(svg.substr(svg.find("<svg")), "height"), "120.0");
}

TEST(FlameGraphTest, NoXmlCharactersAndSumsPastInt64Saturate) {
  PprofBuilder b("bytes", "bytes");
  const uint64_t exe = b.AddMapping({0x400000, 0x402000, 0, "/usr/bin/x", ""});
  const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;
  b.AddSample(std::vector<ProfileFrame>{{0x401000, exe, "a\xEF\xBF\xBF\xEF\xBF\xBE"}}, {}, big);
  b.AddSample(std::vector<ProfileFrame>{{0x401100, exe, "b"}}, {}, big);
  const std::string svg = FlameGraphSvg(b.profile(), FlameGraphOptions{"t"});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_NE(svg.find("<title>a\xEF\xBF\xBD\xEF\xBF\xBD ("), std::string::npos) << svg;
  const std::string max = std::to_string(std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(Frame(svg, "all (" + max + " bytes, 100.00%)").empty()) << svg;
  EXPECT_NE(svg.find(max + " bytes in 2 stacks"), std::string::npos);
}

TEST(FlameGraphTest, AProfileWithoutSamplesSaysSo) {
  PprofBuilder b("samples", "count");
  const std::string svg = FlameGraphSvg(b.profile(), FlameGraphOptions{"empty"});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_NE(svg.find(">no samples</text>"), std::string::npos);
  EXPECT_NE(svg.find("0 samples in 0 stacks"), std::string::npos);
}

// A Location with an inlined function is two frames: the inlined one drawn a row above the
// function it was inlined into, as wide (folded stacks say the same).
TEST(FlameGraphTest, InlinedFunctionsAreFramesAboveTheirCaller) {
  PprofBuilder b("samples", "count");
  ProfileFrame leaf(0x40, b.AddMapping(ProfileMapping{0, 0x1000, 0, "/bin/app", "", 0}), "tpe_holder");
  leaf.file = "app.c";
  leaf.line = 12;
  leaf.inlined.push_back(ProfileFrame::Inlined{"tpe_inlined_fn", "app.c", 3});
  ProfileFrame root(0x80, leaf.mapping_id, "main");
  const std::vector<ProfileFrame> stack = {leaf, root};
  b.AddSample(stack, {}, 5);
  EXPECT_EQ(FoldedStacks(b.profile()), "main;tpe_holder;tpe_inlined_fn 5\n");
  ASSERT_EQ(b.profile().location(0).line_size(), 2);
  EXPECT_EQ(b.profile().location(0).line(0).line(), 3);
  EXPECT_EQ(b.profile().location(0).line(1).line(), 12);
  const std::string svg = FlameGraphSvg(b.profile(), FlameGraphOptions{"t"});
  EXPECT_TRUE(WellFormed(svg));
  const size_t holder = svg.find("<title>tpe_holder"), inlined = svg.find("<title>tpe_inlined_fn");
  ASSERT_NE(holder, std::string::npos) << svg;
  ASSERT_NE(inlined, std::string::npos) << svg;
}

}  // namespace
}  // namespace tpe
