#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>

#include "common/file_util.h"
#include "decode/field_extractor.h"
#include "decode/sample.h"
#include "format/event_format.h"
#include "testing/hex.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

const std::string kDir = testing::DataDir() + "/linux-6.18";

struct Captured {
  std::vector<uint8_t> record;
  EventFormat format;
  Sample sample;
};

Captured Load(const std::string& sys, const std::string& ev) {
  Captured c;
  c.record = testing::ReadHexFile(kDir + "/records/" + ev + ".hex");
  auto fmt = ParseFormat(*ReadFileToString(kDir + "/events/" + sys + "/" + ev + "/format"), ev);
  EXPECT_TRUE(fmt.ok());
  c.format = *fmt;
  EXPECT_TRUE(ParseSample(Bytes(c.record), &c.sample));
  return c;
}

std::string RenderField(const Captured& c, const std::string& field, LabelDecode d = LabelDecode::kAuto,
                        const SymbolTable* syms = nullptr) {
  auto ex = FieldExtractor::Compile(*c.format.FindField(field), d, syms);
  EXPECT_TRUE(ex.ok()) << ex.status().ToString();
  std::string key;
  EXPECT_TRUE(ex->AppendKey(c.sample.raw, &key));
  size_t pos = 0;
  std::string out = ex->Render(key, &pos);
  EXPECT_EQ(pos, key.size());
  return out;
}

int64_t Int(const Captured& c, const std::string& field) {
  auto ex = FieldExtractor::Compile(*c.format.FindField(field), LabelDecode::kAuto, nullptr);
  int64_t v = 0;
  EXPECT_TRUE(ex->ReadInteger(c.sample.raw, &v));
  return v;
}

// write(fd, buf, 4242) to /dev/null by pid 4126, captured on Linux 6.18.
TEST(DecodeTest, SysEnterWriteByteExact) {
  Captured c = Load("syscalls", "sys_enter_write");
  ASSERT_EQ(c.record.size(), 80u);
  EXPECT_EQ(c.sample.id, 9u);
  EXPECT_EQ(c.sample.pid, 4126u);
  EXPECT_EQ(c.sample.tid, 4126u);
  EXPECT_EQ(c.sample.time_ns, 0x9a9546bb71ULL);
  // The raw payload is 44 bytes: 40 of fields plus 4 of padding, which must be tolerated.
  EXPECT_EQ(c.sample.raw.size(), 44u);
  EXPECT_EQ(Int(c, "common_type"), 840);
  EXPECT_EQ(Int(c, "common_pid"), 4126);
  EXPECT_EQ(Int(c, "__syscall_nr"), 1);  // __NR_write on x86_64
  EXPECT_EQ(Int(c, "count"), 4242);
  EXPECT_EQ(RenderField(c, "count"), "4242");
  EXPECT_EQ(RenderField(c, "count", LabelDecode::kHex), "0x1092");
  EXPECT_EQ(RenderField(c, "fd"), "4");
}

// One 100-byte UDP datagram to 127.0.0.1: 142 bytes on "lo" (a __data_loc string).
TEST(DecodeTest, NetDevXmitDataLocString) {
  Captured c = Load("net", "net_dev_xmit");
  EXPECT_EQ(Int(c, "len"), 142);
  EXPECT_EQ(Int(c, "rc"), 0);
  EXPECT_EQ(RenderField(c, "name"), "lo");
  EXPECT_EQ(RenderField(c, "skbaddr"), "0xffff88815af76500");
}

// This task ("tpe_capture") sleeping in nanosleep: prev_state 1 (S), switching to swapper/0.
TEST(DecodeTest, SchedSwitchCharArraysAndFlags) {
  Captured c = Load("sched", "sched_switch");
  EXPECT_EQ(RenderField(c, "prev_comm"), "tpe_capture");
  EXPECT_EQ(RenderField(c, "next_comm"), "swapper/0");
  EXPECT_EQ(Int(c, "prev_pid"), 4126);
  EXPECT_EQ(Int(c, "next_pid"), 0);
  EXPECT_EQ(Int(c, "prev_prio"), 120);
  EXPECT_EQ(Int(c, "prev_state"), 1);
  SymbolTable flags;
  flags.is_flags = true;
  flags.entries = {{1, "S"}, {2, "D"}};
  EXPECT_EQ(RenderField(c, "prev_state", LabelDecode::kSymbolic, &flags), "S");
}

