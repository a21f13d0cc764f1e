#!/usr/bin/env bash
# e2e tier: a SIGHUP that arrives while the daemon is still starting (systemctl reload right after
# systemctl start) must become a reload, not end the process (SIGHUP's default action).
#   early_signal_test.sh BINARY SOURCE_DIR
# For each delay, the daemon is started, SIGHUP is sent that long after it blocked SIGHUP (its
# first instruction of its own, from .preinit_array: /proc/PID/status SigBlk), and the daemon
# must then serve /metrics, still be alive, and exit 0 on SIGTERM. Before that instant the
# dynamic loader is still mapping and relocating the shared libraries (about 3 ms here, more on a
# cold or busy machine: CI's first try at 5 ms after exec was killed) and no process can catch a
# signal; systemd queues a reload until a Type=notify service reports READY=1.
set -uo pipefail
BIN=$1 SRC=$2
WORK=$(mktemp -d)
PID=""
cleanup() { [[ -n "$PID" ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
source "$SRC/tests/testing/daemon.sh"

require_root

cat > "$WORK/config.json" <<JSON
{ "metrics": [
  {"name": "getppid_calls_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
   "labels": [{"name": "comm", "source": "comm"}]},
  {"name": "context_switches_total", "type": "counter", "event": "sched:sched_switch"}
]}
JSON
real_bin=$(readlink -f "$BIN")
for delay in 0 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.15 0.2 0.3; do
  "$BIN" --config.file="$WORK/config.json" --web.listen-address=127.0.0.1:0 >"$WORK/log" 2>&1 &
  PID=$!
  for _ in $(seq 1 2000); do
    [[ $(readlink /proc/$PID/exe 2>/dev/null) == "$real_bin" ]] || continue
    blk=$(awk '/^SigBlk:/ {print $2}' /proc/$PID/status 2>/dev/null)
    [[ -n "$blk" ]] && (((16#$blk & 1) != 0)) && break  # SIGHUP (1) is bit 0
  done
  sleep "$delay"
  kill -HUP "$PID" 2>/dev/null
  port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$WORK/log" | head -1)
    [[ -n "$port" ]] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  sleep 0.3
  check "SIGHUP ${delay}s after it blocked SIGHUP: daemon alive and serving" \
    bash -c "kill -0 $PID && curl -sf http://127.0.0.1:$port/metrics | grep -q '^context_switches_total '"
  kill -TERM "$PID" 2>/dev/null
  wait "$PID"
  rc=$?
  check "SIGHUP ${delay}s after it blocked SIGHUP: SIGTERM exits 0 (rc $rc)" test "$rc" == 0
  [[ $rc != 0 ]] && cat "$WORK/log"
  PID=""
done
echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
