// Debug files fetched from debuginfod servers (elfutils' libdebuginfod, the client every
// elfutils tool, gdb and perf use) by build id, on a worker thread, so that a render never waits
// on the network: a render asks (Find), and what is not there yet is fetched meanwhile and named
// by a later render. A render may wait for what it asked a bounded time (WaitFor).
//
// Servers: Options::urls, with the meaning of DEBUGINFOD_URLS (space-separated base URLs; ""
// none: the client is off). libdebuginfod reads its settings from the environment at each query
// (debuginfod-client(3): DEBUGINFOD_URLS, DEBUGINFOD_CACHE_PATH, DEBUGINFOD_TIMEOUT,
// DEBUGINFOD_MAXTIME), so the worker sets those variables to Options' values before each query
// (only when they differ: overwriting a variable that exists does not move glibc's environment
// array). Files are kept on disk in Options::cache_dir (libdebuginfod's cache: later queries of a
// build id, and misses for 10 minutes, are answered from it) and their paths kept in memory.
//
// Every fetch is bounded: DEBUGINFOD_TIMEOUT (no progress for that long), DEBUGINFOD_MAXTIME, and
// a progress callback that cancels a fetch past Options::max_seconds or when the client is
// destroyed, whatever the server does (a server that accepts and never answers, or that trickles).
// A file the server answers is not trusted: the caller checks that it is an ELF file with the
// build id asked for.
//
// Thread-safety: every method from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>

namespace tpe::symbols {

class DebuginfodClient {
 public:
  struct Options {
    std::string urls;         // DEBUGINFOD_URLS' meaning; "" disables the client
    std::string cache_dir;    // DEBUGINFOD_CACHE_PATH: where fetched files are kept (created)
    int timeout_seconds = 5;  // DEBUGINFOD_TIMEOUT: a fetch without progress for this long fails
    int max_seconds = 30;     // a fetch lasting longer is cancelled (DEBUGINFOD_MAXTIME and the callback)
    size_t max_queue = 1024;  // build ids waiting; more are refused (kFailed) until the queue drains
  };
  explicit DebuginfodClient(Options options);
  ~DebuginfodClient();  // cancels the fetch in progress and joins the worker
  DebuginfodClient(const DebuginfodClient&) = delete;
  DebuginfodClient& operator=(const DebuginfodClient&) = delete;

  bool enabled() const { return !options_.urls.empty(); }
  const Options& options() const { return options_; }

  enum class State { kPending, kFound, kMissing, kFailed };
  struct Answer {
    State state = State::kMissing;
    std::string path;   // kFound: the file in the cache
    std::string error;  // kFailed / kMissing: why (libdebuginfod's errno, as strerror)
  };
  // What is known of `build_id` (lowercase hex, an even number of 2..128 digits; other input is
  // kMissing). Never blocks on the network: an id not asked before is queued (kPending). Off
  // (urls ""): kMissing.
  Answer Find(const std::string& build_id);
  // Waits until no id of `build_ids` is pending, or until `deadline`.
  void WaitFor(std::span<const std::string> build_ids, std::chrono::steady_clock::time_point deadline);
  // Forgets a kFound answer whose file turned out not to be the one asked for (the next Find
  // asks again... after the libdebuginfod cache lets go of it): kept as kFailed with `why`.
  void Reject(const std::string& build_id, const std::string& why);

 private:
  void Run();
  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;             // work queued, an answer known, or stopping
  std::map<std::string, Answer> answers_;  // guarded by mu_
  std::deque<std::string> queue_;          // guarded by mu_
  bool stopping_ = false;                  // guarded by mu_
  std::thread worker_;                     // only when enabled()
};

}  // namespace tpe::symbols
