#include "exporter/basic_auth.h"

#include <crypt.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>

#include "exporter/web_config.h"

namespace tpe {
namespace {

// bcrypt (cost 4) of "secret" with salt "abcdefghijklmnopqrstuu".
const char* kHash = "$2b$04$abcdefghijklmnopqrstuu2r9OfJnfCsdneAXAGHnS4UpFFP8WIrW";

using Users = std::map<std::string, std::string>;

AuthCache::Key K(int i) { return AuthCache::MakeKey("user" + std::to_string(i), "pw", "hash"); }

TEST(AuthCacheTest, KeysSeparateTheirParts) {
  EXPECT_EQ(AuthCache::MakeKey("a", "bc", "h"), AuthCache::MakeKey("a", "bc", "h"));
  EXPECT_NE(AuthCache::MakeKey("a", "bc", "h"), AuthCache::MakeKey("ab", "c", "h"));  // length-prefixed
  EXPECT_NE(AuthCache::MakeKey("a", "bc", "h"), AuthCache::MakeKey("a", "bc", "h2"));
  EXPECT_NE(AuthCache::MakeKey("a", "bc", "h"), AuthCache::Key{});
}

TEST(AuthCacheTest, SameInputIsCached) {
  AuthCache cache(4);
  EXPECT_FALSE(cache.Get(K(1)).has_value());
  cache.Put(K(1), true);
  cache.Put(K(2), false);
  EXPECT_EQ(cache.Get(K(1)), std::optional<bool>(true));
  EXPECT_EQ(cache.Get(K(2)), std::optional<bool>(false));
  cache.Put(K(1), true);  // again: still one entry
  EXPECT_EQ(cache.size(), 2u);
}

TEST(AuthCacheTest, BoundedAndFailuresGoFirst) {
  AuthCache cache(3);
  cache.Put(K(0), true);
  for (int i = 1; i <= 1000; ++i) cache.Put(K(i), false);  // a flood of wrong passwords
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.Get(K(0)), std::optional<bool>(true));  // the success survived
  EXPECT_EQ(cache.Get(K(1000)), std::optional<bool>(false));
  EXPECT_EQ(cache.Get(K(999)), std::optional<bool>(false));
  EXPECT_FALSE(cache.Get(K(998)).has_value());
  // Only successes left: the least recently used one goes.
  AuthCache ok(2);
  ok.Put(K(1), true);
  ok.Put(K(2), true);
  ASSERT_TRUE(ok.Get(K(1)).has_value());  // K(1) is now the most recent
  ok.Put(K(3), true);
  EXPECT_TRUE(ok.Get(K(1)).has_value());
  EXPECT_FALSE(ok.Get(K(2)).has_value());
  EXPECT_EQ(ok.size(), 2u);
}

TEST(BasicAuthTest, VerifiesAndCaches) {
  BasicAuth auth(Users{{"alice", kHash}}, 8);
  EXPECT_TRUE(auth.enabled());
  EXPECT_FALSE(auth.Lookup("alice", "secret").has_value());
  EXPECT_TRUE(auth.Verify("alice", "secret"));
  EXPECT_EQ(auth.Lookup("alice", "secret"), std::optional<bool>(true));
  EXPECT_FALSE(auth.Verify("alice", "Secret"));
  EXPECT_EQ(auth.Lookup("alice", "Secret"), std::optional<bool>(false));
  EXPECT_FALSE(auth.Verify("bob", "secret"));  // unknown user, even with a valid password
  EXPECT_EQ(auth.Lookup("bob", "secret"), std::optional<bool>(false));
  EXPECT_FALSE(auth.Lookup("alice", "other").has_value());
  EXPECT_EQ(auth.cache().size(), 3u);
  EXPECT_FALSE(BasicAuth(Users{}).enabled());
}

TEST(BasicAuthTest, UnknownUsersPayAFullBcryptOfTheSameCost) {
  BasicAuth auth(Users{{"alice", kHash}, {"carol", "$2y$05$abcdefghijklmnopqrstuu2r9OfJnfCsdneAXAGHnS4UpFFP8WIrW"}});
  const std::string& dummy = auth.dummy_hash();
  ASSERT_EQ(dummy.size(), 60u);
  EXPECT_EQ(dummy.substr(0, 7), "$2b$05$");  // the highest configured cost
  // crypt_r accepts it as a bcrypt setting (so it computes a full bcrypt) and no password matches.
  crypt_data data;
  std::memset(&data, 0, sizeof(data));
  const char* out = crypt_r("secret", dummy.c_str(), &data);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(std::string(out).substr(0, 29), dummy.substr(0, 29));
  EXPECT_EQ(std::strlen(out), 60u);
  EXPECT_FALSE(CheckPassword(dummy, "secret"));
  EXPECT_FALSE(CheckPassword(dummy, ""));
  // A fresh random salt each time.
  EXPECT_NE(BasicAuth(Users{{"alice", kHash}}).dummy_hash(), BasicAuth(Users{{"alice", kHash}}).dummy_hash());
}

}  // namespace
}  // namespace tpe
