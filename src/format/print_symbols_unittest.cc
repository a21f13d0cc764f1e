#include "format/print_symbols.h"

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

std::string Read(const std::string& rel) { return *ReadFileToString(testing::DataDir() + "/" + rel); }

// The TCP states as the kernel's enum tcp_state defines them (include/net/tcp_states.h).
std::optional<int64_t> TcpStates(std::string_view n) {
  static const std::pair<const char*, int64_t> kStates[] = {
      {"TCP_ESTABLISHED", 1}, {"TCP_SYN_SENT", 2},  {"TCP_SYN_RECV", 3}, {"TCP_FIN_WAIT1", 4},
      {"TCP_FIN_WAIT2", 5},   {"TCP_TIME_WAIT", 6}, {"TCP_CLOSE", 7},    {"TCP_CLOSE_WAIT", 8},
      {"TCP_LAST_ACK", 9},    {"TCP_LISTEN", 10},   {"TCP_CLOSING", 11}, {"TCP_NEW_SYN_RECV", 12}};
  for (const auto& [name, v] : kStates) {
    if (n == name) return v;
  }
  return std::nullopt;
}

TEST(PrintSymbolsTest, TcpStateNamesResolvedThroughEnums) {
  auto t = ParsePrintSymbols(Read("linux-6.18/events/tcp/tcp_retransmit_skb/format"), "tcp", TcpStates, "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->count("state"));
  const SymbolTable& st = t->at("state");
  EXPECT_FALSE(st.is_flags);
  EXPECT_EQ(st.entries.size(), 12u);
  EXPECT_TRUE(st.unresolved.empty());
  EXPECT_EQ(st.Render(2), "TCP_SYN_SENT");
  EXPECT_EQ(st.Render(12), "TCP_NEW_SYN_RECV");
  EXPECT_EQ(st.Render(99), "99");
  // family has numeric values in the format itself.
  EXPECT_EQ(t->at("family").Render(10), "AF_INET6");
}

TEST(PrintSymbolsTest, UnresolvedNamesAreReported) {
  auto t = ParsePrintSymbols(Read("seeds/events/tcp/tcp_retransmit_skb/format"), "tcp", nullptr, "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const SymbolTable& st = t->at("state");
  EXPECT_TRUE(st.entries.empty());
  ASSERT_EQ(st.unresolved.size(), 12u);
  EXPECT_EQ(st.unresolved.front(), "TCP_ESTABLISHED");
}

TEST(PrintSymbolsTest, SchedSwitchPrevStateFlags) {
  auto t = ParsePrintSymbols(Read("linux-6.18/events/sched/sched_switch/format"), "sched", nullptr, "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->count("prev_state"));
  const SymbolTable& st = t->at("prev_state");
  EXPECT_TRUE(st.is_flags);
  EXPECT_EQ(st.Render(0x1), "S");
  EXPECT_EQ(st.Render(0x2), "D");
  EXPECT_EQ(st.Render(0x3), "S|D");
  EXPECT_EQ(st.Render(0x80), "I");
  // What the kernel prints for "prev_state=%s%s": `(prev_state & 0xff) ? __print_flags(...) : "R"`,
  // then `prev_state & 0x100 ? "+" : ""` (TASK_REPORT_MAX marks a preempted task).
  EXPECT_EQ(st.mask, 0xffu);
  EXPECT_EQ(st.Render(0x0), "R");
  EXPECT_EQ(st.Render(0x100), "R+");
  EXPECT_EQ(st.Render(0x101), "S+");
  EXPECT_EQ(st.Render(0x1), "S");
}

TEST(PrintSymbolsTest, ConstantMasksAndTernaryFallback) {
  // A synthetic print fmt: a masked __print_symbolic with a fallback and a suffix on one field,
  // and a ternary whose condition is another field (no fallback recorded for `b`).
  const std::string fmt =
      "name: synth\nID: 1\nformat:\n"
      "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n"
      "\tfield:unsigned long a;\toffset:8;\tsize:8;\tsigned:0;\n"
      "\tfield:unsigned long b;\toffset:16;\tsize:8;\tsigned:0;\n\n"
      "print fmt: \"a=%s%s b=%s\", (REC->a & (0x3 << 2)) ? __print_symbolic(REC->a & ~0x1, { 4, \"four\" }, "
      "{ 8, \"eight\" }) : \"none\", REC->a & 1 ? \"!\" : \"?\", REC->a ? __print_symbolic(REC->b, { 1, \"one\" }) : "
      "\"x\"\n";
  auto t = ParsePrintSymbols(fmt, "synth", nullptr, "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const SymbolTable& a = t->at("a");
  EXPECT_EQ(a.mask, ~uint64_t{1});
  EXPECT_EQ(a.zero_mask, 0xcu);
  EXPECT_EQ(a.Render(0), "none?");
  EXPECT_EQ(a.Render(1), "none!");
  EXPECT_EQ(a.Render(4), "four?");
  EXPECT_EQ(a.Render(9), "eight!");
  EXPECT_EQ(a.Render(12), "12?");
  const SymbolTable& b = t->at("b");
  EXPECT_FALSE(b.zero_name.has_value());
  EXPECT_EQ(b.Render(1), "one");
  EXPECT_EQ(b.Render(0), "0");
}

TEST(PrintSymbolsTest, ExpressionArgumentsAreNotFieldTables) {
  // block_rq_issue's __print_symbolic is over ((REC->ioprio >> 13) & 7): not the raw field.
  auto t = ParsePrintSymbols(Read("linux-6.18/events/block/block_rq_issue/format"), "block", nullptr, "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->count("ioprio"));
}

TEST(PrintSymbolsTest, SignalDeliverHasNoTables) {
  auto t = ParsePrintSymbols(Read("linux-6.18/events/sched/sched_waking/format"), "sched", nullptr, "x");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
}

}  // namespace
}  // namespace tpe
