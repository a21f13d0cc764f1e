#include "format/event_format.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/file_util.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

std::string Read(const std::string& rel) {
  auto t = ReadFileToString(testing::DataDir() + "/" + rel);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : "";
}

// Every checked-in format file (this kernel's, the seeds', synthetic) parses, and every field
// lies inside a plausible record.
TEST(EventFormatTest, EveryCheckedInFormatFileParses) {
  size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(testing::DataDir())) {
    if (e.path().filename() != "format") continue;
    auto text = ReadFileToString(e.path());
    ASSERT_TRUE(text.ok());
    auto fmt = ParseFormat(*text, e.path());
    ASSERT_TRUE(fmt.ok()) << fmt.status().ToString();
    EXPECT_FALSE(fmt->name.empty());
    ASSERT_NE(fmt->FindField("common_pid"), nullptr) << e.path();
    for (const auto& f : fmt->fields) EXPECT_LT(f.offset + f.size, 4096u) << e.path() << " " << f.name;
    ++n;
  }
  EXPECT_GE(n, 30u);
}

TEST(EventFormatTest, SchedSwitch) {
  auto fmt = ParseFormat(Read("linux-6.18/events/sched/sched_switch/format"), "sched_switch");
  ASSERT_TRUE(fmt.ok()) << fmt.status().ToString();
  EXPECT_EQ(fmt->name, "sched_switch");
  EXPECT_EQ(fmt->id, 372u);
  ASSERT_EQ(fmt->fields.size(), 11u);
  const FieldFormat* comm = fmt->FindField("prev_comm");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->kind, FieldKind::kCharArray);
  EXPECT_EQ(comm->offset, 8u);
  EXPECT_EQ(comm->size, 16u);
  EXPECT_EQ(comm->array_len, 16u);
  EXPECT_EQ(comm->type, "char[16]");
  EXPECT_TRUE(comm->IsString());
  const FieldFormat* state = fmt->FindField("prev_state");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->kind, FieldKind::kInteger);
  EXPECT_EQ(state->offset, 32u);
  EXPECT_EQ(state->size, 8u);
  EXPECT_TRUE(state->is_signed);
  const FieldFormat* type = fmt->FindField("common_type");
  ASSERT_NE(type, nullptr);
  EXPECT_TRUE(type->is_common);
  EXPECT_FALSE(type->is_signed);
  EXPECT_NE(fmt->print_fmt.find("__print_flags"), std::string::npos);
}

TEST(EventFormatTest, DataLocAndPointers) {
  auto fmt = ParseFormat(Read("linux-6.18/events/net/net_dev_xmit/format"), "x");
  ASSERT_TRUE(fmt.ok());
  const FieldFormat* name = fmt->FindField("name");
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(name->kind, FieldKind::kDataLoc);
  EXPECT_EQ(name->type, "__data_loc char[]");
  EXPECT_EQ(name->offset, 24u);
  EXPECT_TRUE(name->IsString());
  EXPECT_EQ(fmt->FindField("skbaddr")->kind, FieldKind::kPointer);
  EXPECT_EQ(fmt->FindField("len")->kind, FieldKind::kInteger);
  EXPECT_FALSE(fmt->FindField("len")->is_signed);
}

TEST(EventFormatTest, AddressArrays) {
  auto fmt = ParseFormat(Read("linux-6.18/events/tcp/tcp_retransmit_skb/format"), "x");
  ASSERT_TRUE(fmt.ok());
  const FieldFormat* v4 = fmt->FindField("saddr");
  const FieldFormat* v6 = fmt->FindField("daddr_v6");
  EXPECT_EQ(v4->kind, FieldKind::kArray);
  EXPECT_EQ(v4->size, 4u);
  EXPECT_EQ(v6->kind, FieldKind::kArray);
  EXPECT_EQ(v6->array_len, 16u);
  EXPECT_EQ(v6->offset, 58u);
  EXPECT_FALSE(v4->IsString());
}

// Syscall arguments declared `int` occupy 8 bytes: size wins over the type name.
TEST(EventFormatTest, SeedSyscallWithWideInt) {
  auto fmt = ParseFormat(Read("seeds/events/syscalls/sys_enter_accept4/format"), "x");
  ASSERT_TRUE(fmt.ok());
  EXPECT_EQ(fmt->id, 1369u);
  const FieldFormat* fd = fmt->FindField("fd");
  EXPECT_EQ(fd->type, "int");
  EXPECT_EQ(fd->size, 8u);
  EXPECT_EQ(fd->offset, 16u);
  EXPECT_EQ(fmt->FindField("upeer_sockaddr")->type, "struct sockaddr *");
}

// A hand-formatted copy with "field:  type name;" spacing (seed 000) still parses.
TEST(EventFormatTest, SeedWithExtraSpaces) {
  auto fmt = ParseFormat(Read("seeds/events/net/netif_receive_skb/format"), "x");
  ASSERT_TRUE(fmt.ok()) << fmt.status().ToString();
  EXPECT_EQ(fmt->FindField("name")->kind, FieldKind::kDataLoc);
  EXPECT_EQ(fmt->FindField("len")->offset, 16u);
}

