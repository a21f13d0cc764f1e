// --web.config.file: the Prometheus exporter-toolkit web configuration (TLS and basic auth),
// the same YAML that node_exporter and other Prometheus exporters read:
//
//   tls_server_config:
//     cert_file: /etc/tracepoint_exporter/server.crt
//     key_file: /etc/tracepoint_exporter/server.key
//   basic_auth_users:
//     prometheus: $2y$10$...   # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//
// Parsed with yaml-cpp; passwords are checked with crypt(3) (libxcrypt's bcrypt). With
// tls_server_config, HttpExporter serves HTTPS only, with libmicrohttpd over GnuTLS (TLS 1.2+;
// min_version is accepted but not applied yet). BasicAuth (basic_auth.h) caches verdicts.
// Thread-safety: a loaded WebConfig is immutable; CheckPassword is reentrant (crypt_r).
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace tpe {

struct WebConfig {
  std::string cert_file;                     // PEM certificate (chain); empty = plain HTTP
  std::string key_file;                      // PEM private key
  std::map<std::string, std::string> users;  // user → bcrypt hash; empty = no auth
  bool tls() const { return !cert_file.empty(); }
};

// Reads and validates the file: known keys only, both cert_file and key_file (readable) or
// neither, bcrypt hashes ($2a$, $2b$, $2y$). Errors name the file and the key.
StatusOr<WebConfig> LoadWebConfig(const std::string& path);

// True when `password` matches the bcrypt `hash`.
bool CheckPassword(const std::string& hash, const std::string& password);

}  // namespace tpe