TEST(DecodeTest, TruncatedRecordsAreRejectedNotRead) {
  Captured c = Load("syscalls", "sys_enter_write");
  for (size_t n = 0; n < 36; ++n) {
    Sample s;
    EXPECT_FALSE(ParseSample(Bytes(c.record.data(), n), &s)) << n;
  }
  Sample s;
  EXPECT_FALSE(ParseSample(Bytes(c.record.data(), 79), &s));  // raw size overruns the record
  // A field beyond a short raw payload fails instead of reading past it.
  auto ex = FieldExtractor::Compile(*c.format.FindField("count"), LabelDecode::kAuto, nullptr);
  std::string key;
  EXPECT_FALSE(ex->AppendKey(c.sample.raw.subspan(0, 36), &key));
  int64_t v;
  EXPECT_FALSE(ex->ReadInteger(c.sample.raw.subspan(0, 36), &v));
}

TEST(DecodeTest, DataLocPointingOutsideTheRecordFails) {
  Captured c = Load("net", "net_dev_xmit");
  std::vector<uint8_t> raw(c.sample.raw.begin(), c.sample.raw.end());
  raw[24] = 0xf0;  // offset 0xf0 > raw size
  auto ex = FieldExtractor::Compile(*c.format.FindField("name"), LabelDecode::kAuto, nullptr);
  std::string key;
  EXPECT_FALSE(ex->AppendKey(Bytes(raw), &key));
}

TEST(DecodeTest, RelLocIsRelativeToTheFieldEnd) {
  auto fmt = ParseFormat(*ReadFileToString(testing::DataDir() + "/synthetic/events/sample/foo_rel/format"), "x");
  ASSERT_TRUE(fmt.ok());
  std::vector<uint8_t> raw(32, 0);
  // msg at offset 12: u32 = len 3 << 16 | 4 → string at 12 + 4 + 4 = 20.
  uint32_t loc = (3u << 16) | 4u;
  std::memcpy(&raw[12], &loc, 4);
  std::memcpy(&raw[20], "hi", 3);
  auto ex = FieldExtractor::Compile(*fmt->FindField("msg"), LabelDecode::kAuto, nullptr);
  std::string key;
  ASSERT_TRUE(ex->AppendKey(Bytes(raw), &key));
  size_t pos = 0;
  EXPECT_EQ(ex->Render(key, &pos), "hi");
}

TEST(DecodeTest, InetAddresses) {
  auto fmt = ParseFormat(*ReadFileToString(kDir + "/events/tcp/tcp_retransmit_skb/format"), "x");
  ASSERT_TRUE(fmt.ok());
  std::vector<uint8_t> raw(80, 0);
  const uint8_t v4[4] = {10, 1, 2, 3};
  const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::memcpy(&raw[38], v4, 4);   // daddr
  std::memcpy(&raw[58], v6, 16);  // daddr_v6
  auto a = FieldExtractor::Compile(*fmt->FindField("daddr"), LabelDecode::kInet, nullptr);
  auto b = FieldExtractor::Compile(*fmt->FindField("daddr_v6"), LabelDecode::kInet, nullptr);
  auto h = FieldExtractor::Compile(*fmt->FindField("daddr"), LabelDecode::kAuto, nullptr);
  std::string key;
  ASSERT_TRUE(a->AppendKey(Bytes(raw), &key));
  ASSERT_TRUE(b->AppendKey(Bytes(raw), &key));
  ASSERT_TRUE(h->AppendKey(Bytes(raw), &key));
  size_t pos = 0;
  EXPECT_EQ(a->Render(key, &pos), "10.1.2.3");
  EXPECT_EQ(b->Render(key, &pos), "2001:db8::1");
  EXPECT_EQ(h->Render(key, &pos), "0x0a010203");
}