TEST(EventFormatTest, RelLocAndBool) {
  auto fmt = ParseFormat(Read("synthetic/events/sample/foo_rel/format"), "x");
  ASSERT_TRUE(fmt.ok()) << fmt.status().ToString();
  EXPECT_EQ(fmt->FindField("msg")->kind, FieldKind::kRelLoc);
  EXPECT_TRUE(fmt->FindField("msg")->IsString());
  EXPECT_EQ(fmt->FindField("vals")->kind, FieldKind::kDataLoc);
  EXPECT_FALSE(fmt->FindField("vals")->IsString());
  EXPECT_EQ(fmt->FindField("ok")->kind, FieldKind::kInteger);
  EXPECT_EQ(fmt->FindField("ok")->size, 1u);
}

TEST(EventFormatTest, ErrorsNameTheLine) {
  auto r = ParseFormat("name: x\nID: 1\nformat:\n\tfield:int a;\toffset:zz;\tsize:4;\tsigned:1;\n", "f");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "f:4: offset \"zz\" or size \"4\" is not a number");

  r = ParseFormat("name: x\nID: 1\nbogus line\n", "f");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("f:3: unexpected line \"bogus line\""), std::string::npos);

  r = ParseFormat("ID: 1\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n", "f");
  EXPECT_NE(r.status().message().find("no \"name:\" line"), std::string::npos);

  r = ParseFormat("name: x\nID: 1\nformat:\n\tfield:__data_loc char[] s;\toffset:8;\tsize:8;\tsigned:0;\n", "f");
  EXPECT_NE(r.status().message().find("has size 8, expected 4"), std::string::npos);

  r = ParseFormat("name: x\nID: 1\nformat:\n\tfield:int c[N];\toffset:8;\tsize:6;\tsigned:0;\n", "f");
  EXPECT_NE(r.status().message().find("array length \"N\""), std::string::npos);
  r = ParseFormat("name: x\nID: 1\nformat:\n\tfield:struct foo c[N];\toffset:8;\tsize:8;\tsigned:0;\n", "f");
  EXPECT_NE(r.status().message().find("array length \"N\""), std::string::npos);

  r = ParseFormat("name: x\nID: 1\nformat:\n\tfield:int a\toffset:0\n", "f");
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(ParseFormat("", "f").ok());
}

// Linux 5.10 prints array lengths as the source spells them (captured from Debian 11's
// 5.10.223 in tests/data/linux-5.10): sums are evaluated, sizeof() and macro names are the field's
// size over its element's.
TEST(EventFormatTest, UnevaluatedArrayLengthsOfOlderKernels) {
  auto field = [](const std::string& decl, uint32_t size) -> StatusOr<FieldFormat> {
    auto fmt = ParseFormat(
        "name: x\nID: 1\nformat:\n\tfield:" + decl + ";\toffset:8;\tsize:" + std::to_string(size) + ";\tsigned:0;\n",
        "f");
    if (!fmt.ok()) return fmt.status();
    return fmt->fields[0];
  };
  struct Case {
    std::string decl;
    uint32_t size, len;
    FieldKind kind;
  } cases[] = {
      {"char func[30+1]", 31, 31, FieldKind::kCharArray},
      {"__u8 buf[32 + 2]", 34, 34, FieldKind::kArray},
      {"__u8 saddr[sizeof(struct sockaddr_in6)]", 28, 28, FieldKind::kArray},
      {"char comm[TASK_COMM_LEN]", 16, 16, FieldKind::kCharArray},
      {"u32 v[2 * 3 - 1]", 20, 5, FieldKind::kArray},
      {"unsigned long caller[PAGE_OWNER_STACK]", 32, 4, FieldKind::kArray},
  };
  for (const Case& c : cases) {
    auto f = field(c.decl, c.size);
    ASSERT_TRUE(f.ok()) << c.decl << ": " << f.status().ToString();
    EXPECT_EQ(f->array_len, c.len) << c.decl;
    EXPECT_EQ(f->kind, c.kind) << c.decl;
  }
  // Every captured 5.10 format file parses (the live kernel tier found 17 that did not).
  for (const char* ev : {"ftrace/branch", "smbus/smbus_read", "tcp/tcp_probe"}) {
    auto fmt = ParseFormat(Read(std::string("linux-5.10/events/") + ev + "/format"), ev);
    EXPECT_TRUE(fmt.ok()) << ev << ": " << fmt.status().ToString();
  }
}

TEST(EventFormatTest, DescribeFieldsListsNonCommonFields) {
  auto fmt = ParseFormat(Read("linux-6.18/events/sched/sched_waking/format"), "x");
  ASSERT_TRUE(fmt.ok());
  EXPECT_EQ(fmt->DescribeFields(), "comm (char[16]), pid (pid_t), prio (int), target_cpu (int), common_pid");
}

}  // namespace
}  // namespace tpe

namespace tpe {
namespace {
// ext4 prints a format string with embedded newlines: the print fmt runs to the end of file.
TEST(EventFormatTest, MultiLinePrintFmt) {
  auto fmt =
      ParseFormat(*ReadFileToString(testing::DataDir() + "/linux-6.18/events/ext4/ext4_fsmap_low_key/format"), "x");
  ASSERT_TRUE(fmt.ok()) << fmt.status().ToString();
  EXPECT_NE(fmt->print_fmt.find('\n'), std::string::npos);
  EXPECT_NE(fmt->print_fmt.find("REC->dev"), std::string::npos);
  EXPECT_NE(fmt->FindField("dev"), nullptr);
}
}  // namespace
}  // namespace tpe
