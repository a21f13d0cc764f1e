#!/usr/bin/env bash
# e2e tier with a real Prometheus server (Debian package `prometheus`) on loopback: it scrapes the
# daemon every second; known tracepoint traffic is generated; Prometheus's HTTP API must report
# the counter's exact increase and a histogram quantile in the right bucket.
#   prometheus_test.sh BINARY TRIGGER SOURCE_DIR [protobuf]
# With "protobuf", Prometheus runs with --enable-feature=native-histograms, under which it asks
# for the protobuf exposition first (the Accept header below, scrape.go's); the daemon must
# answer that header with protobuf, and the checks read what Prometheus made of it.
set -uo pipefail
BIN=$1 TRIGGER=$2 SRC=$3 FORMAT=${4:-text}
PROM_FLAGS=()
[[ "$FORMAT" == protobuf ]] && PROM_FLAGS=(--enable-feature=native-histograms)
WORK=$(mktemp -d)
PROM=""
cleanup() { [[ -n "${DAEMON_PID:-}" ]] && kill "$DAEMON_PID" 2>/dev/null; [[ -n "$PROM" ]] && kill "$PROM" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
source "$SRC/tests/testing/daemon.sh"

if [[ $(id -u) -ne 0 ]]; then
  echo "prometheus e2e skipped: needs root to open tracepoint perf events"
  [[ "${TPE_REQUIRE_KERNEL:-}" == 1 ]] && exit 1
  exit 0
fi
if ! command -v prometheus >/dev/null; then
  echo "prometheus e2e: the prometheus server is not installed (scripts/install-deps.sh installs it)"
  echo "0 passed, 1 failed"
  exit 1
fi

cat >"$WORK/config.json" <<'JSON'
{ "metrics": [
  {"name": "getppid_calls_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
   "labels": [{"name": "comm", "source": "comm"}]},
  {"name": "nanosleep_seconds", "type": "latency",
   "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"]},
   "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"]},
   "labels": [{"name": "comm", "source": "comm", "from": "start"}],
   "buckets": {"type": "explicit", "bounds": [0.001, 0.01, 0.1, 1]}},
  {"name": "sleep_native_seconds", "type": "latency", "engine": "perf",
   "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"]},
   "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"]},
   "labels": [{"name": "comm", "source": "comm", "from": "start"}],
   "buckets": {"type": "native", "schema": 3}},
  {"name": "sleep_native_bpf_seconds", "type": "latency", "engine": "bpf",
   "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"]},
   "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"]},
   "labels": [{"name": "comm", "source": "comm", "from": "start"}],
   "buckets": {"type": "native", "schema": 3}},
  {"name": "getppid_balance_perf", "type": "gauge", "engine": "perf", "labels": [{"name": "comm", "source": "comm"}],
   "up": {"event": "syscalls:sys_enter_getppid"}, "down": {"event": "syscalls:sys_enter_getpgid"}},
  {"name": "getppid_balance_bpf", "type": "gauge", "engine": "bpf", "labels": [{"name": "comm", "source": "comm"}],
   "up": {"event": "syscalls:sys_enter_getppid"}, "down": {"event": "syscalls:sys_enter_getpgid"}},
  {"name": "write_max_bytes_perf", "type": "gauge", "engine": "perf",
   "max": {"event": "syscalls:sys_enter_write", "field": "count", "filter": "comm == \"tpe_write\""}},
  {"name": "write_max_bytes_bpf", "type": "gauge", "engine": "bpf",
   "max": {"event": "syscalls:sys_enter_write", "field": "count", "filter": "comm == \"tpe_write\""}}
]}
JSON
start_daemon "$BIN" "$WORK/config.json" "$WORK/daemon.log" || { cat "$WORK/daemon.log"; exit 1; }
PPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$WORK/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: tracepoint_exporter
    static_configs: [{targets: ["127.0.0.1:$DAEMON_PORT"]}]
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PPORT" "${PROM_FLAGS[@]}" >"$WORK/prometheus.log" 2>&1 &
PROM=$!
API="http://127.0.0.1:$PPORT/api/v1"
query() {  # query EXPR [TIME] → the first result's value, or empty
  python3 - "$API" "$1" "${2:-}" <<'PY'
import json, sys, urllib.parse, urllib.request
api, expr, t = sys.argv[1], sys.argv[2], sys.argv[3]
q = {"query": expr}
if t: q["time"] = t
try:
    r = json.load(urllib.request.urlopen(api + "/query?" + urllib.parse.urlencode(q), timeout=5))
    res = r["data"]["result"]
    print(res[0]["value"][1] if res else "")
except Exception:
    print("")
PY
}
up=""
for _ in $(seq 1 100); do up=$(query 'up{job="tracepoint_exporter"}'); [[ "$up" == 1 ]] && break; sleep 0.2; done
check "prometheus scrapes the exporter (up == 1)" test "$up" == 1
if [[ "$FORMAT" == protobuf ]]; then
  accept='application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'  # what Prometheus 2.42 sends (captured)
  ctype=$(curl -s -o /dev/null -w '%{content_type}' -H "Accept: $accept" "http://127.0.0.1:$DAEMON_PORT/metrics")
  check "Prometheus's Accept header gets the protobuf exposition (got $ctype)" \
    test "$ctype" == "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
  # What Prometheus itself scraped: the exporter counts requests by the format it answered.
  sleep 2
  pb=$(query 'tracepoint_exporter_scrapes_total{format="protobuf"}')
  check "Prometheus's scrapes were answered in protobuf (scrapes_total{format=\"protobuf\"} = ${pb:-none}, >= 2)" \
    python3 -c "import sys; sys.exit(0 if float('${pb:-0}') >= 2 else 1)"
  check "prometheus runs with native histograms on" sh -c "curl -s '$API/status/flags' | grep -q '\"enable-feature\":\"native-histograms\"'"
