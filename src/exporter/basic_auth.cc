#include "exporter/basic_auth.h"

#include <crypt.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "exporter/web_config.h"

namespace tpe {

AuthCache::AuthCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

AuthCache::Key AuthCache::MakeKey(std::string_view user, std::string_view password, std::string_view stored_hash) {
  std::string buf;
  buf.reserve(user.size() + password.size() + stored_hash.size() + 24);
  for (std::string_view part : {user, password, stored_hash}) {
    const uint64_t n = part.size();
    buf.append(reinterpret_cast<const char*>(&n), sizeof(n));
    buf.append(part);
  }
  Key key{};
  // SHA-256 cannot fail for in-memory input; on a (theoretical) error the key stays zero, and
  // zero keys are never cached (see Put).
  if (gnutls_hash_fast(GNUTLS_DIG_SHA256, buf.data(), buf.size(), key.data()) != 0) key.fill(0);
  gnutls_memset(buf.data(), 0, buf.size());
  return key;
}

std::optional<bool> AuthCache::Get(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  const bool ok = it->second->ok;
  List& list = ListFor(ok);
  list.splice(list.begin(), list, it->second);
  return ok;
}

void AuthCache::Put(const Key& key, bool ok) {
  if (key == Key{}) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    ListFor(it->second->ok).erase(it->second);
    index_.erase(it);
  }
  if (index_.size() >= capacity_) {
    List& victim = failures_.empty() ? successes_ : failures_;
    index_.erase(victim.back().key);
    victim.pop_back();
  }
  List& list = ListFor(ok);
  list.push_front(Entry{key, ok});
  index_[key] = list.begin();
}

size_t AuthCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

namespace {

// The cost field of "$2b$10$...", or -1.
int BcryptCost(const std::string& hash) {
  if (hash.size() < 7 || hash[0] != '$' || hash[3] != '$' || hash[6] != '$') return -1;
  if (hash[4] < '0' || hash[4] > '9' || hash[5] < '0' || hash[5] > '9') return -1;
  return (hash[4] - '0') * 10 + (hash[5] - '0');
}

std::string MakeDummyHash(const std::map<std::string, std::string>& users) {
  int cost = -1;
  for (const auto& [user, hash] : users) cost = std::max(cost, BcryptCost(hash));
  if (cost < 4 || cost > 31) cost = 10;
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  // A random salt (libxcrypt reads the kernel's random source when given no bytes).
  if (crypt_gensalt_rn("$2b$", static_cast<unsigned long>(cost), nullptr, 0, setting,  // NOLINT(google-runtime-int)
                       sizeof(setting)) == nullptr) {
    std::snprintf(setting, sizeof(setting), "$2b$%02d$%s", cost, "abcdefghijklmnopqrstuu");
  }
  // 31 '.' encode an all-zero digest, which bcrypt yields with probability 2^-184: crypt_r runs
  // the full bcrypt with this setting, and the comparison in CheckPassword fails.
  return std::string(setting) + std::string(31, '.');
}

}  // namespace

BasicAuth::BasicAuth(std::map<std::string, std::string> users, size_t cache_capacity)
    : users_(std::move(users)), dummy_hash_(MakeDummyHash(users_)), cache_(cache_capacity) {}

const std::string& BasicAuth::HashFor(const std::string& user) const {
  auto it = users_.find(user);
  return it == users_.end() ? dummy_hash_ : it->second;
}

std::optional<bool> BasicAuth::Lookup(const std::string& user, const std::string& password) {
  return cache_.Get(AuthCache::MakeKey(user, password, HashFor(user)));
}

bool BasicAuth::Verify(const std::string& user, const std::string& password) {
  const bool known = users_.count(user) != 0;
  const std::string& hash = HashFor(user);
  // Both branches run one bcrypt of the same cost; only a known user can succeed.
  const bool ok = CheckPassword(hash, password) && known;
  cache_.Put(AuthCache::MakeKey(user, password, hash), ok);
  return ok;
}

}  // namespace tpe
