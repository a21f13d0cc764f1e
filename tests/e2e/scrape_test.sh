#!/usr/bin/env bash
# e2e tier: the real tracepoint_exporter binary on a free loopback port, scraped over HTTP.
#   scrape_test.sh BINARY TRIGGER SOURCE_DIR
# Checks: exact count of a trigger's getppid() calls by comm, the landing page, promtool check
# metrics on the scrape, clean SIGTERM exit; and the real binary's errors for bad input.
set -uo pipefail
BIN=$1 TRIGGER=$2 SRC=$3
WORK=$(mktemp -d)
PID=""
cleanup() { [[ -n "$PID" ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
source "$SRC/tests/testing/daemon.sh"

require_root

cat > "$WORK/config.json" <<JSON
{ "metrics": [
  {"name": "getppid_calls_total", "help": "getppid() by comm", "type": "counter",
   "event": "syscalls:sys_enter_getppid", "labels": [{"name": "comm", "source": "comm"}]},
  {"name": "context_switches_total", "type": "counter", "event": "sched:sched_switch"},
  {"name": "tcp_retransmit_segments_total", "type": "counter", "event": "tcp:tcp_retransmit_skb",
   "labels": [{"name": "state", "field": "state", "decode": "symbolic"}, {"name": "dport", "field": "dport"}]},
  {"name": "write_request_bytes", "type": "histogram", "event": "syscalls:sys_enter_write",
   "value": {"field": "count"}, "buckets": {"type": "native"}},
  {"name": "nanosleep_seconds", "type": "latency",
   "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"]},
   "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"]},
   "buckets": {"type": "exp2", "min": 0.001, "max": 1}, "native": true},
  {"name": "nanosleeps_in_flight", "type": "gauge", "labels": [{"name": "comm", "source": "comm"}],
   "inflight": {"start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"]},
                "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"]}}},
  {"name": "write_max_bytes", "type": "gauge", "max": {"event": "syscalls:sys_enter_write", "field": "count"}},
  {"name": "getppid_minus_getpid", "type": "gauge", "engine": "perf",
   "up": {"event": "syscalls:sys_enter_getppid"}, "down": {"event": "syscalls:sys_enter_getpid"}}
]}
JSON

start_daemon_or_exit "$BIN" "$WORK/config.json" "$WORK/log"

N=4321
"$TRIGGER" tpe_e2e $N
got=""
for _ in $(seq 1 50); do
  curl -sf "$URL/metrics" >"$WORK/scrape" || true
  got=$(sed -n 's/^getppid_calls_total{comm="tpe_e2e"} \([0-9]*\)$/\1/p' "$WORK/scrape")
  [[ "$got" == "$N" ]] && break
  sleep 0.1
done
check "getppid_calls_total{comm=\"tpe_e2e\"} == $N (got '${got}')" test "$got" == "$N"
check "self-metrics: no samples lost" bash -c "! grep -E '^tracepoint_exporter_samples_lost_total\{.*\} [1-9]' '$WORK/scrape'"
check "build_info present" grep -q '^tracepoint_exporter_build_info{' "$WORK/scrape"
check "scrape duration reported" grep -qE '^tracepoint_exporter_scrape_duration_seconds [0-9.e-]+$' "$WORK/scrape"
check "process metrics present" grep -q '^process_resident_memory_bytes ' "$WORK/scrape"
check "counting-mode counter present" grep -qE '^context_switches_total [0-9]' "$WORK/scrape"
sleep 0.2  # writes and sleeps happen all the time; one more scrape has both histograms
curl -sf "$URL/metrics" >"$WORK/scrape"
check "native-only histogram: its +Inf bucket on the text page" grep -qE '^write_request_bytes_bucket\{le="\+Inf"\} [0-9]' "$WORK/scrape"
check "native-only histogram: no classic bucket on the text page" bash -c "! grep -qE '^write_request_bytes_bucket\{le=\"[0-9]' '$WORK/scrape'"
# Gauges ("auto": bpf where it is available; the up/down one on perf): typed gauge on the page.
for g in nanosleeps_in_flight write_max_bytes getppid_minus_getpid; do
  check "gauge $g: # TYPE $g gauge" grep -q "^# TYPE $g gauge\$" "$WORK/scrape"