else
  sleep 2
  pb=$(query 'tracepoint_exporter_scrapes_total{format="protobuf"}')
  check "Prometheus without native histograms scrapes text (scrapes_total{format=\"protobuf\"} = ${pb:-none})" test "${pb:-none}" == 0
fi

# A first batch creates the series; then the counter's increase between two instants is exact.
"$TRIGGER" tpe_prom 100
sleep 2.5
T1=$(date +%s.%N)
sleep 0.1
"$TRIGGER" tpe_prom 4321
# 10 × nanosleep(20 ms) (raw syscall 35 on x86_64) from a task named tpe_sleep.
python3 -c 'import ctypes; libc = ctypes.CDLL(None); libc.prctl(15, b"tpe_sleep", 0, 0, 0)
ts = (ctypes.c_long * 2)(0, 20_000_000)
for _ in range(10): libc.syscall(35, ts, None)'
# 100 × 1 ms and 50 × 10 ms from tpe_native, for the native histograms: the median (the 75th of
# 150) is a 1 ms sleep, the 0.9 quantile (the 135th) a 10 ms one. Prometheus interpolates inside
# a bucket, so a quantile can read as low as the lower bound of the bucket holding the sleep:
# 2^(-80/8) s for 1 ms (bucket -79 at schema 3), 2^(-54/8) s for 10 ms (bucket -53).
python3 -c 'import ctypes; libc = ctypes.CDLL(None); libc.prctl(15, b"tpe_native", 0, 0, 0)
for ns, n in ((1_000_000, 100), (10_000_000, 50)):
    ts = (ctypes.c_long * 2)(0, ns)
    for _ in range(n): libc.syscall(35, ts, None)'
# Writes of 100, 7777 and 300 bytes from tpe_write, for the max gauges.
python3 -c 'import ctypes, os; libc = ctypes.CDLL(None); libc.prctl(15, b"tpe_write", 0, 0, 0)
fd = os.open("/dev/null", os.O_WRONLY)
for n in (100, 7777, 300): os.write(fd, b"x" * n)'

