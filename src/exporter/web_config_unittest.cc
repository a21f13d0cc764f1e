#include "exporter/web_config.h"

#include <gtest/gtest.h>

#include <fstream>

namespace tpe {
namespace {

// bcrypt (cost 4) of "secret" with salt "abcdefghijklmnopqrstuu".
const char* kHash = "$2b$04$abcdefghijklmnopqrstuu2r9OfJnfCsdneAXAGHnS4UpFFP8WIrW";

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(WebConfigTest, BcryptPasswords) {
  EXPECT_TRUE(CheckPassword(kHash, "secret"));
  EXPECT_FALSE(CheckPassword(kHash, "Secret"));
  EXPECT_FALSE(CheckPassword(kHash, ""));
  EXPECT_FALSE(CheckPassword(std::string(kHash).substr(0, 40), "secret"));
  EXPECT_FALSE(CheckPassword("not-a-hash", "secret"));
}

TEST(WebConfigTest, ParsesTlsAndUsers) {
  const std::string cert = Write("c.pem", "x"), key = Write("k.pem", "y");
  auto w = LoadWebConfig(Write("web.yml", "tls_server_config:\n  cert_file: " + cert + "\n  key_file: " + key +
                                              "\nbasic_auth_users:\n  alice: " + std::string(kHash) + "\n"));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE(w->tls());
  EXPECT_EQ(w->users.at("alice"), kHash);
  auto empty = LoadWebConfig(Write("empty.yml", ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->tls());
  EXPECT_TRUE(empty->users.empty());
}

TEST(WebConfigTest, ErrorsNameFileAndKey) {
  EXPECT_EQ(LoadWebConfig("/nonexistent.yml").status().message(),
            "--web.config.file=/nonexistent.yml: cannot read the file");
  auto bad = Write("bad.yml", "tls_server_config: [\n");
  EXPECT_NE(LoadWebConfig(bad).status().message().find("malformed YAML"), std::string::npos);
  auto unknown = Write("unknown.yml", "tls_config: {}\n");
  EXPECT_EQ(LoadWebConfig(unknown).status().message(),
            unknown + ": unknown key \"tls_config\" (valid: basic_auth_users, http_server_config, tls_server_config)");
  auto half = Write("half.yml", "tls_server_config:\n  cert_file: /etc/hostname\n");
  EXPECT_EQ(LoadWebConfig(half).status().message(), half + ": tls_server_config needs both cert_file and key_file");
  auto missing = Write("missing.yml", "tls_server_config:\n  cert_file: /nope.crt\n  key_file: /nope.key\n");
  EXPECT_NE(LoadWebConfig(missing).status().message().find("cannot read /nope.crt"), std::string::npos);
  auto plain = Write("plain.yml", "basic_auth_users:\n  bob: hunter2\n");
  EXPECT_NE(LoadWebConfig(plain).status().message().find("the hash of \"bob\" is not a bcrypt hash"),
            std::string::npos);
}

}  // namespace
}  // namespace tpe
