// Fuzzes ParseFilter (src/filter/filter.h) against captured formats, then EvaluateFilter on
// fuzz-derived record bytes, and checks that the canonical form round-trips:
// ParseFilter(FilterToString(e)) parses, prints the same text and decides the record the same.
//
// Input: <filter text> [ '\0' <format selector byte> <record bytes> ]. Without the '\0' the
// whole input is the filter, checked against sched:sched_switch with an empty record.
// The first 16 record bytes double as the task's comm; char * fields "point" into the record.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "filter/filter.h"
#include "fuzz/fuzz_util.h"

using namespace tpe;

namespace {

const std::vector<EventFormat>& Formats() {
  static const std::vector<EventFormat> formats = [] {
    std::vector<EventFormat> v;
    for (const char* rel :
         {"linux-6.18/events/sched/sched_switch/format", "linux-6.18/events/syscalls/sys_enter_openat/format",
          "linux-6.18/events/net/net_dev_xmit/format", "synthetic/events/sample/foo_rel/format",
          "linux-6.18/events/tcp/tcp_retransmit_skb/format", "linux-6.18/events/sched/sched_waking/format"}) {
      v.push_back(fuzz::LoadFormat(rel));
    }
    // ipi:ipi_send_cpumask on Linux 6.18 (a __data_loc cpumask_t field); not captured in tests/data.
    auto ipi = ParseFormat(
        "name: ipi_send_cpumask\nID: 9\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
        "\tfield:__data_loc cpumask_t cpumask;\toffset:8;\tsize:4;\tsigned:0;\n"
        "\tfield:void * callsite;\toffset:16;\tsize:8;\tsigned:0;\n"
        "\tfield:void * callback;\toffset:24;\tsize:8;\tsigned:0;\n",
        "ipi_send_cpumask");
    TPE_FUZZ_CHECK(ipi.ok(), "%s", ipi.status().ToString().c_str());
    v.push_back(*ipi);
    return v;
  }();
  return formats;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* chars = reinterpret_cast<const char*>(data);
  const size_t text_len = strnlen(chars, size);
  const std::string_view text(chars, text_len);
  size_t selector = 0;
  Bytes record;
  if (text_len + 1 < size) {
    selector = data[text_len + 1];
    record = Bytes(data + text_len + 2, size - text_len - 2);
  }
  const EventFormat& format = Formats()[selector % Formats().size()];

  StatusOr<FilterExpr> e = ParseFilter(text, format);
  if (!e.ok()) {
    TPE_FUZZ_CHECK(e.status().code() == StatusCode::kInvalidArgument && !e.status().message().empty(),
                   "bad error status");
    return 0;
  }
  TPE_FUZZ_CHECK(text.size() <= kMaxFilterBytes, "accepted %zu bytes", text.size());

  FilterContext ctx;
  ctx.cpu = static_cast<uint32_t>(record.size() % 5);
  ctx.nr_cpu_ids = record.size() % 3 == 0 ? 0 : 4;
  ctx.comm = std::string_view(reinterpret_cast<const char*>(record.data()), std::min<size_t>(record.size(), 16));
  ctx.read_string = [&](uint64_t addr, bool user) -> std::optional<std::string> {
    if (record.empty() || (addr & 1) != user) return std::nullopt;
    size_t at = addr % record.size();
    return std::string(reinterpret_cast<const char*>(record.data() + at), record.size() - at);
  };
  const bool decision = EvaluateFilter(*e, record, ctx);
  (void)FilterWarnings(*e, format);

  const std::string canonical = FilterToString(*e);
  if (canonical.size() > kMaxFilterBytes) return 0;  // spaces added around operators can overflow the limit
  StatusOr<FilterExpr> again = ParseFilter(canonical, format);
  TPE_FUZZ_CHECK(again.ok(), "canonical form does not parse: [%s] -> [%s]: %s", std::string(text).c_str(),
                 canonical.c_str(), again.status().ToString().c_str());
  const std::string twice = FilterToString(*again);
  TPE_FUZZ_CHECK(twice == canonical, "canonical form is not stable: [%s] -> [%s] -> [%s]", std::string(text).c_str(),
                 canonical.c_str(), twice.c_str());
  TPE_FUZZ_CHECK(EvaluateFilter(*again, record, ctx) == decision, "canonical form decides differently: [%s] -> [%s]",
                 std::string(text).c_str(), canonical.c_str());
  return 0;
}
