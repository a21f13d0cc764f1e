// HTTP basic auth for the telemetry path (web config basic_auth_users), as the Prometheus
// exporter-toolkit does it:
//  - bcrypt (libxcrypt crypt_r, see CheckPassword) decides; its answer is cached in a bounded
//    AuthCache keyed by SHA-256(user, password, stored hash), so a scraper sending the same
//    credentials every 15 s pays bcrypt once, and no password is kept in memory;
//  - an unknown user is checked against a dummy bcrypt hash of the same cost, so a wrong
//    password and an unknown user take the same time (no user enumeration);
//  - bcrypt is slow by design (~0.1 s at cost 10): Verify() must run off the HTTP event loop
//    (HttpServer runs it on its own auth thread); Lookup() is cheap and never runs bcrypt.
#pragma once

#include <array>
#include <cstddef>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace tpe {

// A bounded map from credential digest to the bcrypt verdict. When full, the least recently
// used failure is evicted first, so a flood of wrong passwords cannot push out the credentials
// that succeeded. Thread-safe (one mutex).
class AuthCache {
 public:
  using Key = std::array<unsigned char, 32>;  // SHA-256

  explicit AuthCache(size_t capacity);

  // SHA-256 over the length-prefixed user, password and stored hash.
  static Key MakeKey(std::string_view user, std::string_view password, std::string_view stored_hash);

  // The cached verdict (refreshing its recency), or nullopt.
  std::optional<bool> Get(const Key& key);
  void Put(const Key& key, bool ok);

  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    Key key;
    bool ok;
  };
  using List = std::list<Entry>;  // most recently used first
  List& ListFor(bool ok) { return ok ? successes_ : failures_; }

  const size_t capacity_;
  mutable std::mutex mu_;
  List successes_, failures_;
  std::map<Key, List::iterator> index_;
};

// The users of a web config and their cache. Thread-safe.
class BasicAuth {
 public:
  // `users`: user → bcrypt hash (validated by LoadWebConfig). Empty = no auth required.
  explicit BasicAuth(std::map<std::string, std::string> users, size_t cache_capacity = 1024);

  bool enabled() const { return !users_.empty(); }

  // The cached verdict for these credentials, or nullopt when Verify must run. Never runs bcrypt.
  std::optional<bool> Lookup(const std::string& user, const std::string& password);

  // Runs bcrypt against the user's hash (an unknown user: against the dummy hash, always
  // false) and caches the verdict. Takes as long as one bcrypt of the configured cost.
  bool Verify(const std::string& user, const std::string& password);

  // "$2b$<cost>$<salt><31 chars>": no password matches it; its cost is the highest cost among
  // the users' hashes, so checking it takes as long as checking a real one.
  const std::string& dummy_hash() const { return dummy_hash_; }

  AuthCache& cache() { return cache_; }

 private:
  const std::string& HashFor(const std::string& user) const;

  const std::map<std::string, std::string> users_;
  std::string dummy_hash_;
  AuthCache cache_;
};

}  // namespace tpe
