// Labels for unit tests of the label and program code: a LabelSpec over a field of a parsed
// format, or over a task source, with a test failure (not a crash) when the field is missing.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "collectors/label_set.h"
#include "decode/field_extractor.h"
#include "format/event_format.h"

namespace tpe::testing {

// A label named `field` over that field of `f` (LabelDecode::kAuto).
inline LabelSpec FieldLabel(const EventFormat& f, const std::string& field) {
  LabelSpec l;
  l.name = field;
  const FieldFormat* ff = f.FindField(field);
  EXPECT_NE(ff, nullptr) << field;
  if (ff == nullptr) return l;
  auto e = FieldExtractor::Compile(*ff, LabelDecode::kAuto, nullptr);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (e.ok()) l.extractor = std::move(*e);
  return l;
}

// A label `name` from a task source (comm, pid, tid, cpu, cgroup).
inline LabelSpec SourceLabel(const std::string& name, LabelSource src) {
  LabelSpec l;
  l.name = name;
  l.source = src;
  return l;
}

}  // namespace tpe::testing
