#include "config/config_names.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace tpe {
namespace {

// Every entry of E's table: name -> enum -> name round trip, names unique and non-empty, an
// unknown name parses to nothing and its error lists every valid name (with its note) in table
// order; returns the names, for the caller to compare with the documented set.
template <typename E>
std::vector<std::string> CheckTable() {
  std::vector<std::string> names;
  std::set<std::string> seen;
  std::string list;
  for (const EnumName<E>& e : NameTable(E{})) {
    EXPECT_FALSE(e.name.empty());
    EXPECT_TRUE(seen.insert(std::string(e.name)).second) << "repeated name " << e.name;
    const std::optional<E> parsed = FromName<E>(e.name);
    EXPECT_TRUE(parsed.has_value()) << e.name;
    if (parsed) {
      EXPECT_EQ(*parsed, e.value) << e.name;
      EXPECT_EQ(NameOf(*parsed), e.name);
    }
    // Case matters, and neither a prefix nor an extension of a name is one.
    std::string upper(e.name);
    for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_FALSE(FromName<E>(upper).has_value()) << upper;
    EXPECT_FALSE(FromName<E>(std::string(e.name) + "x").has_value()) << e.name;
    EXPECT_FALSE(FromName<E>(e.name.substr(0, e.name.size() - 1)).has_value()) << e.name;
    names.emplace_back(e.name);
    list += (list.empty() ? "" : ", ") + std::string(e.name);
    if (!e.note.empty()) list += " (" + std::string(e.note) + ")";
  }
  EXPECT_FALSE(FromName<E>("").has_value());
  EXPECT_FALSE(FromName<E>("no_such_name").has_value());
  const std::string error = NotOneOf<E>("\"no_such_name\"");
  EXPECT_EQ(error, "\"no_such_name\" is not one of " + list);
  for (const std::string& n : names) EXPECT_NE(error.find(n), std::string::npos) << error;
  return names;
}

using Names = std::vector<std::string>;

TEST(ConfigNamesTest, MetricType) {
  EXPECT_EQ(CheckTable<MetricType>(), (Names{"counter", "histogram", "latency", "gauge", "profile"}));
  // A "metrics" entry's type: every one but profile (those are "profiles" entries).
  EXPECT_EQ(NotOneOf<MetricType>("\"summary\"", {MetricType::kProfile}),
            "\"summary\" is not one of counter, histogram, latency, gauge");
}

TEST(ConfigNamesTest, ProfileKind) {
  EXPECT_EQ(CheckTable<ProfileKind>(), (Names{"profile", "off_cpu"}));
  EXPECT_EQ(NameList<ProfileKind>(),
            "profile (the default: stacks of an event's hits), off_cpu (time tasks spend switched out, by stack)");
}

TEST(ConfigNamesTest, GaugeKind) {
  EXPECT_EQ(CheckTable<GaugeKind>(), (Names{"inflight", "updown", "max", "min", "last"}));
  EXPECT_EQ(NameOf(GaugeKind::kNone), "");  // not a gauge: no name, and no name parses to it
}

TEST(ConfigNamesTest, Engine) { EXPECT_EQ(CheckTable<Engine>(), (Names{"auto", "bpf", "perf"})); }

TEST(ConfigNamesTest, ProfileStack) {
  EXPECT_EQ(CheckTable<ProfileStack>(), (Names{"kernel", "user", "both"}));
  EXPECT_EQ(NameOf(ProfileStack::kNone), "");
}

TEST(ConfigNamesTest, UnwindMethod) {
  EXPECT_EQ(CheckTable<UnwindMethod>(), (Names{"dwarf", "frame_pointer"}));
  EXPECT_EQ(NameOf(UnwindMethod::kNone), "");
  EXPECT_EQ(NameList<UnwindMethod>(),
            "dwarf (the default: the code's unwind tables, whole on binaries built without frame pointers), "
            "frame_pointer (the kernel's frame-pointer walk: cheaper)");
}

TEST(ConfigNamesTest, BucketType) {
  EXPECT_EQ(CheckTable<BucketType>(), (Names{"exp2", "linear", "explicit", "native"}));
  EXPECT_EQ(NameOf(BucketType::kNone), "");
}

TEST(ConfigNamesTest, LabelFrom) { EXPECT_EQ(CheckTable<LabelFrom>(), (Names{"start", "end"})); }

TEST(ConfigNamesTest, ProbePrefix) {
  EXPECT_EQ(CheckTable<ProbePrefix>(), (Names{"uprobe", "uretprobe", "usdt", "kprobe", "kretprobe"}));
}

TEST(ConfigNamesTest, LabelSource) {
  EXPECT_EQ(CheckTable<LabelSource>(), (Names{"comm", "pid", "tid", "cpu", "cgroup"}));
  EXPECT_EQ(NameOf(LabelSource::kField), "");  // a field label has no "source"
}

TEST(ConfigNamesTest, LabelDecode) {
  EXPECT_EQ(CheckTable<LabelDecode>(),
            (Names{"auto", "hex", "inet", "symbolic", "syscall", "errno", "blkdev", "ksym"}));
}

}  // namespace
}  // namespace tpe