done
check "up/down gauge: a value" grep -qE "^getppid_minus_getpid -?[0-9][0-9.e+]*$" "$WORK/scrape"
if command -v promtool >/dev/null; then
  check "promtool check metrics accepts the scrape" bash -c "promtool check metrics <'$WORK/scrape' >'$WORK/promtool' 2>&1"
  cat "$WORK/promtool"
else
  check "promtool is installed (scripts/install-deps.sh)" false
fi
check "landing page links the metrics path" bash -c "curl -sf '$URL/' | grep -q 'href=\"/metrics\"'"

# Reload (SIGHUP): add a metric, keep the others; the kept counter is not reset.
cp "$WORK/config.json" "$WORK/config.before"
sed -i 's/^\]}$/, {"name": "reloaded_getppid_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "labels": [{"name": "comm", "source": "comm"}]}\n]}/' "$WORK/config.json"
kill -HUP "$PID"
for _ in $(seq 1 50); do
  curl -sf "$URL/metrics" >"$WORK/scrape2" || true
  grep -q '^tracepoint_exporter_config_reloads_total{result="success"} 1' "$WORK/scrape2" && break
  sleep 0.1
done
"$TRIGGER" tpe_e2e 1000
sleep 0.5
curl -sf "$URL/metrics" >"$WORK/scrape2"
check "SIGHUP reload succeeded" grep -q '^tracepoint_exporter_config_last_reload_successful 1' "$WORK/scrape2"
check "kept counter continued: $((N + 1000))" grep -q "^getppid_calls_total{comm=\"tpe_e2e\"} $((N + 1000))$" "$WORK/scrape2"
check "new metric counts from the reload on: 1000" grep -q '^reloaded_getppid_total{comm="tpe_e2e"} 1000$' "$WORK/scrape2"
echo '{"metrics": [' >"$WORK/config.json"  # broken
kill -HUP "$PID"
sleep 0.5
"$TRIGGER" tpe_e2e 10
sleep 0.5
curl -sf "$URL/metrics" >"$WORK/scrape3"
check "bad reload: still serving the previous config" grep -q "^getppid_calls_total{comm=\"tpe_e2e\"} $((N + 1010))$" "$WORK/scrape3"
check "bad reload: reported" grep -q '^tracepoint_exporter_config_last_reload_successful 0' "$WORK/scrape3"
check "bad reload: logged with the reason" grep -q 'reload of .* failed, still running the previous config: .*malformed JSON' "$WORK/log"

# A second instance on the same port: a clear error, exit 1.
"$BIN" --config.file="$WORK/config.before" --web.listen-address=127.0.0.1:$PORT >"$WORK/log2" 2>&1
rc=$?
check "port in use: exit 1 ($rc) and says so" bash -c "[[ $rc == 1 ]] && grep -q 'is the port already in use' '$WORK/log2'"

kill -TERM "$PID"
wait "$PID"
rc=$?
PID=""
check "SIGTERM: clean exit 0 (got $rc)" test "$rc" == 0

# --security.drop-capabilities: no capabilities left, counting goes on, a reload fails cleanly.
cp "$WORK/config.before" "$WORK/config.nocaps"
start_daemon "$BIN" "$WORK/config.nocaps" "$WORK/log3" --security.drop-capabilities
PID=$DAEMON_PID
check "drop-capabilities: CapEff and CapPrm are empty" bash -c "grep -q '^CapEff:[[:space:]]*0*$' /proc/$PID/status && grep -q '^CapPrm:[[:space:]]*0*$' /proc/$PID/status"
"$TRIGGER" tpe_nocaps 777
sleep 0.5
check "drop-capabilities: still counting exactly (777)" bash -c "curl -sf http://127.0.0.1:$DAEMON_PORT/metrics | grep -q '^getppid_calls_total{comm=\"tpe_nocaps\"} 777$'"
# A reload that needs no new perf event keeps the open ones and works without capabilities.
kill -HUP "$PID"
sleep 1
check "drop-capabilities: reload of an unchanged config succeeds (its perf events are kept)" bash -c "curl -sf http://127.0.0.1:$DAEMON_PORT/metrics | grep -q '^tracepoint_exporter_config_last_reload_successful 1'"
# One that needs a new perf event fails with the reason and keeps the old config.
cat >"$WORK/config.nocaps" <<'EOF2'
{"metrics": [{"name": "getppid_calls_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
              "labels": [{"name": "comm", "source": "comm"}]},
             {"name": "getpgid_total", "type": "counter", "event": "syscalls:sys_enter_getpgid"}]}
