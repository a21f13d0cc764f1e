// Shared by the kernel-tier tests: run a config through the real pipeline around an action.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/pipeline.h"
#include "daemon/plan.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe::testing {

// Parses `config` (JSON text), opens and starts the pipeline on the live kernel, runs
// `during`, stops (draining the rings) and returns the snapshot.
inline std::vector<MetricSnapshot> RunPipeline(const std::string& config, const std::function<void()>& during) {
  auto tracefs = Tracefs::Discover("auto");
  EXPECT_TRUE(tracefs.ok()) << tracefs.status().ToString();
  if (!tracefs.ok()) return {};
  auto cfg = ParseConfig(config, "kernel_test.json");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return {};
  auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), /*check_filters=*/true);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  Pipeline pipeline(&*tracefs);
  Status st = pipeline.Open(std::move(*plan));
  EXPECT_TRUE(st.ok()) << st.ToString();
  st = pipeline.Start();
  EXPECT_TRUE(st.ok()) << st.ToString();
  during();
  pipeline.Stop();
  return pipeline.Snapshot();
}

inline const MetricSnapshot* FindMetric(const std::vector<MetricSnapshot>& all, const std::string& name) {
  for (const auto& m : all) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// The first series of `metric` carrying every label of `labels`, or null.
inline const SeriesSnapshot* FindSeries(const std::vector<MetricSnapshot>& all, const std::string& metric,
                                        const LabelPairs& labels = {}) {
  const MetricSnapshot* m = FindMetric(all, metric);
  if (m == nullptr) return nullptr;
  for (const auto& s : m->series) {
    bool match = true;
    for (const auto& l : labels) {
      bool found = false;
      for (const auto& sl : s.labels) found |= sl == l;
      match &= found;
    }
    if (match) return &s;
  }
  return nullptr;
}

}  // namespace tpe::testing
