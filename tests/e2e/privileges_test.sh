#!/usr/bin/env bash
# e2e tier: --security.drop-capabilities leaves no capability in any thread of the real daemon.
#   privileges_test.sh BINARY TRIGGER SOURCE_DIR
# Capabilities are per thread (capabilities(7): cap_set_proc/capset act on the calling thread
# only), so /proc/PID/status, the main thread's, says nothing about the others. The config runs
# every kind of thread the daemon makes — the reader, the sweeper, libmicrohttpd's event loops,
# the delayed-answer runner, the deadline watchdog and the bcrypt auth thread (basic auth) — and
# a scrape, an authenticated scrape and a profile request with a window run before and after the
# check. Checks:
#  - every task in /proc/PID/task has CapEff, CapPrm, CapInh and CapAmb 0 and NoNewPrivs 1;
#  - counting goes on: a trigger's getppid() calls counted exactly;
#  - a profile's kernel frames are still named (kallsyms opened before the drop, so reading it
#    again needs no CAP_SYSLOG), and the kallsyms_hidden self-metric says 0.
set -uo pipefail
BIN=$1 TRIGGER=$2 SRC=$3
WORK=$(mktemp -d)
PID=""
cleanup() { [[ -n "$PID" ]] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
source "$SRC/tests/testing/daemon.sh"

require_root

HASH=$(python3 -W ignore -c 'import crypt; print(crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))')
cat >"$WORK/web.yml" <<YML
basic_auth_users:
  prometheus: '$HASH'
YML
# raw_syscalls:sys_enter with id 110 (x86-64's getppid): stacks with a kernel part.
cat >"$WORK/config.json" <<JSON
{ "settings": {"ring_buffer_pages": 256},
  "metrics": [
  {"name": "getppid_calls_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
   "labels": [{"name": "comm", "source": "comm"}]},
  {"name": "nanosleep_seconds", "type": "latency",
   "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"]},
   "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"]},
   "buckets": {"type": "exp2", "min": 0.001, "max": 1}}],
  "profiles": [
  {"name": "getppid_stacks", "event": "raw_syscalls:sys_enter", "filter": "id == 110", "stack": "kernel"}]
}
JSON
start_daemon_or_exit "$BIN" "$WORK/config.json" "$WORK/log" --security.drop-capabilities --web.config.file="$WORK/web.yml"
dropped=0
for _ in $(seq 1 100); do
  grep -q 'dropped all capabilities' "$WORK/log" && { dropped=1; break; }
  sleep 0.1
done
check "the log says the capabilities were dropped" test "$dropped" == 1

N=777
"$TRIGGER" tpe_nocaps $N
got=""
for _ in $(seq 1 50); do
  got=$(curl -sf -u prometheus:s3cret "$URL/metrics" | sed -n 's/^getppid_calls_total{comm="tpe_nocaps"} \([0-9]*\)$/\1/p')
  [[ "$got" == "$N" ]] && break
  sleep 0.1
done
check "still counting exactly after the drop ($N, got '$got')" test "$got" == "$N"
# The HTTP threads serve this one: a window of 1 s (the delayed-answer thread), folded stacks.
curl -sf -u prometheus:s3cret "$URL/debug/pprof/getppid_stacks?format=folded&seconds=1" >"$WORK/window" &
WINDOW=$!
"$TRIGGER" tpe_nocaps2 100
wait "$WINDOW"
curl -sf -u prometheus:s3cret "$URL/debug/pprof/getppid_stacks?format=folded" >"$WORK/folded"
check "profile: stacks served" test -s "$WORK/folded"
check "profile: kernel frames named after the drop (the syscall entry)" grep -qE '(^|;)(entry_SYSCALL_64[a-z_]*|do_syscall_64)(;| )' "$WORK/folded"
check "profile: no kernel frame left as an address" bash -c "! grep -qF 'kernel.kallsyms]+0x' '$WORK/folded'"
curl -sf -u prometheus:s3cret "$URL/metrics" >"$WORK/scrape"
check "tracepoint_exporter_kallsyms_hidden 0 after the drop" grep -q '^tracepoint_exporter_kallsyms_hidden 0$' "$WORK/scrape"

# Every thread, as it is now (after the requests made the server use all of its threads).
tasks=0
for status in /proc/"$PID"/task/*/status; do
  tasks=$((tasks + 1))
  name=$(sed -n 's/^Name:[[:space:]]*//p' "$status")
  tid=$(basename "$(dirname "$status")")
  for field in CapEff CapPrm CapInh CapAmb; do
    value=$(sed -n "s/^$field:[[:space:]]*//p" "$status")
    check "thread $tid ($name): $field 0 (got $value)" bash -c "[[ '$value' =~ ^0+$ ]]"
  done
  nnp=$(sed -n 's/^NoNewPrivs:[[:space:]]*//p' "$status")
  check "thread $tid ($name): NoNewPrivs 1 (got $nnp)" test "$nnp" == 1
done
# main, reader, sweeper, 4 event loops, the delayed-answer runner, the watchdog, bcrypt's thread.
check "the daemon runs its threads (at least 8, got $tasks)" test "$tasks" -ge 8

kill -TERM "$PID"
wait "$PID"
rc=$?
PID=""
check "SIGTERM: clean exit 0 (got $rc)" test "$rc" == 0
echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
