// Test-only helpers shared by the bpf program tests (programs_unittest.cc,
// latency_programs_unittest.cc): the Interpreter's maps of one metric, its stats, records of
// sched_switch, and the perf engine's view of a hit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
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

// The sum the wide sums at word `at` of a map value hold (programs.h "Wide sums"): that of the
// values >= 0, less (`is_signed`) that of the negative ones' magnitudes after it.
inline int128 WideAt(const std::vector<uint64_t>& w, size_t at, bool is_signed = false) {
  uint128 pos = 0, neg = 0;
  EXPECT_LE(at + WideSumWords(is_signed), w.size());
  if (at + WideSumWords(is_signed) > w.size()) return 0;
  EXPECT_TRUE(DecodeWide(w[at + kWideCommit], w[at + kWideLo], w[at + kWideAnnounce], &pos));
  if (is_signed) {
    const size_t n = at + kWideWords;
    EXPECT_TRUE(DecodeWide(w[n + kWideCommit], w[n + kWideLo], w[n + kWideAnnounce], &neg));
  }
  return static_cast<int128>(pos) - static_cast<int128>(neg);
}

// Records the words of one wide sum (at word `at` of values map entries) after every store a
// program makes into them, and checks what a reader on another CPU copying them meanwhile could
// read (its loads of commit, lo and announce at stores i <= j <= k): either DecodeWide refuses
// (it reads again) or it reads the sum of state j — never a value the sum did not hold, so never
// one below an earlier read. Install before running; Check after.
class WideStoreTrace {
 public:
  WideStoreTrace(Interpreter* in, size_t at) : in_(in), at_(at) {
    in->set_after_value_store([this](int fd, const std::string& key) {
      if (fd != kValuesFd) return;
      std::vector<uint64_t> w = U64s(in_->map(kValuesFd)->entries.at(key));
      if (w.size() < at_ + kWideWords) return;
      states_[key].push_back({w[at_ + kWideCommit], w[at_ + kWideLo], w[at_ + kWideAnnounce]});
    });
  }
  ~WideStoreTrace() { in_->set_after_value_store(nullptr); }
  // Returns the number of reads that decoded (retries are not counted).
  size_t Check() const {
    size_t reads = 0;
    for (const auto& [key, states] : states_) {
      std::vector<uint128> sums(states.size());
      for (size_t j = 0; j < states.size(); ++j) {
        EXPECT_TRUE(DecodeWide(states[j][0], states[j][1], states[j][2], &sums[j])) << "state " << j;
        if (j > 0) {
          EXPECT_TRUE(sums[j] >= sums[j - 1]) << "state " << j << ": the sum went down";
        }
      }
      for (size_t i = 0; i < states.size(); ++i) {
        for (size_t j = i; j < states.size(); ++j) {
          for (size_t k = j; k < states.size(); ++k) {
            uint128 got;
            if (!DecodeWide(states[i][0], states[j][1], states[k][2], &got)) continue;
            ++reads;
            if (got != sums[j]) {
              ADD_FAILURE() << "loads at stores " << i << ", " << j << ", " << k << " read a sum never held";
              return reads;
            }
          }
        }
      }
    }
    return reads;
  }
  size_t stores() const {
    size_t n = 0;
    for (const auto& [key, states] : states_) n += states.size();
    return n;
  }

 private:
  Interpreter* in_;
  size_t at_;
  std::map<std::string, std::vector<std::array<uint64_t, 3>>> states_;
};

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
