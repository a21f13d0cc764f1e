// tests/triggers/stack_paths for the profile tests: forked stopped, exec'd on Go(), holding its
// process (and so its mappings, for the symbolizer) until Release().
#pragma once

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tpe::testing {

inline constexpr int kPathA = 3000, kPathB = 1000;

// The trigger, started stopped: it execs once `Go` is called, runs, says "done" and holds until
// `Release`.
class Trigger {
 public:
  // stack_paths kPathA kPathB tpe_stacks hold, or with `args` stack_paths ARGS... hold; on `cpu`
  // alone when it is >= 0.
  // `early`: exec at once, not at Go() (the process predates what is started after it; Go()
  // then sends it a byte on stdin: `stack_paths forks` waits for it).
  // `program`: another trigger taking "ARGS... hold" alike (e.g. tests/triggers/no_frame_pointers).
  explicit Trigger(std::vector<std::string> args = {}, int cpu = -1, bool early = false,
                   std::string program = TPE_STACK_PATHS)
      : early_(early) {
    if (args.empty()) args = {std::to_string(kPathA), std::to_string(kPathB), "tpe_stacks"};
    args.insert(args.begin(), program);
    args.push_back("hold");
    if (pipe(go_) != 0 || pipe(out_) != 0 || pipe(in_) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      char c;
      close(go_[1]);
      if (!early && read(go_[0], &c, 1) != 1) _exit(3);
      dup2(out_[1], 1);
      dup2(in_[0], 0);
      close(in_[1]);
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) _exit(5);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(4);
    }
    close(go_[0]);
    close(out_[1]);
    close(in_[0]);
  }
  ~Trigger() { Exit(); }
  pid_t pid() const { return pid_; }
  // Starts the trigger and waits for its "done N" line: every call made.
  void Go() {
    ASSERT_EQ(write(early_ ? in_[1] : go_[1], "g", 1), 1);
    std::string line;
    char c;
    while (read(out_[0], &c, 1) == 1 && c != '\n') line += c;
    ASSERT_EQ(line.rfind("done", 0), 0u) << "the trigger said " << line;
    said_ = std::strtoll(line.c_str() + 4, nullptr, 10);
  }
  // The number after "done": for `sleep N`, the wall-clock ns the N sleeps took; 0 otherwise.
  long long said() const { return said_; }
  void Release() {
    if (in_[1] >= 0) close(in_[1]), in_[1] = -1;
  }
  // Release, then reap the process: it has exited (and its mappings are gone from /proc).
  void Exit() {
    Release();
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  int go_[2] = {-1, -1}, out_[2] = {-1, -1}, in_[2] = {-1, -1};
  pid_t pid_ = -1;
  long long said_ = 0;
  bool early_ = false;
};

}  // namespace tpe::testing
