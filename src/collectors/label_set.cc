#include "collectors/label_set.h"

#include <algorithm>
#include <cstring>

#include "common/utf8.h"

namespace tpe {

std::optional<LabelSource> ParseLabelSource(std::string_view s) { return FromName<LabelSource>(s); }

LabelSet::LabelSet(std::vector<LabelSpec> labels) : labels_(std::move(labels)) {
  for (const auto& l : labels_) {
    needs_comm_ |= l.source == LabelSource::kComm;
    needs_cgroup_ |= l.source == LabelSource::kCgroup;
  }
}

namespace {
void AppendU32(std::string* key, uint32_t v) { key->append(reinterpret_cast<const char*>(&v), sizeof(v)); }
}  // namespace

bool LabelSet::BuildKey(const Sample& s, CommTable* comms, std::string* key) const {
  key->clear();
  for (const auto& l : labels_) {
    switch (l.source) {
      case LabelSource::kField:
        if (!l.extractor->AppendKey(s.raw, key)) return false;
        break;
      case LabelSource::kComm: {
        std::string_view c = comms->Lookup(s.tid);
        key->push_back(static_cast<char>(c.size()));
        key->append(c);
        break;
      }
      case LabelSource::kPid:
        AppendU32(key, s.pid);
        break;
      case LabelSource::kTid:
        AppendU32(key, s.tid);
        break;
      case LabelSource::kCpu:
        AppendU32(key, s.cpu);
        break;
      case LabelSource::kCgroup:
        key->append(reinterpret_cast<const char*>(&s.cgroup_id), sizeof(s.cgroup_id));
        break;
    }
  }
  return true;
}

size_t LabelSet::Walk(std::string_view key, const std::function<bool(uint32_t)>& task) const {
  size_t pos = 0;
  for (const auto& l : labels_) {
    switch (l.source) {
      case LabelSource::kField:
        (void)l.extractor->Render(key, &pos);
        break;
      case LabelSource::kComm:
        pos += 1 + (pos < key.size() ? static_cast<uint8_t>(key[pos]) : 0);
        break;
      case LabelSource::kPid:
      case LabelSource::kTid: {
        uint32_t v = 0;
        if (pos + sizeof(v) <= key.size()) std::memcpy(&v, key.data() + pos, sizeof(v));
        pos += sizeof(v);
        if (task && task(v)) return SIZE_MAX;
        break;
      }
      case LabelSource::kCpu:
        pos += sizeof(uint32_t);
        break;
      case LabelSource::kCgroup:
        pos += sizeof(uint64_t);
        break;
    }
  }
  return std::min(pos, key.size());
}

size_t LabelSet::KeySize(std::string_view key) const { return Walk(key, nullptr); }

bool LabelSet::NamesExitedTask(std::string_view key, const std::function<bool(uint32_t)>& exited) const {
  return Walk(key, exited) == SIZE_MAX;
}

LabelPairs LabelSet::Render(std::string_view key) const {
  LabelPairs out;
  out.reserve(labels_.size());
  size_t pos = 0;
  for (const auto& l : labels_) {
    std::string value;
    switch (l.source) {
      case LabelSource::kField:
        value = l.extractor->Render(key, &pos);
        break;
      case LabelSource::kComm: {
        size_t n = pos < key.size() ? static_cast<uint8_t>(key[pos]) : 0;
        value = std::string(key.substr(std::min(pos + 1, key.size()), n));
        pos += 1 + n;
        break;
      }
      case LabelSource::kPid:
      case LabelSource::kTid:
      case LabelSource::kCpu: {
        uint32_t v = 0;
        if (pos + sizeof(v) <= key.size()) std::memcpy(&v, key.data() + pos, sizeof(v));
        pos += sizeof(v);
        value = std::to_string(v);
        break;
      }
      case LabelSource::kCgroup: {
        uint64_t id = 0;
        if (pos + sizeof(id) <= key.size()) std::memcpy(&id, key.data() + pos, sizeof(id));
        pos += sizeof(id);
        value = l.cgroups ? l.cgroups->PathOf(id) : std::to_string(id);
        break;
      }
    }
    // Any task can put arbitrary bytes in its comm or a string field; one invalid byte in a
    // label value makes Prometheus reject the whole scrape.
    out.emplace_back(l.name, SanitizeUtf8(value));
  }
  return out;
}

}  // namespace tpe
