#include "exporter/web_config.h"

#include <crypt.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <memory>
#include <set>

namespace tpe {
namespace {

Status CheckKeys(const YAML::Node& node, const std::string& where, const std::set<std::string>& allowed,
                 const std::string& path) {
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument(path + ": " + where + "unknown key \"" + key + "\" (valid: " + list + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<WebConfig> LoadWebConfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return NotFound("--web.config.file=" + path + ": cannot read the file");
  } catch (const YAML::Exception& e) {
    return InvalidArgument("--web.config.file=" + path + ": malformed YAML: " + e.what());
  }
  WebConfig cfg;
  if (root.IsNull()) return cfg;
  if (!root.IsMap()) return InvalidArgument(path + ": must be a YAML mapping (tls_server_config, basic_auth_users)");
  try {
    TPE_RETURN_IF_ERROR(CheckKeys(root, "", {"tls_server_config", "basic_auth_users", "http_server_config"}, path));
    if (const YAML::Node tls = root["tls_server_config"]) {
      TPE_RETURN_IF_ERROR(CheckKeys(tls, "tls_server_config: ", {"cert_file", "key_file", "min_version"}, path));
      if (tls["cert_file"]) cfg.cert_file = tls["cert_file"].as<std::string>();
      if (tls["key_file"]) cfg.key_file = tls["key_file"].as<std::string>();
      if (cfg.cert_file.empty() != cfg.key_file.empty()) {
        return InvalidArgument(path + ": tls_server_config needs both cert_file and key_file");
      }
      for (const auto& f : {cfg.cert_file, cfg.key_file}) {
        if (!f.empty() && ::access(f.c_str(), R_OK) != 0) {
          return InvalidArgument(path + ": tls_server_config: cannot read " + f + ": " + std::strerror(errno));
        }
      }
    }
    if (const YAML::Node users = root["basic_auth_users"]) {
      if (!users.IsMap()) return InvalidArgument(path + ": basic_auth_users must map user names to bcrypt hashes");
      for (const auto& kv : users) {
        const std::string user = kv.first.as<std::string>();
        const std::string hash = kv.second.as<std::string>();
        if (!(hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$")) || hash.size() != 60) {
          return InvalidArgument(path + ": basic_auth_users: the hash of \"" + user +
                                 "\" is not a bcrypt hash ($2y$10$... — make one with htpasswd -nBC 10 \"\")");
        }
        cfg.users[user] = hash;
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
  return cfg;
}

bool CheckPassword(const std::string& hash, const std::string& password) {
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  if (out == nullptr || out[0] == '*') return false;
  // Constant-time comparison of equal-length strings.
  const size_t n = std::strlen(out);
  if (n != hash.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(out[i] ^ hash[i]);
  return diff == 0;
}

}  // namespace tpe
