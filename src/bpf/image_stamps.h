// ImageStamps: when each process's current image began, for the bpf engine's profiles, so that a
// stack counted in the kernel is named with the mappings its process had then (an exec, or a pid
// reused by another process, changes what the same addresses are).
//
// Two tracepoint programs keep a BPF_MAP_TYPE_LRU_HASH of thread-group id (u32) -> the time
// (u64, bpf_ktime_get_ns: CLOCK_MONOTONIC, the clock of the perf records) the process's image
// began: sched:sched_process_exec (the exec'd process: bpf_get_current_pid_tgid() >> 32) and
// sched:sched_process_fork (child_pid; a new thread gets an entry of its own too, never looked up
// as a process unless its id becomes one, and then by a later fork). A profile's program looks
// its tgid up and puts the time in its key (programs.h StackKey::image_ns; 0 for a process that
// predates the programs, or one whose entry the LRU map let go). The kernel traces both after the
// perf records that start the image (PERF_RECORD_COMM with COMM_EXEC, PERF_RECORD_FORK: fs/exec.c
// begin_new_exec before exec_binprm's trace_sched_process_exec; kernel/fork.c copy_process's
// perf_event_fork before kernel_clone's trace_sched_process_fork), so the image is the last one
// that began at or before the stamp (process/process_images.h NormalizeAt).
//
// One per daemon, made at the first need and kept for the process's life: every profile program
// that loaded the map's fd keeps reading it, so the stamping programs must run as long as any of
// them may (they cost a map update per fork and exec).
//
// Thread-safety: Get may be called from any thread (the first call creates; later calls return
// the same object); the object is immutable.
#pragma once

#include <cstdint>

#include "bpf/loader.h"
#include "common/status.h"

namespace tpe::bpf {

class ImageStamps {
 public:
  // Entries of the map: processes (and threads) alive at once that it can stamp.
  static constexpr uint32_t kMaxEntries = 65536;

  // The stamps, created and attached at the first call: `exec_id` and `fork_id` are the tracepoint
  // ids of sched:sched_process_exec and sched:sched_process_fork, `child_pid_offset` the byte
  // offset of sched_process_fork's `child_pid` (a 4-byte pid_t) in its record. Errors: those of
  // CreateMap, LoadTracepointProgram and AttachTracepoint (PermissionDenied without CAP_BPF or
  // CAP_PERFMON; Unavailable when a tracepoint runs 64 programs already); a failed first call is
  // tried again by the next.
  static StatusOr<const ImageStamps*> Get(uint64_t exec_id, uint64_t fork_id, uint32_t child_pid_offset);

  int map_fd() const { return map_.get(); }
  // Bytes of kernel memory the map holds (preallocated).
  uint64_t map_bytes() const;

  // The programs (for tests: they run in the interpreter). `map_fd`: the stamps map.
  static std::vector<bpf_insn> ExecProgram(int map_fd);
  static std::vector<bpf_insn> ForkProgram(int map_fd, uint32_t child_pid_offset);

 private:
  ImageStamps() = default;
  ScopedFd map_, exec_prog_, fork_prog_;
  TracepointAttachment exec_, fork_;
};

}  // namespace tpe::bpf
