#!/usr/bin/env bash
# e2e tier: --web.config.file with bcrypt basic auth and TLS, checked with a real TLS client
# (curl, certificate verified): the right password gets the metrics, a wrong one, an unknown user
# or none 401, plain HTTP nothing on the TLS port; bad web configs and certificates stop the
# daemon with a clear error.
#   tls_auth_test.sh BINARY SOURCE_DIR
set -uo pipefail
BIN=$1 SRC=$2
WORK=$(mktemp -d)
cleanup() { [[ -n "${DAEMON_PID:-}" ]] && kill "$DAEMON_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
source "$SRC/tests/testing/daemon.sh"
if [[ $(id -u) -ne 0 ]]; then
  echo "tls e2e skipped: needs root"; [[ "${TPE_REQUIRE_KERNEL:-}" == 1 ]] && exit 1; exit 0
fi

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext "subjectAltName=IP:127.0.0.1" \
  -keyout "$WORK/server.key" -out "$WORK/server.crt" >/dev/null 2>&1
HASH=$(python3 -W ignore -c 'import crypt; print(crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))')
cat >"$WORK/web.yml" <<YML
basic_auth_users:
  prometheus: '$HASH'
YML
echo '{"metrics": [{"name": "context_switches_total", "type": "counter", "event": "sched:sched_switch"}]}' >"$WORK/config.json"
start_daemon "$BIN" "$WORK/config.json" "$WORK/log" --web.config.file="$WORK/web.yml"
check "daemon started with basic auth" test -n "$DAEMON_PORT"
URL="http://127.0.0.1:$DAEMON_PORT"
code=$(curl -s -o "$WORK/body" -w '%{http_code}' -u prometheus:s3cret "$URL/metrics")
check "right password: 200 with metrics (got $code)" bash -c "[[ $code == 200 ]] && grep -q '^context_switches_total ' '$WORK/body'"
code=$(curl -s -o /dev/null -w '%{http_code}' -u prometheus:wrong "$URL/metrics")
check "wrong password: 401 (got $code)" test "$code" == 401
code=$(curl -s -o /dev/null -w '%{http_code}' -u nobody:s3cret "$URL/metrics")
check "unknown user: 401 (got $code)" test "$code" == 401
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics")
check "no credentials: 401 (got $code)" test "$code" == 401
kill "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=""

# TLS and basic auth together, with a real TLS client that verifies the certificate.
cat >"$WORK/web_tls.yml" <<YML
tls_server_config:
  cert_file: $WORK/server.crt
  key_file: $WORK/server.key
basic_auth_users:
  prometheus: '$HASH'
YML
start_daemon "$BIN" "$WORK/config.json" "$WORK/log_tls" --web.config.file="$WORK/web_tls.yml"
check "daemon started with TLS and basic auth" test -n "$DAEMON_PORT"
URL="https://127.0.0.1:$DAEMON_PORT"
code=$(curl -s -o "$WORK/body" -w '%{http_code}' --cacert "$WORK/server.crt" -u prometheus:s3cret "$URL/metrics")
check "TLS, right password: 200 with metrics (got $code)" bash -c "[[ $code == 200 ]] && grep -q '^context_switches_total ' '$WORK/body'"
check "TLS: the scrape passes promtool" bash -c "promtool check metrics <'$WORK/body'"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$WORK/server.crt" -u prometheus:wrong "$URL/metrics")
check "TLS, wrong password: 401 (got $code)" test "$code" == 401
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$WORK/server.crt" "$URL/metrics")
check "TLS, no credentials: 401 (got $code)" test "$code" == 401
check "TLS: certificate verified by the client" bash -c "[[ \$(curl -s -o /dev/null -w '%{ssl_verify_result}' --cacert '$WORK/server.crt' -u prometheus:s3cret '$URL/metrics') == 0 ]]"
check "TLS: landing page" bash -c "curl -sf --cacert '$WORK/server.crt' '$URL/' | grep -q 'href=\"/metrics\"'"
check "TLS: plain HTTP gets no metrics" bash -c "! curl -sf -m 3 http://127.0.0.1:$DAEMON_PORT/metrics >/dev/null"
kill "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=""

bad() {  # bad NAME EXPECTED WEBCONFIG-TEXT
  printf '%s\n' "$3" >"$WORK/bad.yml"
  "$BIN" --config.file="$WORK/config.json" --web.listen-address=127.0.0.1:0 --web.config.file="$WORK/bad.yml" >"$WORK/out" 2>&1 &
  local pid=$!
  sleep 3
  if kill -0 $pid 2>/dev/null; then kill $pid; wait $pid; check "$1: exits" false; return; fi
  wait $pid
  local rc=$?
  check "$1: exit 1 and '$2'" bash -c "[[ $rc == 1 ]] && grep -qF -- '$2' '$WORK/out'" || cat "$WORK/out"
}
bad "plain-text password" "is not a bcrypt hash" "basic_auth_users: {prometheus: hunter2}"
bad "missing key file" "cannot read /nonexistent.key" "tls_server_config: {cert_file: $WORK/server.crt, key_file: /nonexistent.key}"
echo "not a certificate" >"$WORK/garbage.crt"
bad "bad certificate" "TLS setup failed" "tls_server_config: {cert_file: $WORK/garbage.crt, key_file: $WORK/server.key}"
bad "unknown key" "unknown key \"tls\"" "tls: {}"
echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
