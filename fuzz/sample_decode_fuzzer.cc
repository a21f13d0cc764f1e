// Fuzzes the sample decoder: ParseSample (src/decode/sample.h), the field extractors of
// src/decode/field_extractor.h compiled from a captured format (every field, every decode that
// compiles, symbol tables from the format's print fmt), and the perf/records.h parsers, over
// fuzz bytes.
//
// Input: <format selector: u8> <record bytes...>. The record is decoded as a PERF_RECORD_SAMPLE
// (header, id, pid/tid, time, raw size, raw) and, separately, the bytes after the selector are
// used as a raw tracepoint payload directly, so the extractors see arbitrary payloads too.
#include <linux/perf_event.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "decode/field_extractor.h"
#include "decode/sample.h"
#include "format/print_symbols.h"
#include "fuzz/fuzz_util.h"
#include "perf/records.h"

using namespace tpe;

namespace {

struct Decoder {
  EventFormat format;
  std::map<std::string, SymbolTable> symbols;
  std::vector<FieldExtractor> extractors;
};

const std::vector<Decoder>& Decoders() {
  static const std::vector<Decoder> decoders = [] {
    std::vector<Decoder> v;
    for (const char* rel :
         {"linux-6.18/events/sched/sched_switch/format", "linux-6.18/events/syscalls/sys_enter_write/format",
          "linux-6.18/events/net/net_dev_xmit/format", "linux-6.18/events/tcp/tcp_retransmit_skb/format",
          "linux-6.18/events/sock/inet_sock_set_state/format", "linux-6.18/events/raw_syscalls/sys_enter/format",
          "linux-6.18/events/block/block_rq_issue/format", "synthetic/events/sample/foo_rel/format"}) {
      Decoder d;
      const std::string text = fuzz::ReadTestData(rel);
      d.format = fuzz::LoadFormat(rel);
      std::string system = rel;
      system = system.substr(0, system.rfind('/'));
      system = system.substr(0, system.rfind('/'));
      system = system.substr(system.rfind('/') + 1);
      auto tables = ParsePrintSymbols(text, system, nullptr, rel);
      if (tables.ok()) d.symbols = *tables;
      v.push_back(std::move(d));
    }
    // Extractors point at their symbol table: compile them once the vector no longer moves.
    for (Decoder& d : v) {
      for (const FieldFormat& f : d.format.fields) {
        auto it = d.symbols.find(f.name);
        const SymbolTable* table = it == d.symbols.end() ? nullptr : &it->second;
        for (LabelDecode dec : {LabelDecode::kAuto, LabelDecode::kHex, LabelDecode::kInet, LabelDecode::kSymbolic,
                                LabelDecode::kSyscall}) {
          auto ex = FieldExtractor::Compile(f, dec, table);
          if (ex.ok()) d.extractors.push_back(*ex);
        }
      }
    }
    return v;
  }();
  return decoders;
}

void Extract(const Decoder& d, Bytes raw) {
  std::string key;
  std::vector<const FieldExtractor*> appended;
  for (const FieldExtractor& ex : d.extractors) {
    int64_t v = 0;
    (void)ex.ReadInteger(raw, &v);
    if (ex.AppendKey(raw, &key)) appended.push_back(&ex);
  }
  // The key is rendered segment by segment, as at scrape time.
  size_t pos = 0;
  for (const FieldExtractor* ex : appended) (void)ex->Render(key, &pos);
  TPE_FUZZ_CHECK(pos == key.size(), "rendering consumed %zu of %zu key bytes", pos, key.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Decoder& d = Decoders()[data[0] % Decoders().size()];
  const Bytes record(data + 1, size - 1);

  Sample s;
  if (ParseSample(record, &s)) {
    TPE_FUZZ_CHECK(s.raw.data() >= record.data() && s.raw.data() + s.raw.size() <= record.data() + record.size(),
                   "raw outside the record");
    Extract(d, s.raw);
  }
  Extract(d, record);

  perf_event_header h{};
  if (record.size() >= sizeof(h)) std::memcpy(&h, record.data(), sizeof(h));
  uint64_t t = 0, id = 0;
  (void)RecordTime(h.type, record, &t);
  (void)SampleId(record, &id);
  CommRecord c;
  if (ParseCommRecord(record, &c)) {
    const auto* p = reinterpret_cast<const uint8_t*>(c.comm.data());
    TPE_FUZZ_CHECK(p >= record.data() && p + c.comm.size() <= record.data() + record.size(), "comm outside");
  }
  TaskRecord task;
  (void)ParseTaskRecord(record, &task);
  LostRecord lost;
  (void)ParseLostRecord(PERF_RECORD_LOST, record, &lost);
  (void)ParseLostRecord(PERF_RECORD_LOST_SAMPLES, record, &lost);
  return 0;
}
