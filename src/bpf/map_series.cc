#include "bpf/map_series.h"

namespace tpe::bpf {
namespace {

void AddInto(std::vector<uint64_t>* to, const std::vector<uint64_t>& v) {
  if (to->size() < v.size()) to->resize(v.size(), 0);
  for (size_t i = 0; i < v.size(); ++i) (*to)[i] += v[i];
}

}  // namespace

MapSeries::MapSeries(std::unique_ptr<MapAccess> map, MapShape shape, LabelKeyFn label_key)
    : map_(std::move(map)), shape_(shape), label_key_(std::move(label_key)) {}

std::map<std::string, std::vector<uint64_t>> MapSeries::Read() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<uint64_t>> out;
  for (MapEntry& e : ReadMap(map_.get(), shape_, &batch_)) {
    AddInto(&out[label_key_(e.key)], e.value);
    state_[e.key].exported = std::move(e.value);
  }
  for (auto it = retired_.begin(); it != retired_.end();) {
    const bool live = out.count(it->first) != 0;
    AddInto(&out[it->first], it->second);
    // Exported: its final value reached a page. Kept while a live entry shares the label key.
    it = live ? std::next(it) : retired_.erase(it);
  }
  return out;
}

MapSeries::Removed MapSeries::Sweep(uint64_t now_ns, uint64_t idle_ns,
                                    const std::function<bool(const std::string&)>& dead) {
  Removed removed;
  if ((idle_ns == 0 && !dead) || shape_.array) return removed;  // no series could go: no map reads
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, State> next;
  std::vector<uint64_t> raw(static_cast<size_t>(shape_.slots) * shape_.cpus);
  std::vector<MapEntry> entries = ReadMap(map_.get(), shape_, &batch_);
  std::map<std::string, int> sharing;  // label key → program keys that render it
  for (const MapEntry& e : entries) ++sharing[label_key_(e.key)];
  for (MapEntry& e : entries) {
    State st;
    auto it = state_.find(e.key);
    if (it != state_.end()) st = it->second;
    if (it == state_.end() || st.value != e.value) {
      st.value = e.value;
      st.changed_ns = now_ns;
    }
    const std::string lk = label_key_(e.key);
    const bool idle = idle_ns != 0 && now_ns - st.changed_ns >= idle_ns;
    if (!idle && !(dead && dead(lk))) {
      next.emplace(std::move(e.key), std::move(st));
      continue;
    }
    // Take it out of the map with its latest value and fold that value into user space.
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
    std::vector<uint64_t> final_value = SumCpus(raw.data(), shape_.slots, shape_.cpus);
    const bool on_a_page = final_value == st.exported && sharing[lk] == 1 && retired_.count(lk) == 0;
    if (!on_a_page) AddInto(&retired_[lk], final_value);
    ++(idle ? removed.idle : removed.exited);
  }
  state_.swap(next);
  return removed;
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