sleep 2.5
T2=$(date +%s.%N)
v1=$(query 'getppid_calls_total{comm="tpe_prom"}' "$T1")
v2=$(query 'getppid_calls_total{comm="tpe_prom"}' "$T2")
inc=$(python3 -c "print(int(float('${v2:-0}') - float('${v1:-0}')))")
check "counter increase between two instants == 4321 (got $inc; $v1 → $v2)" test "$inc" == 4321
n=$(query 'sum(nanosleep_seconds_count{comm="tpe_sleep"})')
check "latency _count of 10 nanosleeps == 10 (got ${n:-none})" test "${n%.*}" == 10
q=$(query 'histogram_quantile(0.5, sum by (le) (nanosleep_seconds_bucket{comm="tpe_sleep"}))')
check "median nanosleep latency in (10 ms, 100 ms] (got ${q:-none})" python3 -c "import sys; sys.exit(0 if 0.01 < float('${q:-0}') <= 0.1 else 1)"
in_range() { python3 -c "import sys; sys.exit(0 if $2 < float('${1:-0}') <= $3 else 1)"; }
for m in sleep_native_seconds sleep_native_bpf_seconds; do
  if [[ "$FORMAT" == protobuf ]]; then
    # Native histograms: Prometheus stores one series of the base name; its functions read it.
    n=$(query "histogram_count(sum($m{comm=\"tpe_native\"}))")
    check "$m: histogram_count of 150 sleeps == 150 (got ${n:-none})" test "${n%.*}" == 150
    q=$(query "histogram_quantile(0.5, sum($m{comm=\"tpe_native\"}))")
    check "$m: native median in (2^-10 s, 10 ms] (got ${q:-none})" in_range "$q" 0.0009765625 0.01
    q=$(query "histogram_quantile(0.9, sum($m{comm=\"tpe_native\"}))")
    check "$m: native 0.9 quantile in (2^-6.75 s, 100 ms] (got ${q:-none})" in_range "$q" 0.009290680585958758 0.1
    s=$(query "histogram_sum(sum($m{comm=\"tpe_native\"}))")
    check "$m: histogram_sum at least 0.6 s (got ${s:-none})" in_range "$s" 0.6 60
  else
    # Without native histograms a native-only histogram is _count, _sum and the +Inf bucket.
    n=$(query "sum(${m}_count{comm=\"tpe_native\"})")
    check "$m: text _count of 150 sleeps == 150 (got ${n:-none})" test "${n%.*}" == 150
    n=$(query "sum(${m}_bucket{comm=\"tpe_native\",le=\"+Inf\"})")
    check "$m: text +Inf bucket == 150 (got ${n:-none})" test "${n%.*}" == 150
  fi
done
# Gauges, both engines: up on getppid, down on getpgid (the trigger makes only getppid calls):
# 100 + 4321 up; the largest write of a scrape window, seen by some scrape.
for e in perf bpf; do
  g=$(query "getppid_balance_$e{comm=\"tpe_prom\"}" "$T2")
  check "up/down gauge ($e): 4421 getppid() up, none down (got ${g:-none})" test "${g%.*}" == 4421
  w=$(query "max_over_time(write_max_bytes_$e[30s])" "$T2")
  check "max gauge ($e): the 7777-byte write in some window (got ${w:-none})" test "${w%.*}" == 7777
done
check "promtool accepts deploy/prometheus/alerts.yml" promtool check rules "$SRC/deploy/prometheus/alerts.yml"
check "promtool accepts deploy/prometheus/prometheus.yml" promtool check config "$SRC/deploy/prometheus/prometheus.yml"
check "deploy/grafana/dashboard.json is JSON with panels" python3 -c "import json,sys; d=json.load(open('$SRC/deploy/grafana/dashboard.json')); sys.exit(0 if d['panels'] else 1)"
echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