EOF2
kill -HUP "$PID"
sleep 1
check "drop-capabilities: a reload that opens a new event fails with the reason, old config kept" bash -c "grep -q 'reload of .* failed, still running the previous config: .*Permission denied' '$WORK/log3' && curl -sf http://127.0.0.1:$DAEMON_PORT/metrics | grep -q '^tracepoint_exporter_config_last_reload_successful 0'"
kill -TERM "$PID"; wait "$PID"; PID=""

# A hostile comm (not UTF-8) must not take the target down: the label value is sanitized
# (U+FFFD per bad byte) and the page stays valid for promtool and Prometheus.
start_daemon "$BIN" "$WORK/config.before" "$WORK/log4"
PID=$DAEMON_PID
"$TRIGGER" $'\xff\xfe' 7
sleep 0.5
curl -sf "http://127.0.0.1:$DAEMON_PORT/metrics" >"$WORK/scrape_utf8"
check "non-UTF-8 comm: sanitized to U+FFFD, counted exactly (7)" grep -q $'^getppid_calls_total{comm="\xef\xbf\xbd\xef\xbf\xbd"} 7$' "$WORK/scrape_utf8"
check "non-UTF-8 comm: promtool accepts the page" bash -c "promtool check metrics <'$WORK/scrape_utf8' >/dev/null 2>&1"
kill -TERM "$PID"; wait "$PID"; PID=""

# Comms that differ in bytes but render one label value are one series on the page, on both
# engines (before: three lines with comm="tpdup\uFFFD", Prometheus kept 1 of 3).
cat >"$WORK/dup.json" <<'EOF2'
{"metrics": [{"name": "dup_perf_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "perf",
              "labels": [{"name": "comm", "source": "comm"}]},
             {"name": "dup_bpf_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "bpf",
              "labels": [{"name": "comm", "source": "comm"}]}]}
EOF2
start_daemon "$BIN" "$WORK/dup.json" "$WORK/log5"
PID=$DAEMON_PID
for comm in $'tpdup\xff' $'tpdup\xfe' $'tpdup\xef\xbf\xbd'; do "$TRIGGER" "$comm" 222; done
sleep 0.5
curl -sf "http://127.0.0.1:$DAEMON_PORT/metrics" >"$WORK/scrape_dup"
for m in dup_perf_total dup_bpf_total; do
  check "$m: tpdup\xff, \xfe and U+FFFD are one series of 666" bash -c "[[ \$(grep -c '^$m{comm=\"tpdup' '$WORK/scrape_dup') == 1 ]] && grep -q $'^$m{comm=\"tpdup\xef\xbf\xbd\"} 666$' '$WORK/scrape_dup'" || grep "^$m" "$WORK/scrape_dup"
done
check "one label set per line on the whole page" bash -c "[[ -z \$(grep -v '^#' '$WORK/scrape_dup' | sed 's/ [^ ]*$//' | sort | uniq -d) ]]"
check "duplicate comms: promtool accepts the page" bash -c "promtool check metrics <'$WORK/scrape_dup' >/dev/null 2>&1"
kill -TERM "$PID"; wait "$PID"; PID=""

