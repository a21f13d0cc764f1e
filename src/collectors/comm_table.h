// The command name (comm) of every task seen, kept from perf's task records so that the comm of
// a task that has exited — or renamed itself — before its samples are read is still right.
//
// Fed, in timestamp order, by PERF_RECORD_COMM (exec, prctl(PR_SET_NAME)), PERF_RECORD_FORK
// (a child starts with its parent's comm) and PERF_RECORD_EXIT (forgotten after a grace
// period of kExitGrace later exits, because the exiting task's own last samples — e.g. its
// final sched_switch — may still follow). Tasks that predate the daemon are looked up once in
// /proc/<tid>/comm (the `fallback`).
//
// A ring that overflowed (PERF_RECORD_LOST) may have lost COMM/FORK/EXIT records of any task:
// after OnLost(), an entry set before the loss is checked once against /proc/<tid>/comm (the
// fallback) at its next lookup; a task gone from /proc by then is named "[unknown]" (its name
// may have changed in the lost records: a parent's comm kept after a lost exec would name the
// wrong program). An entry whose EXIT record arrived before the loss keeps its name.
//
// Thread-safety: single-threaded (the reader thread owns it).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string_view>
#include <unordered_map>

namespace tpe {

inline constexpr size_t kCommLen = 16;  // TASK_COMM_LEN, including the NUL

class CommTable {
 public:
  // Writes the comm of `tid` (no NUL needed) into `out` and returns its length, or -1.
  using Fallback = std::function<int(uint32_t tid, char* out, size_t cap)>;
  static int ReadProcComm(uint32_t tid, char* out, size_t cap);
  static constexpr size_t kExitGrace = 4096;

  explicit CommTable(Fallback fallback = ReadProcComm) : fallback_(std::move(fallback)) {}

  void OnComm(uint32_t tid, std::string_view comm);
  void OnFork(uint32_t parent_tid, uint32_t child_tid);
  void OnExit(uint32_t tid);
  // A ring lost records (PERF_RECORD_LOST): every entry set before now is in doubt.
  void OnLost() { ++loss_epoch_; }

  // The comm of `tid`: from the records, else the fallback (read once per tid), else
  // "[unknown]" (also remembered). The view stays valid until the next call that changes the
  // table.
  std::string_view Lookup(uint32_t tid);

  // True when `tid`'s PERF_RECORD_EXIT arrived (or it was gone from /proc when first looked
  // up) and no task took the tid since; remembered for the last kExitGrace exits. A task that
  // predates the daemon and was never looked up is looked up at its exit, so this holds for it
  // too.
  bool HasExited(uint32_t tid) const {
    auto it = map_.find(tid);
    return it != map_.end() && it->second.exited;
  }

  size_t size() const { return map_.size(); }

 private:
  struct Entry {
    char comm[kCommLen] = {};
    uint8_t len = 0;
    bool exited = false;
    uint32_t epoch = 0;  // loss_epoch_ when set
  };
  Entry& Set(uint32_t tid, std::string_view comm);

  Fallback fallback_;
  std::unordered_map<uint32_t, Entry> map_;
  std::deque<uint32_t> exited_;  // oldest first
  uint32_t loss_epoch_ = 0;      // OnLost() calls
};

}  // namespace tpe