TEST(DecodeTest, DecodeMismatchesAreExplained) {
  auto fmt = ParseFormat(*ReadFileToString(kDir + "/events/tcp/tcp_retransmit_skb/format"), "x");
  auto r = FieldExtractor::Compile(*fmt->FindField("sport"), LabelDecode::kInet, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs a 4-byte (IPv4) or 16-byte (IPv6) address"), std::string::npos);
  r = FieldExtractor::Compile(*fmt->FindField("sport"), LabelDecode::kSymbolic, nullptr);
  EXPECT_NE(r.status().message().find("no __print_symbolic or __print_flags table"), std::string::npos);
  SymbolTable unresolved;
  unresolved.unresolved = {"TCP_ESTABLISHED"};
  r = FieldExtractor::Compile(*fmt->FindField("state"), LabelDecode::kSymbolic, &unresolved);
  EXPECT_NE(r.status().message().find("unresolved names such as TCP_ESTABLISHED"), std::string::npos);
  auto sw = ParseFormat(*ReadFileToString(kDir + "/events/sched/sched_switch/format"), "x");
  r = FieldExtractor::Compile(*sw->FindField("prev_comm"), LabelDecode::kHex, nullptr);
  EXPECT_NE(r.status().message().find("is text"), std::string::npos);
}

// ipi:ipi_send_cpumask carries `__data_loc cpumask_t cpumask`: the label is the mask it points
// at, not the loc word (which is the same for every record of the event).
TEST(DecodeTest, DataLocCpumaskRendersTheMaskNotTheLocWord) {
  auto fmt = ParseFormat(*ReadFileToString(kDir + "/events/ipi/ipi_send_cpumask/format"), "x");
  ASSERT_TRUE(fmt.ok()) << fmt.status().ToString();
  auto ex = FieldExtractor::Compile(*fmt->FindField("cpumask"), LabelDecode::kAuto, nullptr);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  std::vector<std::string> rendered;
  for (uint64_t mask : {0x1ULL, 0x2ULL, 0x3ULL, 0x100000000ULL}) {
    std::vector<uint8_t> raw(40, 0);
    const uint32_t loc = (8u << 16) | 32u;  // 8 bytes at offset 32
    std::memcpy(raw.data() + 8, &loc, 4);
    std::memcpy(raw.data() + 32, &mask, 8);
    std::string key;
    ASSERT_TRUE(ex->AppendKey(Bytes(raw), &key));
    size_t pos = 0;
    rendered.push_back(ex->Render(key, &pos));
    EXPECT_EQ(pos, key.size());
  }
  EXPECT_EQ(rendered, (std::vector<std::string>{"0x1", "0x2", "0x3", "0x100000000"}));
  auto hex = FieldExtractor::Compile(*fmt->FindField("cpumask"), LabelDecode::kHex, nullptr);
  EXPECT_TRUE(hex.ok()) << hex.status().ToString();

  // A loc word pointing outside the record is a decode error, not a read past it.
  std::vector<uint8_t> bad(40, 0);
  const uint32_t loc = (64u << 16) | 32u;
  std::memcpy(bad.data() + 8, &loc, 4);
  std::string key;
  EXPECT_FALSE(ex->AppendKey(Bytes(bad), &key));
}

// A collector kept across a reload renders symbolic labels after the plan (and its symbol
// tables) that compiled it is gone: the extractor owns a copy.
TEST(DecodeTest, ExtractorOutlivesItsSymbolTable) {
  auto fmt = ParseFormat(*ReadFileToString(kDir + "/events/tcp/tcp_retransmit_skb/format"), "x");
  std::optional<FieldExtractor> ex;
  {
    auto table = std::make_unique<SymbolTable>();
    table->entries = {{1, "TCP_ESTABLISHED"}, {2, "TCP_SYN_SENT"}};
    auto c = FieldExtractor::Compile(*fmt->FindField("state"), LabelDecode::kSymbolic, table.get());
    ASSERT_TRUE(c.ok());
    ex = *c;
  }  // the table is freed here
  const int64_t two = 2;
  std::string key(reinterpret_cast<const char*>(&two), sizeof(two));
  size_t pos = 0;
  EXPECT_EQ(ex->Render(key, &pos), "TCP_SYN_SENT");
}

EventFormat Format(const std::string& sys, const std::string& ev) {
  auto fmt = ParseFormat(*ReadFileToString(kDir + "/events/" + sys + "/" + ev + "/format"), ev);
  EXPECT_TRUE(fmt.ok()) << fmt.status().ToString();
  return *fmt;
}

DecodeSources FakeSources() {
  DecodeSources s;
  s.kallsyms = testing::DataDir() + "/kernel_names/kallsyms";
  s.sys_dev_block = testing::DataDir() + "/kernel_names/sys/dev/block";
  return s;
}

// Renders `value` stored in `field` (at its offset in a zeroed record) with `decode`.
std::string RenderValue(const FieldFormat& field, LabelDecode decode, uint64_t value,
                        const DecodeSources& sources = FakeSources()) {
  auto ex = FieldExtractor::Compile(field, decode, nullptr, sources);
  EXPECT_TRUE(ex.ok()) << ex.status().ToString();
  if (!ex.ok()) return "";
  std::vector<uint8_t> raw(field.offset + 8, 0);
  std::memcpy(raw.data() + field.offset, &value, field.size);  // little-endian
  std::string key;
  EXPECT_TRUE(ex->AppendKey(Bytes(raw), &key));
  size_t pos = 0;
  std::string out = ex->Render(key, &pos);
  EXPECT_EQ(pos, key.size());
  return out;
}

std::string CompileError(const FieldFormat& field, LabelDecode decode, const DecodeSources& sources = FakeSources()) {
  auto ex = FieldExtractor::Compile(field, decode, nullptr, sources);
  EXPECT_FALSE(ex.ok());
  return ex.ok() ? "" : ex.status().message();
}

TEST(DecodeTest, ParsesTheNewDecodeNames) {
  EXPECT_EQ(ParseLabelDecode("errno"), LabelDecode::kErrno);
  EXPECT_EQ(ParseLabelDecode("blkdev"), LabelDecode::kBlkdev);
  EXPECT_EQ(ParseLabelDecode("ksym"), LabelDecode::kKsym);
  EXPECT_EQ(ParseLabelDecode("Errno"), std::nullopt);
  EXPECT_EQ(LabelDecodeNames(), "auto, hex, inet, symbolic, syscall, errno, blkdev, ksym");
}

// syscalls:sys_exit_nanosleep `long ret` (signed, 8 bytes).
TEST(DecodeTest, ErrnoNamesNegativeValuesOnly) {
  EventFormat fmt = Format("syscalls", "sys_exit_nanosleep");
  const FieldFormat& ret = *fmt.FindField("ret");
  auto neg = [](int64_t v) { return static_cast<uint64_t>(v); };
  EXPECT_EQ(RenderValue(ret, LabelDecode::kErrno, neg(-2)), "ENOENT");
  EXPECT_EQ(RenderValue(ret, LabelDecode::kErrno, neg(-13)), "EACCES");
  EXPECT_EQ(RenderValue(ret, LabelDecode::kErrno, neg(-4)), "EINTR");
  EXPECT_EQ(RenderValue(ret, LabelDecode::kErrno, 0), "0");
  EXPECT_EQ(RenderValue(ret, LabelDecode::kErrno, 5), "5");
  EXPECT_EQ(RenderValue(ret, LabelDecode::kErrno, neg(-99999)), "-99999");
  // A 4-byte signed int is sign-extended into the key.
  const FieldFormat& nr = *fmt.FindField("__syscall_nr");
  EXPECT_EQ(RenderValue(nr, LabelDecode::kErrno, 0xfffffffeu), "ENOENT");
  EXPECT_EQ(ErrnoName(-1), "EPERM");
  EXPECT_EQ(ErrnoName(1), "");
  EXPECT_EQ(ErrnoName(INT64_MIN), "");
}

// block:block_rq_issue `dev_t dev` in the kernel's encoding (MAJOR << 20 | MINOR).
TEST(DecodeTest, BlkdevNamesTheDiskOrShowsMajorMinor) {
  EventFormat fmt = Format("block", "block_rq_issue");
  const FieldFormat& dev = *fmt.FindField("dev");
  EXPECT_EQ(RenderValue(dev, LabelDecode::kBlkdev, 7u << 20 | 0), "loop0");
  EXPECT_EQ(RenderValue(dev, LabelDecode::kBlkdev, 259u << 20 | 1), "nvme0n1p1");
  EXPECT_EQ(RenderValue(dev, LabelDecode::kBlkdev, 8u << 20 | 16), "8:16");
  EXPECT_EQ(RenderValue(dev, LabelDecode::kAuto, 7u << 20 | 0), "7340032");
}

// kmem:kmalloc `unsigned long call_site` (8-byte integer) and `const void * ptr`.
TEST(DecodeTest, KsymNamesKernelAddresses) {
  EventFormat fmt = Format("kmem", "kmalloc");
  EXPECT_EQ(RenderValue(*fmt.FindField("call_site"), LabelDecode::kKsym, 0xffffffff815be070), "vmstat_update");
  EXPECT_EQ(RenderValue(*fmt.FindField("call_site"), LabelDecode::kKsym, 0xffffffff815be0a4), "vmstat_update+0x34");
  EXPECT_EQ(RenderValue(*fmt.FindField("ptr"), LabelDecode::kKsym, 0xffffffff81001002), "do_one_initcall+0x2");
  EXPECT_EQ(RenderValue(*fmt.FindField("ptr"), LabelDecode::kKsym, 0x1000), "0x1000");
}

TEST(DecodeTest, KsymRefusesAtCompileWhenKptrRestrictHidesAddresses) {
  EventFormat fmt = Format("kmem", "kmalloc");
  DecodeSources hidden = FakeSources();
  hidden.kallsyms = testing::DataDir() + "/kernel_names/kallsyms_restricted";
  std::string m = CompileError(*fmt.FindField("ptr"), LabelDecode::kKsym, hidden);
  EXPECT_EQ(m.rfind("decode \"ksym\": " + hidden.kallsyms +
                        " lists every kernel symbol address as 0: "
                        "kernel.kptr_restrict hides them",
                    0),
            0u)
      << m;
  // Other decodes do not read kallsyms.
  EXPECT_EQ(RenderValue(*fmt.FindField("ptr"), LabelDecode::kHex, 0x10, hidden), "0x10");
}

TEST(DecodeTest, NewDecodesRefuseFieldsTheyCannotRenderAndSayWhatFits) {
  EventFormat kmalloc = Format("kmem", "kmalloc");
  EventFormat issue = Format("block", "block_rq_issue");
  EXPECT_EQ(CompileError(*issue.FindField("rwbs"), LabelDecode::kErrno),
            "decode \"errno\" needs an integer field holding a negative errno (e.g. syscalls:sys_exit_openat ret); "
            "field \"rwbs\" (char[10], 10 bytes) is not one: use \"auto\"");
  EXPECT_EQ(CompileError(*kmalloc.FindField("ptr"), LabelDecode::kErrno),
            "decode \"errno\" needs an integer field holding a negative errno (e.g. syscalls:sys_exit_openat ret); "
            "field \"ptr\" (const void *, 8 bytes) is not one: use \"auto\"");
  EXPECT_EQ(CompileError(*issue.FindField("comm"), LabelDecode::kBlkdev),
            "decode \"blkdev\" needs an integer field holding a kernel dev_t (e.g. block:block_rq_issue dev); "
            "field \"comm\" (char[16], 16 bytes) is not one: use \"auto\"");
  EXPECT_EQ(CompileError(*issue.FindField("nr_sector"), LabelDecode::kKsym),
            "decode \"ksym\" needs a pointer or 8-byte integer field holding a kernel address (e.g. "
            "workqueue:workqueue_execute_start function); field \"nr_sector\" (unsigned int, 4 bytes) is not one: "
            "use \"auto\" or \"hex\"");
  EXPECT_EQ(CompileError(*issue.FindField("cmd"), LabelDecode::kKsym),
            "decode \"ksym\" needs a pointer or 8-byte integer field holding a kernel address (e.g. "
            "workqueue:workqueue_execute_start function); field \"cmd\" (__data_loc char[], 4 bytes) is not one: "
            "use \"auto\" or \"hex\"");
}

std::string Fitting(const EventFormat& fmt, const std::string& field, const SymbolTable* table = nullptr) {
  std::string out;
  for (const auto& d : FittingDecodes(*fmt.FindField(field), table)) out += (out.empty() ? "" : ", ") + d;
  return out;
}

TEST(DecodeTest, FittingDecodesOfCapturedFields) {
  EventFormat kmalloc = Format("kmem", "kmalloc");
  EXPECT_EQ(Fitting(kmalloc, "ptr"), "auto, hex, ksym");
  EXPECT_EQ(Fitting(kmalloc, "call_site"), "auto, hex, ksym");
  EXPECT_EQ(Fitting(kmalloc, "bytes_req"), "auto, hex");
  EXPECT_EQ(Fitting(kmalloc, "node"), "auto, hex, errno");
  EventFormat issue = Format("block", "block_rq_issue");
  EXPECT_EQ(Fitting(issue, "dev"), "auto, hex, blkdev");
  EXPECT_EQ(Fitting(issue, "comm"), "auto");
  EXPECT_EQ(Fitting(issue, "nr_sector"), "auto, hex");
  EventFormat exit = Format("syscalls", "sys_exit_nanosleep");
  EXPECT_EQ(Fitting(exit, "ret"), "auto, hex, errno");
  EXPECT_EQ(Fitting(exit, "__syscall_nr"), "auto, hex, syscall, errno");
  EventFormat enter = Format("raw_syscalls", "sys_enter");
  EXPECT_EQ(Fitting(enter, "id"), "auto, hex, syscall, errno");
  EventFormat sock = Format("sock", "inet_sock_set_state");
  EXPECT_EQ(Fitting(sock, "saddr"), "auto, hex, inet");
  EXPECT_EQ(Fitting(sock, "daddr_v6"), "auto, hex, inet");
  EXPECT_EQ(Fitting(sock, "skaddr"), "auto, hex, ksym");
  EXPECT_EQ(Fitting(sock, "sport"), "auto, hex");
  SymbolTable states;
  states.entries = {{1, "TCP_ESTABLISHED"}};
  EXPECT_EQ(Fitting(sock, "oldstate", &states), "auto, hex, symbolic");
  SymbolTable unresolved;
  unresolved.unresolved = {"TCP_ESTABLISHED"};
  EXPECT_EQ(Fitting(sock, "oldstate", &unresolved), "auto, hex");
  EXPECT_EQ(Fitting(sock, "common_pid"), "auto, hex");
  // Every listed decode compiles (the listing cannot disagree with the config loader).
  for (const auto* f :
       {kmalloc.FindField("ptr"), issue.FindField("dev"), exit.FindField("ret"), sock.FindField("saddr")}) {
    for (const auto& d : FittingDecodes(*f, nullptr)) {
      EXPECT_TRUE(FieldExtractor::Compile(*f, *ParseLabelDecode(d), nullptr, FakeSources()).ok())
          << f->name << " " << d;
    }
  }
}

// PERF_SAMPLE_CGROUP follows RAW: { header; u64 id; u32 pid, tid; u64 time; u32 size; raw; u64 cgroup }.
TEST(DecodeTest, SampleWithCgroupIdByteExact) {
  const std::vector<uint8_t> rec = testing::ParseHex(
      "09000000 0000 3800"        // header: PERF_RECORD_SAMPLE, misc 0, size 56
      "2a00000000000000"          // id 42
      "39300000 3a300000"         // pid 12345, tid 12346
      "0010000000000000"          // time 4096
      "0c000000"                  // raw size 12
      "0102030405060708090a0b0c"  // raw
      "efbeadde00000000");        // cgroup id 0xdeadbeef
  ASSERT_EQ(rec.size(), 56u);
  Sample s;
  ASSERT_TRUE(ParseSample(Bytes(rec), &s, SampleLayout{.cgroup = true}));
  EXPECT_EQ(s.id, 42u);
  EXPECT_EQ(s.pid, 12345u);
  EXPECT_EQ(s.tid, 12346u);
  EXPECT_EQ(s.time_ns, 4096u);
  ASSERT_EQ(s.raw.size(), 12u);
  EXPECT_EQ(s.raw[0], 1);
  EXPECT_EQ(s.raw[11], 12);
  EXPECT_EQ(s.cgroup_id, 0xdeadbeefu);
  // Without the flag the same bytes parse as a plain sample (the cgroup id is not read).
  Sample plain;
  ASSERT_TRUE(ParseSample(Bytes(rec), &plain));
  EXPECT_EQ(plain.cgroup_id, 0u);
  // A record cut anywhere inside the cgroup id is rejected.
  for (size_t n = 48; n < 56; ++n) {
    Sample t;
    EXPECT_FALSE(ParseSample(Bytes(rec.data(), n), &t, SampleLayout{.cgroup = true})) << n;
  }
}

// PERF_SAMPLE_CALLCHAIN sits between TIME and RAW: { header; id; pid, tid; time; u64 nr;
// u64 ips[nr]; u32 size; raw }.
TEST(DecodeTest, SampleWithCallchainByteExact) {
  const std::vector<uint8_t> rec = testing::ParseHex(
      "09000000 0000 4800"  // header: PERF_RECORD_SAMPLE, misc 0, size 72
      "2a00000000000000"    // id 42
      "39300000 3a300000"   // pid 12345, tid 12346
      "0010000000000000"    // time 4096
      "0300000000000000"    // nr 3
      "00feffffffffffff"    // PERF_CONTEXT_USER (-512)
      "3611400000000000"    // 0x401136
      "8011400000000000"    // 0x401180
      "04000000"            // raw size 4
      "01020304");          // raw
  ASSERT_EQ(rec.size(), 72u);
  Sample s;
  ASSERT_TRUE(ParseSample(Bytes(rec), &s, SampleLayout{.callchain = true}));
  EXPECT_EQ(s.time_ns, 4096u);
  ASSERT_EQ(s.callchain.size(), 24u);
  uint64_t ip = 0;
  std::memcpy(&ip, s.callchain.data() + 8, 8);
  EXPECT_EQ(ip, 0x401136u);
  ASSERT_EQ(s.raw.size(), 4u);
  EXPECT_EQ(s.raw[3], 4);
  // Cut anywhere, or an nr larger than the record, is rejected (never read past the record).
  for (size_t n = 32; n < 72; ++n) {
    Sample t;
    EXPECT_FALSE(ParseSample(Bytes(rec.data(), n), &t, SampleLayout{.callchain = true})) << n;
  }
  std::vector<uint8_t> huge = rec;
  huge[32] = 0xff, huge[33] = 0xff, huge[38] = 0xff;  // nr = 0x00ff00000000ffff
  Sample t;
  EXPECT_FALSE(ParseSample(Bytes(huge), &t, SampleLayout{.callchain = true}));
}

// A cpu-clock sample of a CPU profile: PERF_SAMPLE_PERIOD between TIME and CALLCHAIN, the empty
// raw payload the kernel writes for a software event (size 4, zeros; perf_output_sample):
// { header; id; pid, tid; time; u64 period; u64 nr; u64 ips[nr]; u32 size; u32 0 }.
TEST(DecodeTest, ClockSampleWithPeriodByteExact) {
  const std::vector<uint8_t> rec = testing::ParseHex(
      "09000000 0000 4800"   // header: PERF_RECORD_SAMPLE, misc 0, size 72
      "2b00000000000000"     // id 43
      "39300000 39300000"    // pid 12345, tid 12345
      "0020000000000000"     // time 8192
      "1a18230300000000"     // period 52,631,578 ns (1e9 / 19 Hz, truncated)
      "0200000000000000"     // nr 2
      "00feffffffffffff"     // PERF_CONTEXT_USER
      "3611400000000000"     // 0x401136
      "04000000 00000000");  // raw size 4, empty
  ASSERT_EQ(rec.size(), 72u);
  Sample s;
  ASSERT_TRUE(ParseSample(Bytes(rec), &s, SampleLayout{.callchain = true, .period = true}));
  EXPECT_EQ(s.id, 43u);
  EXPECT_EQ(s.time_ns, 8192u);
  EXPECT_EQ(s.period, 52631578u);
  ASSERT_EQ(s.callchain.size(), 16u);
  EXPECT_EQ(s.raw.size(), 4u);
  for (size_t n = 32; n < 72; ++n) {
    Sample t;
    EXPECT_FALSE(ParseSample(Bytes(rec.data(), n), &t, SampleLayout{.callchain = true, .period = true})) << n;
  }
}

}  // namespace
}  // namespace tpe
