// The command name (comm) of every task seen, kept from perf's task records so that the comm of
// a task that has exited — or renamed itself — before its samples are read is still right.
//
// Fed, in timestamp order, by PERF_RECORD_COMM (exec, prctl(PR_SET_NAME)), PERF_RECORD_FORK
// (a child starts with its parent's comm) and PERF_RECORD_EXIT (forgotten after a grace
// period of kExitGrace later exits, because the exiting task's own last samples — e.g. its
// final sched_switch — may still follow). Tasks that predate the daemon are looked up once in
// /proc/<tid>/comm (the `fallback`).
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
  };
  Entry& Set(uint32_t tid, std::string_view comm);

  Fallback fallback_;
  std::unordered_map<uint32_t, Entry> map_;
  std::deque<uint32_t> exited_;  // oldest first
};

}  // namespace tpe
