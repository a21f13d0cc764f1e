#include "bpf/map_series.h"

#include <linux/bpf.h>

#include <algorithm>
#include <set>

namespace tpe::bpf {

MapSeries::MapSeries(std::unique_ptr<MapAccess> map, MapShape shape, LabelKeyFn label_key)
    : map_(std::move(map)), shape_(shape), label_key_(std::move(label_key)) {}

void MapSeries::AddInto(std::vector<uint64_t>* to, const std::vector<uint64_t>& v) const { AddValues(to, v, shape_); }

std::vector<uint64_t> MapSeries::Taken(const uint64_t* raw) const {
  std::vector<uint64_t> v;
  SumCpus(raw, shape_, &v);  // out of the map: no second read (torn across two carries: never seen)
  return v;
}

std::map<std::string, std::vector<uint64_t>> MapSeries::Read() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<uint64_t>> out;
  for (MapEntry& e : ReadMap(map_.get(), shape_, &batch_)) {
    AddInto(&out[label_key_(e.key)], e.value);
    state_[e.key].exported = std::move(e.value);
  }
  std::set<std::string> live;  // label keys (with SetSeriesOf: series) with a key in the map
  for (const auto& [lk, v] : out) live.insert(series_of_ ? series_of_(lk) : lk);
  for (auto it = retired_.begin(); it != retired_.end();) {
    // A standing gauge's retired value is kept while it is not idle (SetMayIdle).
    const bool keep = live.count(series_of_ ? series_of_(it->first) : it->first) != 0 ||
                      (may_idle_ && gauge_ == Gauge::kStanding && !may_idle_(it->second));
    AddInto(&out[it->first], it->second);
    // Exported: its final value reached a page. Kept while a live key shares its series.
    it = keep ? std::next(it) : retired_.erase(it);
  }
  return out;
}

MapSeries::Removed MapSeries::Sweep(uint64_t now_ns, uint64_t idle_ns,
                                    const std::function<bool(const std::string&)>& dead) {
  Removed removed;
  if ((idle_ns == 0 && !dead) || shape_.array) return removed;  // no series could go: no map reads
  std::lock_guard<std::mutex> lock(mu_);
  // A standing gauge's retired value of an exited task goes with the task (SetMayIdle).
  if (may_idle_ && gauge_ == Gauge::kStanding && dead) {
    for (auto it = retired_.begin(); it != retired_.end();) it = dead(it->first) ? retired_.erase(it) : std::next(it);
  }
  std::map<std::string, State> next;
  std::vector<uint64_t> raw(static_cast<size_t>(shape_.slots) * shape_.cpus);
  std::vector<MapEntry> entries = ReadMap(map_.get(), shape_, &batch_);
  std::map<std::string, int> sharing;          // label key → program keys that render it
  std::map<std::string, uint64_t> changed_ns;  // series → its keys' latest change
  std::vector<State> states(entries.size());
  // series[i]: what goes as one (SetSeriesOf's series, else the program key); named[i]: what
  // `dead` is asked of (the series, else the label key).
  std::vector<std::string> label_keys(entries.size()), series(entries.size()), named(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    MapEntry& e = entries[i];
    label_keys[i] = label_key_(e.key);
    series[i] = series_of_ ? series_of_(label_keys[i]) : e.key;
    named[i] = series_of_ ? series[i] : label_keys[i];
    ++sharing[label_keys[i]];
    State& st = states[i];
    auto it = state_.find(e.key);
    if (it != state_.end()) st = it->second;
    if (it == state_.end() || st.value != e.value) {
      st.value = e.value;
      st.changed_ns = now_ns;
    }
    uint64_t& c = changed_ns[series[i]];
    c = std::max(c, st.changed_ns);
  }
  // The keys of each series to take out, with their final values.
  struct Out {
    bool idle = false, on_a_page = true;
    std::vector<std::pair<std::string, std::vector<uint64_t>>> values;  // label key, final value
  };
  std::map<std::string, Out> going;
  // A retired value of the same series: what a page showed last is not only this key's.
  std::set<std::string> retired_series;
  for (const auto& [lk, v] : retired_) retired_series.insert(series_of_ ? series_of_(lk) : lk);
  for (size_t i = 0; i < entries.size(); ++i) {
    MapEntry& e = entries[i];
    const bool may_idle = !may_idle_ || may_idle_(e.value);
    const bool idle = idle_ns != 0 && now_ns - changed_ns[series[i]] >= idle_ns && may_idle;
    const bool gone = dead && (!may_idle_ || gauge_ == Gauge::kStanding || may_idle) && dead(named[i]);
    if (!idle && !gone) {
      next.emplace(std::move(e.key), std::move(states[i]));
      continue;
    }
    // Take it out of the map with its latest value; user space keeps the value.
    int r = -EINVAL;
    if (lookup_and_delete_) {
      r = map_->LookupAndDelete(e.key.data(), raw.data());
      if (Unsupported(r)) lookup_and_delete_ = false;
    }
    if (!lookup_and_delete_) {
      r = map_->Lookup(e.key.data(), raw.data());
      if (r == 0) map_->Delete(e.key.data());
    }
    if (r != 0) continue;  // gone meanwhile
    if (may_idle_) {       // a gauge (SetMayIdle): dropped, unless a program changed it meanwhile
      std::vector<uint64_t> taken = Taken(raw.data());
      if ((idle || gauge_ == Gauge::kWindowed) && !may_idle_(taken)) {
        if (map_->Update(e.key.data(), raw.data(), BPF_NOEXIST) == 0) {
          next.emplace(std::move(e.key), std::move(states[i]));
          continue;
        }
        if (gauge_ == Gauge::kWindowed) {
          ++lost_;
        } else {  // a program re-created it: the taken value joins the live one on the page
          AddInto(&retired_[label_keys[i]], taken);
          continue;  // still on the page: not removed
        }
      }
      ++(idle ? removed.idle : removed.exited);
      continue;
    }
    Out& o = going[series[i]];
    o.idle = idle;
    std::vector<uint64_t> final_value = Taken(raw.data());
    o.on_a_page = o.on_a_page && final_value == states[i].exported && sharing[label_keys[i]] == 1 &&
                  retired_series.count(series_of_ ? series[i] : label_keys[i]) == 0;
    o.values.emplace_back(label_keys[i], std::move(final_value));
  }
  for (auto& [name, o] : going) {
    // A series whose every key's final value a page already shows leaves the page; else its
    // values are kept for the next scrape.
    if (!o.on_a_page) {
      for (const auto& [lk, v] : o.values) AddInto(&retired_[lk], v);
    }
    ++(o.idle ? removed.idle : removed.exited);
  }
  state_.swap(next);
  return removed;
}

std::vector<std::pair<std::string, std::vector<uint64_t>>> MapSeries::ReadEach() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, std::vector<uint64_t>>> out;
  for (MapEntry& e : ReadMap(map_.get(), shape_, &batch_)) {
    state_[e.key].exported = e.value;
    out.emplace_back(label_key_(e.key), std::move(e.value));
  }
  return out;
}

uint64_t MapSeries::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

size_t MapSeries::retired_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retired_.size();
}
bool MapSeries::uses_batch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return batch_;
}
bool MapSeries::uses_lookup_and_delete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lookup_and_delete_;
}

}  // namespace tpe::bpf