# Bad input through the real binary: one clear line, exit 1, never a crash.
bad() {  # bad NAME EXPECTED-SUBSTRING CONFIG-TEXT [ARGS...]
  local name=$1 want=$2 text=$3; shift 3
  printf '%s' "$text" >"$WORK/bad.json"
  "$BIN" --config.file="$WORK/bad.json" --config.check "$@" >"$WORK/out" 2>&1
  local rc=$?
  check "$name: exit 1 and '$want'" bash -c "[[ $rc == 1 ]] && grep -qF -- '$want' '$WORK/out'" || cat "$WORK/out"
}
bad "malformed JSON" "bad.json: malformed JSON" '{"metrics": ['
bad "unknown key" 'unknown key "lables"' '{"metrics": [{"name": "a_total", "type": "counter", "event": "sched:sched_switch", "lables": []}]}'
bad "unknown event" 'closest: sched:sched_switch' '{"metrics": [{"name": "a_total", "type": "counter", "event": "sched:sched_swtch"}]}'
bad "unknown field" 'its fields: comm (char[16]), pid (pid_t)' '{"metrics": [{"name": "a_total", "type": "counter", "event": "sched:sched_waking", "labels": [{"name": "x", "field": "nope"}]}]}'
bad "rejected filter" 'Field not found' '{"metrics": [{"name": "a_total", "type": "counter", "event": "sched:sched_switch", "filter": "nope == 1"}]}'
bad "bad metric name" 'is not a valid metric name' '{"metrics": [{"name": "a-b_total", "type": "counter", "event": "sched:sched_switch"}]}'
bad "bad flag value" '--log.level=loud is not one of' '{"metrics": [{"name": "a_total", "type": "counter", "event": "sched:sched_switch"}]}' --log.level=loud
bad "bad tracefs path" 'has no events/ directory' '{}' --tracefs.path=/nonexistent
bad "number too large for a double" 'settings.ring_buffer_pages: the number 1e400' '{"settings": {"ring_buffer_pages": 1e400}, "metrics": []}'
bad "le label on a histogram" 'le' '{"metrics": [{"name": "h", "type": "histogram", "event": "net:net_dev_xmit", "value": {"field": "len"}, "buckets": {"type": "exp2", "min": 64, "max": 1024}, "labels": [{"name": "le", "field": "name"}]}]}'
for special in /dev/zero "$WORK/fifo"; do
  [[ $special == "$WORK/fifo" ]] && mkfifo "$WORK/fifo"
  timeout 10 "$BIN" --config.file="$special" --config.check >"$WORK/out" 2>&1
  rc=$?
  check "--config.file=$special: exit 1 at once, not a regular file" bash -c "[[ $rc == 1 ]] && grep -q 'not a regular file' '$WORK/out'" || cat "$WORK/out"
done

