// Test-only helpers shared by the bpf program tests (programs_unittest.cc,
// latency_programs_unittest.cc): the Interpreter's maps of one metric, its stats, records of
// sched_switch, and the perf engine's view of a hit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bpf/interpreter.h"
#include "bpf/programs.h"
#include "decode/sample.h"
#include "format/event_format.h"
#include "testing/formats.h"

namespace tpe::bpf {

inline int NoProc(uint32_t, char*, size_t) { return -1; }

inline EventFormat Event(const std::string& sys, const std::string& ev) { return testing::CapturedFormat(sys, ev); }

// Map fds the programs refer to (any numbers will do: they are immediates).
constexpr int kStatsFd = 11, kValuesFd = 12, kZeroFd = 13, kStartsFd = 14;
inline MapFds Fds() {
  MapFds m;
  m.stats = kStatsFd;
  m.values = kValuesFd;
  m.zero = kZeroFd;
  m.starts = kStartsFd;
  return m;
}

// An Interpreter with the maps of one metric: `value_size` bytes per series, `key_size` per key;
// key_size 0 (no labels: KeyLayout::size) gives the 1-entry per-CPU array of a key-less metric.
inline void AddMaps(Interpreter* in, uint32_t key_size, uint32_t value_size, uint32_t max_series) {
  FakeMap stats;
  stats.type = BPF_MAP_TYPE_PERCPU_ARRAY;
  stats.key_size = 4;
  stats.value_size = 8;
  stats.max_entries = kStatCount;
  in->AddMap(kStatsFd, stats);
  FakeMap values;
  values.type = key_size == 0 ? BPF_MAP_TYPE_PERCPU_ARRAY : BPF_MAP_TYPE_PERCPU_HASH;
  values.key_size = key_size == 0 ? 4 : key_size;
  values.value_size = value_size;
  values.max_entries = key_size == 0 ? 1 : max_series;
  in->AddMap(kValuesFd, values);
  FakeMap zero;
  zero.type = BPF_MAP_TYPE_ARRAY;
  zero.key_size = 4;
  zero.value_size = value_size;
  zero.max_entries = 1;
  in->AddMap(kZeroFd, zero);
}

inline uint64_t StatOf(Interpreter* in, Stat slot) {
  FakeMap* m = in->map(kStatsFd);
  if (m == nullptr) return ~uint64_t{0};
  std::string key(4, '\0');
  std::memcpy(key.data(), &slot, 4);
  auto it = m->entries.find(key);
  if (it == m->entries.end() || it->second.size() != 8) return ~uint64_t{0};
  uint64_t v = 0;
  std::memcpy(&v, it->second.data(), 8);
  return v;
}

inline std::vector<uint64_t> U64s(const std::string& bytes) {
  std::vector<uint64_t> out(bytes.size() / 8);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 8);
  return out;
}

// Runs `prog` on `record` with its first 8 bytes clobbered as perf_trace_run_bpf_submit does.
inline void RunProg(Interpreter* in, const std::vector<bpf_insn>& prog, std::string record, const FakeTask& t) {
  std::memset(record.data(), 0xa5, 8);
  auto r = in->Run(prog, record, t);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << Disassemble(prog);
  EXPECT_EQ(*r, 1u);
}

inline Bytes AsBytes(const std::string& s) { return Bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

// A sched_switch record (64 bytes; common_pid = tid).
inline std::string Switch(const std::string& prev_comm, int32_t prev_pid, int32_t prev_prio, int64_t prev_state,
                          const std::string& next_comm, int32_t next_pid, int32_t tid = 0) {
  std::string r(64, '\0');
  std::memcpy(r.data() + 4, &tid, 4);
  std::memcpy(r.data() + 8, prev_comm.data(), std::min<size_t>(prev_comm.size(), 16));
  std::memcpy(r.data() + 24, &prev_pid, 4);
  std::memcpy(r.data() + 28, &prev_prio, 4);
  std::memcpy(r.data() + 32, &prev_state, 8);
  std::memcpy(r.data() + 40, next_comm.data(), std::min<size_t>(next_comm.size(), 16));
  std::memcpy(r.data() + 56, &next_pid, 4);
  return r;
}

// The perf engine's view of a hit: the record and the task.
inline Sample SampleOf(const std::string& record, const FakeTask& t) {
  Sample s;
  s.pid = t.pid;
  s.tid = t.tid;
  s.cpu = t.cpu;
  s.cgroup_id = t.cgroup_id;
  s.time_ns = t.ktime_ns;
  s.raw = AsBytes(record);
  return s;
}

}  // namespace tpe::bpf
