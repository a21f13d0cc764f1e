# require_root: an e2e test that is not root skips (exit 0) saying why, or fails (exit 1) under
# TPE_REQUIRE_KERNEL=1, where a skip is a failure. Call it after sourcing this file.
require_root() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "e2e skipped: needs root to open tracepoint perf events"
    [[ "${TPE_REQUIRE_KERNEL:-}" == 1 ]] && { echo "TPE_REQUIRE_KERNEL=1: a skip is a failure"; exit 1; }
    exit 0
  fi
}

# Sourced by shell tests and benchmarks. start_daemon starts the tracepoint_exporter binary on a free
# loopback port and waits until it reports the port.
#   start_daemon BINARY CONFIG LOG [ARGS...]   sets DAEMON_PID and DAEMON_PORT (empty on failure)
start_daemon() {
  local bin=$1 config=$2 log=$3
  shift 3
  "$bin" --config.file="$config" --web.listen-address=127.0.0.1:0 "$@" >"$log" 2>&1 &
  DAEMON_PID=$!
  DAEMON_PORT=""
  for _ in $(seq 1 100); do
    DAEMON_PORT=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$log" | head -1)
    [[ -n "$DAEMON_PORT" ]] && return 0
    kill -0 "$DAEMON_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# start_daemon_or_exit BINARY CONFIG LOG [ARGS...]: start_daemon, checked; sets PID, PORT and URL
# (http://127.0.0.1:PORT), or prints the log and exits 1 when the daemon did not come up.
start_daemon_or_exit() {
  start_daemon "$@"
  PID=$DAEMON_PID PORT=$DAEMON_PORT URL="http://127.0.0.1:$DAEMON_PORT"
  check "daemon started and reported its port" test -n "$PORT"
  [[ -z "$PORT" ]] && { cat "$3"; echo "0 passed, 1 failed"; exit 1; }
  return 0
}

# check NAME COMMAND...: runs COMMAND, prints ok/FAIL with NAME, counts into passes/fails.
# Scripts end with: echo "$passes passed, $fails failed"; [[ $fails == 0 ]]
passes=0
fails=0
check() {
  local name=$1
  shift
  if "$@"; then passes=$((passes + 1)); echo "ok: $name"; else fails=$((fails + 1)); echo "FAIL: $name"; fi
}
