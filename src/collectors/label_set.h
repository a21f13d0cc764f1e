// The labels of one metric: each from a tracepoint field (through a compiled FieldExtractor) or
// from a sample source (comm, pid, tid, cpu, cgroup). BuildKey packs a sample's label values into a
// binary key without allocating (the key string's capacity is reused); Render turns a key back
// into label name/value pairs at scrape time.
//
// Thread-safety: immutable after construction; BuildKey's CommTable belongs to the caller's
// thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collectors/comm_table.h"
#include "collectors/label_source.h"
#include "collectors/snapshot.h"
#include "common/cgroup_resolver.h"
#include "decode/field_extractor.h"
#include "decode/sample.h"

namespace tpe {

// The source named `s` in kLabelSourceNames (collectors/label_source.h: "comm", "pid", ...);
// nullopt otherwise.
std::optional<LabelSource> ParseLabelSource(std::string_view s);

struct LabelSpec {
  std::string name;
  LabelSource source = LabelSource::kField;
  std::optional<FieldExtractor> extractor;  // set iff source == kField
  // source == kCgroup: renders ids as paths (shared by the plan's metrics); null = numbers.
  std::shared_ptr<CgroupResolver> cgroups;
};

class LabelSet {
 public:
  LabelSet() = default;
  explicit LabelSet(std::vector<LabelSpec> labels);

  // Clears *key and appends every label's segment. False when a field lies outside the raw
  // payload (the caller counts a decode error and drops the sample from this metric).
  bool BuildKey(const Sample& s, CommTable* comms, std::string* key) const;

  // Label name/value pairs of `key`; values are valid UTF-8 (ill-formed bytes as U+FFFD).
  LabelPairs Render(std::string_view key) const;
  // True when a pid or tid label (source "pid"/"tid") of `key` names a task that `exited`.
  bool NamesExitedTask(std::string_view key, const std::function<bool(uint32_t)>& exited) const;
  // How many bytes at the front of `key` this set's segments occupy (keys may be concatenated).
  size_t KeySize(std::string_view key) const;

  bool empty() const { return labels_.empty(); }
  bool needs_comm() const { return needs_comm_; }
  bool needs_cgroup() const { return needs_cgroup_; }  // some label has source kCgroup
  // Some label names a task (source "pid" or "tid"): its series go when the task exits.
  bool names_tasks() const {
    for (const LabelSpec& l : labels_) {
      if (l.source == LabelSource::kPid || l.source == LabelSource::kTid) return true;
    }
    return false;
  }
  const std::vector<LabelSpec>& labels() const { return labels_; }

 private:
  // Steps over the key's segments; returns the bytes they occupy, or SIZE_MAX as soon as
  // `task` (may be empty) says yes to a pid/tid segment's value.
  size_t Walk(std::string_view key, const std::function<bool(uint32_t)>& task) const;

  std::vector<LabelSpec> labels_;
  bool needs_comm_ = false;
  bool needs_cgroup_ = false;
};

}  // namespace tpe
