#include "symbols/debuginfod.h"

#include <elfutils/debuginfod.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/log.h"

namespace tpe::symbols {
namespace {

// libdebuginfod reads the environment at each query; the queries of all clients are serialized
// here so that one client's settings are the environment while it queries.
std::mutex env_mu;

void SetEnv(const char* name, const std::string& value) {
  const char* now = std::getenv(name);
  if (now == nullptr || value != now) ::setenv(name, value.c_str(), 1);
}

bool ValidBuildId(const std::string& id) {
  if (id.size() < 2 || id.size() > 128 || id.size() % 2 != 0) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

struct Progress {
  std::chrono::steady_clock::time_point deadline;
  const bool* stopping;
  std::mutex* mu;
  bool cancelled = false;  // by this callback: the fetch failed, whatever libdebuginfod returns
};

int OnProgress(debuginfod_client* client, long /*a*/, long /*b*/) {
  auto* p = static_cast<Progress*>(debuginfod_get_user_data(client));
  if (std::chrono::steady_clock::now() > p->deadline) {
    p->cancelled = true;
    return 1;
  }
  std::lock_guard<std::mutex> lock(*p->mu);
  p->cancelled = *p->stopping;
  return p->cancelled ? 1 : 0;
}

}  // namespace

DebuginfodClient::DebuginfodClient(Options options) : options_(std::move(options)) {
  if (enabled()) worker_ = std::thread([this] { Run(); });
}

DebuginfodClient::~DebuginfodClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

DebuginfodClient::Answer DebuginfodClient::Find(const std::string& build_id) {
  if (!enabled() || !ValidBuildId(build_id)) return Answer{State::kMissing, "", "no server or no build id"};
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = answers_.try_emplace(build_id, Answer{State::kPending, "", ""});
  if (inserted) {
    if (queue_.size() >= options_.max_queue) {
      it->second = Answer{State::kFailed, "", "more than " + std::to_string(options_.max_queue) + " fetches queued"};
      answers_.erase(it);  // asked again once the queue drains
      return Answer{State::kFailed, "", "queue full"};
    }
    queue_.push_back(build_id);
    cv_.notify_all();
  }
  return it->second;
}

void DebuginfodClient::WaitFor(std::span<const std::string> build_ids, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] {
    for (const std::string& id : build_ids) {
      auto it = answers_.find(id);
      if (it != answers_.end() && it->second.state == State::kPending) return false;
    }
    return true;
  });
}

void DebuginfodClient::Reject(const std::string& build_id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  answers_[build_id] = Answer{State::kFailed, "", why};
}

void DebuginfodClient::Run() {
  std::error_code ignored;  // a cache that cannot be made fails each fetch, counted
  std::filesystem::create_directories(options_.cache_dir, ignored);
  while (true) {
    std::string id;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
    }
    Answer answer;
    {
      std::lock_guard<std::mutex> env_lock(env_mu);
      SetEnv(DEBUGINFOD_URLS_ENV_VAR, options_.urls);
      SetEnv(DEBUGINFOD_CACHE_PATH_ENV_VAR, options_.cache_dir);
      SetEnv(DEBUGINFOD_TIMEOUT_ENV_VAR, std::to_string(options_.timeout_seconds));
      SetEnv(DEBUGINFOD_MAXTIME_ENV_VAR, std::to_string(options_.max_seconds));
      SetEnv(DEBUGINFOD_PROGRESS_ENV_VAR, "0");
      Progress progress{std::chrono::steady_clock::now() + std::chrono::seconds(options_.max_seconds), &stopping_,
                        &mu_};
      debuginfod_client* client = debuginfod_begin();
      if (client == nullptr) {
        answer = Answer{State::kFailed, "", "debuginfod_begin failed"};
      } else {
        debuginfod_set_user_data(client, &progress);
        debuginfod_set_progressfn(client, OnProgress);
        char* path = nullptr;
        const int fd = debuginfod_find_debuginfo(client, reinterpret_cast<const unsigned char*>(id.data()),
                                                 0 /* hex text */, &path);
        if (progress.cancelled) {
          if (fd >= 0) ::close(fd);
          answer = Answer{State::kFailed, "", "no answer within " + std::to_string(options_.max_seconds) + " s"};
        } else if (fd >= 0) {
          ::close(fd);
          answer = Answer{State::kFound, path != nullptr ? path : "", ""};
        } else {
          answer = Answer{fd == -ENOENT ? State::kMissing : State::kFailed, "", std::strerror(-fd)};
        }
        std::free(path);
        debuginfod_end(client);
      }
    }
    if (answer.state == State::kFound && answer.path.empty()) answer = Answer{State::kFailed, "", "no path"};
    if (answer.state == State::kFailed) {
      TPE_LOG_DEBUG("debuginfod: build id {}: {}", id, answer.error);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      answers_[id] = answer;
    }
    cv_.notify_all();
  }
}

}  // namespace tpe::symbols
