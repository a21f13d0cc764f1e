#include "daemon/plan.h"

#include "collectors/counter.h"
#include "decode/field_extractor.h"

namespace tpe {

EventCount EventPlan::ReadCounts() const {
  EventCount total;
  for (const auto& fd : fds) {
    auto c = ReadEventCount(fd.get());
    if (c.ok()) {
      total.count += c->count;
      total.lost += c->lost;
    }
  }
  return total;
}

bool Plan::any_sampled() const {
  for (const auto& e : events) {
    if (e->sampled) return true;
  }
  return false;
}

namespace {

std::string Quote(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

StatusOr<EventPlan*> GetEvent(Plan* plan, const Config& cfg, const MetricConfig& m, const Tracefs& tracefs,
                              const KernelEnums& enums, bool check_filters) {
  for (auto& e : plan->events) {
    if (e->event.ToString() == m.event && e->filter == m.filter) return e.get();
  }
  const std::string where = cfg.path + ": " + m.json_path + ".event";
  TPE_ASSIGN_OR_RETURN(EventName name, ParseEventName(m.event));
  if (!tracefs.HasEvent(name)) {
    return NotFound(where + ": no tracepoint \"" + m.event + "\" in " + tracefs.root() + "/events; closest: " +
                    Quote(tracefs.ClosestEvents(m.event, 3)) + " (list them with --list-events)");
  }
  auto ep = std::make_unique<EventPlan>();
  ep->event = name;
  ep->filter = m.filter;
  auto id = tracefs.ReadId(name);
  if (!id.ok()) return id.status().WithContext(where);
  ep->tracepoint_id = *id;
  auto text = tracefs.ReadFormat(name);
  if (!text.ok()) return text.status().WithContext(where);
  std::string src = tracefs.root() + "/events/" + name.system + "/" + name.name + "/format";
  auto fmt = ParseFormat(*text, src);
  if (!fmt.ok()) return fmt.status();
  ep->format = std::move(*fmt);
  auto syms = ParsePrintSymbols(
      *text, name.system, [&](std::string_view n) { return enums.Lookup(n); }, src);
  if (syms.ok()) ep->symbols = std::move(*syms);  // without tables only "symbolic" labels fail
  if (check_filters && !m.filter.empty()) {
    Status st = tracefs.CheckFilter(name, m.filter);
    if (!st.ok()) return st.WithContext(cfg.path + ": " + m.json_path + ".filter");
  }
  plan->events.push_back(std::move(ep));
  return plan->events.back().get();
}

StatusOr<LabelSet> BuildLabels(const Config& cfg, const MetricConfig& m, const EventPlan& ep,
                               std::vector<std::string>* warnings) {
  std::vector<LabelSpec> specs;
  for (const auto& l : m.labels) {
    LabelSpec s;
    s.name = l.name;
    if (!l.source.empty()) {
      s.source = *ParseLabelSource(l.source);
    } else {
      const FieldFormat* f = ep.format.FindField(l.field);
      if (f == nullptr) {
        return NotFound(cfg.path + ": " + l.json_path + ".field: " + ep.event.ToString() + " has no field \"" +
                        l.field + "\"; its fields: " + ep.format.DescribeFields());
      }
      auto it = ep.symbols.find(l.field);
      const SymbolTable* table = it == ep.symbols.end() ? nullptr : &it->second;
      LabelDecode decode = *ParseLabelDecode(l.decode);
      if (decode == LabelDecode::kSymbolic && table != nullptr && table->entries.empty() &&
          !table->unresolved.empty()) {
        // The format names enum constants and this kernel has no BTF to give their values:
        // show numbers rather than refuse to start.
        warnings->push_back(cfg.path + ": " + l.json_path + ".decode: symbol names of " + ep.event.ToString() +
                            " field \"" + l.field + "\" (" + table->unresolved.front() +
                            ", ...) have no values without kernel BTF (/sys/kernel/btf/vmlinux); showing numbers");
        decode = LabelDecode::kAuto;
      }
      auto ex = FieldExtractor::Compile(*f, decode, table);
      if (!ex.ok()) return ex.status().WithContext(cfg.path + ": " + l.json_path + ".decode");
      s.extractor = std::move(*ex);
    }
    specs.push_back(std::move(s));
  }
  return LabelSet(std::move(specs));
}

}  // namespace

StatusOr<std::unique_ptr<Plan>> BuildPlan(const Config& cfg, const Tracefs& tracefs, const KernelEnums& enums,
                                          bool check_filters) {
  auto plan = std::make_unique<Plan>();
  plan->config_path = cfg.path;
  plan->settings = cfg.settings;
  for (const auto& m : cfg.metrics) {
    TPE_ASSIGN_OR_RETURN(EventPlan * ep, GetEvent(plan.get(), cfg, m, tracefs, enums, check_filters));
    if (m.type != "counter")
      return InvalidArgument(cfg.path + ": " + m.json_path + ".type: unsupported \"" + m.type + "\"");
    std::unique_ptr<CounterCollector> c;
    if (m.labels.empty()) {
      // Counting mode: the kernel counts (after the filter); read() at scrape.
      c = std::make_unique<CounterCollector>(m.name, m.help, [ep] { return ep->ReadCounts().count; });
    } else {
      TPE_ASSIGN_OR_RETURN(LabelSet labels, BuildLabels(cfg, m, *ep, &plan->warnings));
      c = std::make_unique<CounterCollector>(m.name, m.help, std::move(labels), cfg.settings.max_series_per_metric);
      ep->sampled = true;
      ep->consumers.emplace_back(c.get(), 0);
      plan->needs_comm |= c->NeedsComm();
    }
    plan->collectors.push_back(std::move(c));
  }
  return plan;
}

}  // namespace tpe