# Concurrent --config.check runs with filters never reject each other's valid filters (they
# used to share one tracefs instance and remove it under each other).
cat >"$WORK/filters.json" <<'EOF2'
{"metrics": [{"name": "a_total", "type": "counter", "event": "sched:sched_switch", "filter": "prev_pid != 0"},
             {"name": "b_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "filter": "common_pid > 1"}]}
EOF2
conc_fail=0
for round in 1 2 3 4 5; do
  pids=()
  for i in 1 2 3 4; do "$BIN" --config.file="$WORK/filters.json" --config.check >"$WORK/conc.$i" 2>&1 & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || conc_fail=$((conc_fail + 1)); done
done
check "20 concurrent --config.check runs with filters all succeed ($conc_fail failed)" test "$conc_fail" == 0
check "no tracefs check instance left behind" bash -c "! ls /sys/kernel/tracing/instances/ 2>/dev/null | grep -q tracepoint_exporter_check"

# A user who may not read tracefs is told so (not that tracefs is missing).
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$BIN" --config.file="$SRC/config/default.json" --config.check >"$WORK/out" 2>&1
  rc=$?
  check "non-root: exit 1 saying tracefs is mounted but not readable" bash -c "[[ $rc == 1 ]] && grep -q 'tracefs is mounted at .* but this user may not read it' '$WORK/out'" || cat "$WORK/out"
fi

# Missing privileges: the error says which (run with an empty capability bounding set).
if command -v setpriv >/dev/null; then
  setpriv --bounding-set -all "$BIN" --config.file="$SRC/config/default.json" --config.check >"$WORK/out" 2>&1
  rc=$?
  check "missing privileges: exit 1 naming CAP_PERFMON and perf_event_paranoid" bash -c "[[ $rc == 1 ]] && grep -q 'CAP_PERFMON missing' '$WORK/out' && grep -q 'perf_event_paranoid=' '$WORK/out'"
fi

# Filters with parts that never depend on the record load on the bpf engine (the verifier refused
# the dead code with "unreachable insn"), and a CPU the machine lacks gets the kernel's verdict on
# both engines.
filter_config() {  # ENGINE FILTER
  python3 -c 'import json,sys; print(json.dumps({"metrics": [{"name": "f_total", "type": "counter", "engine": sys.argv[1],
    "event": "sched:sched_waking", "filter": sys.argv[2], "labels": [{"name": "comm", "source": "comm"}]}]}))' "$1" "$2" >"$WORK/f.json"
}
for f in 'pid & 0' '!(pid & 0)' 'comm ~ "abcdefghijklmnopq*"' 'pid & 0 && comm == "x"' 'pid & 0 || prio > 1'; do
  filter_config bpf "$f"
  "$BIN" --config.file="$WORK/f.json" --config.check >"$WORK/out" 2>&1
  check "engine bpf loads filter '$f'" bash -c "[[ $? == 0 ]] && grep -q 'f_total: bpf engine' '$WORK/out'" || tail -3 "$WORK/out"
done
absent_cpu=$(( $(sed 's/.*[-,]//' /sys/devices/system/cpu/possible) + 1 ))
for engine in perf bpf auto; do
  filter_config $engine "common_pid != CPUS{$absent_cpu}"
  "$BIN" --config.file="$WORK/f.json" --config.check >"$WORK/out" 2>&1
  check "engine $engine refuses CPUS{$absent_cpu} (no such CPU)" bash -c "[[ $? == 1 ]] && grep -q 'Invalid cpulist' '$WORK/out'" || tail -3 "$WORK/out"
done

# Too few file descriptors: whichever step runs out (perf events, BPF maps, the HTTP server), the
# error says to raise the limit and carries no unrelated library complaint.
fd_msgs_ok=1
for n in 25 30 35 40 45 50 55 60; do
  (ulimit -n $n; timeout 5 "$BIN" --config.file="$SRC/config/default.json" --web.listen-address=127.0.0.1:0 >"$WORK/out" 2>&1) && continue
  last=$(grep '^tracepoint_exporter: ' "$WORK/out" | tail -1)
  [[ -z "$last" ]] && continue  # ran until the timeout: enough descriptors
  if ! grep -q 'LimitNOFILE / ulimit -n' <<<"$last" || grep -q 'MHD_OPTION' <<<"$last"; then
    fd_msgs_ok=0; echo "ulimit -n $n: $last"
  fi
done
check "ulimit -n 25..60: every start-up failure says to raise LimitNOFILE, with no libmicrohttpd option complaint" test $fd_msgs_ok == 1

"$BIN" --config.file="$SRC/config/default.json" --config.check >"$WORK/out" 2>&1
check "--config.check accepts config/default.json" bash -c "[[ $? == 0 ]] && grep -q OK '$WORK/out'"
"$BIN" --list-events='sched:sched_sw*' >"$WORK/out" 2>&1
check "--list-events lists fields" grep -q 'prev_comm  char\[16\]  size=16' "$WORK/out"
"$BIN" --list-events='block:block_rq_issue' >"$WORK/out" 2>&1
check "--list-events shows the decodes that fit" grep -q 'dev  dev_t  size=4  (integer)  decode: auto, hex, blkdev$' "$WORK/out"
"$BIN" --list-events='nosuch:*' >"$WORK/out" 2>&1
check "--list-events with no match exits 1" bash -c "[[ $? == 1 ]]"

echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
