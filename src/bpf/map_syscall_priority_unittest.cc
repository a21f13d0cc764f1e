// Map syscalls at SCHED_FIFO 99 where kernel code is preemptible (a task that preempted one had
// its bpf programs skipped on that CPU, uncounted before 6.7): the commands that hold
// bpf_prog_active run raised, the thread's policy comes back after each, and a refused
// raise is said. The scheduler calls go through the seam (no privilege needed); the map commands
// reach the kernel on fd -1 (EBADF, or EPERM without privilege: the order is what is tested).
#include "bpf/map_syscall_priority.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "bpf/map_access.h"

namespace tpe::bpf {
namespace {

class SchedLog {
 public:
  explicit SchedLog(int fail_with = 0) {
    SetSchedulerForTesting([this, fail_with](int policy, int priority) {
      calls.emplace_back(policy, priority);
      return fail_with;
    });
  }
  ~SchedLog() {
    SetSchedulerForTesting(nullptr);
    EnableFifoMapSyscallsForTesting(false);
  }
  std::vector<std::pair<int, int>> calls;
};

const std::pair<int, int> kFifo{SCHED_FIFO, kMapSyscallFifoPriority};
const std::pair<int, int> kOther{SCHED_OTHER, 0};

TEST(MapSyscallPriorityTest, EnableTriesTheRaiseOnceAndPutsThePolicyBack) {
  SchedLog log;
  ASSERT_TRUE(EnableFifoMapSyscalls().ok());
  EXPECT_TRUE(FifoMapSyscallsEnabled());
  EXPECT_EQ(log.calls, (std::vector<std::pair<int, int>>{kFifo, kOther}));
}

TEST(MapSyscallPriorityTest, EnableRefusedSaysWhatItNeeds) {
  SchedLog log(EPERM);
  const Status st = EnableFifoMapSyscalls();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("CAP_SYS_NICE or RLIMIT_RTPRIO >= 99"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("RestrictRealtime=yes"), std::string::npos) << st.message();
  EXPECT_FALSE(FifoMapSyscallsEnabled());
  EXPECT_EQ(log.calls, (std::vector<std::pair<int, int>>{kFifo}));
}

// Every command that holds bpf_prog_active runs between a raise and the restore; get_next_key
// (rcu only) runs as the thread is.
TEST(MapSyscallPriorityTest, KernelMapCommandsRunRaised) {
  SchedLog log;
  EnableFifoMapSyscallsForTesting(true);
  KernelMap map(-1);
  uint8_t key[8] = {}, value[64] = {}, batch[8] = {};
  uint32_t count = 1;
  const std::vector<std::pair<int, int>> raised{kFifo, kOther};
  auto expect_raised = [&](const char* what, int r) {
    EXPECT_LT(r, 0) << what;  // fd -1
    EXPECT_EQ(log.calls, raised) << what;
    log.calls.clear();
  };
  expect_raised("lookup", map.Lookup(key, value));
  expect_raised("update", map.Update(key, value, 0));
  expect_raised("delete", map.Delete(key));
  expect_raised("lookup_and_delete", map.LookupAndDelete(key, value));
  expect_raised("lookup_batch", map.LookupBatch(nullptr, batch, key, value, &count));
  count = 1;
  expect_raised("lookup_and_delete_batch", map.LookupAndDeleteBatch(nullptr, batch, key, value, &count));
  EXPECT_LT(map.GetNextKey(nullptr, key), 0);
  EXPECT_TRUE(log.calls.empty());
}

TEST(MapSyscallPriorityTest, NotEnabledNoSchedulerCall) {
  SchedLog log;
  KernelMap map(-1);
  uint8_t key[8] = {}, value[64] = {};
  EXPECT_LT(map.Lookup(key, value), 0);
  EXPECT_TRUE(log.calls.empty());
}

TEST(MapSyscallPriorityTest, RefusedRaiseIsCountedAndNotUndone) {
  SchedLog log(EPERM);
  EnableFifoMapSyscallsForTesting(true);
  const uint64_t before = FifoRaiseFailures();
  { FifoMapSyscall fifo; }
  EXPECT_EQ(FifoRaiseFailures(), before + 1);
  EXPECT_EQ(log.calls, (std::vector<std::pair<int, int>>{kFifo}));
}

}  // namespace
}  // namespace tpe::bpf
