#!/usr/bin/env bash
# e2e exact count through the daemon binary, for the kernel matrix (tests/vm/guest.sh) and any host:
#   e2e_exact.sh BINARY TRIGGER SOURCE_DIR [N]
# For engine perf, then engine bpf: one daemon with a counting counter (no labels, filtered on the
# trigger's comm so other tasks' getppid do not count) and a {comm} counter, both on
# syscalls:sys_enter_getppid. The trigger makes N getppid() calls; the {comm} series must equal N
# and the counting counter must grow by exactly N, with no sample lost and no CPU reopened. The rings (2048 pages per CPU) hold more than N samples, so the reader cannot fall
# behind far enough to lose one even on a slow (TCG) guest.
# Environment: TPE_E2E_ENGINES (default "perf bpf"; "auto" lets the daemon choose),
# TPE_E2E_PAGES (ring_buffer_pages, default 2048), TPE_E2E_PIN=CPU (the daemon's threads and the
# trigger on that CPU), TPE_E2E_SCRAPES=1 (scrapes one after another during the count, on one
# connection).
set -uo pipefail
BIN=$1 TRIGGER=$2 SRC=$3 N=${4:-100000}
WORK=$(mktemp -d)
PID=""
cleanup() { [[ -n "$PID" ]] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
source "$SRC/tests/testing/daemon.sh"

value() { sed -n "s/^$1 \([0-9.e+]*\)$/\1/p" "$2" | head -1; }
for engine in ${TPE_E2E_ENGINES:-perf bpf}; do
  cat >"$WORK/config.json" <<JSON
{ "settings": {"ring_buffer_pages": ${TPE_E2E_PAGES:-2048}},
  "metrics": [
  {"name": "getppid_all_total", "type": "counter", "engine": "$engine",
   "event": "syscalls:sys_enter_getppid", "filter": "comm == \"tpe_vm_$engine\""},
  {"name": "getppid_by_comm_total", "type": "counter", "engine": "$engine",
   "event": "syscalls:sys_enter_getppid", "labels": [{"name": "comm", "source": "comm"}]}
]}
JSON
  start_daemon "$BIN" "$WORK/config.json" "$WORK/log.$engine"
  PID=$DAEMON_PID
  [[ -n ${TPE_E2E_PIN:-} && -n $PID ]] && taskset -a -c -p "$TPE_E2E_PIN" "$PID" >/dev/null
  check "$engine: daemon started" test -n "$DAEMON_PORT"
  if [[ -z "$DAEMON_PORT" ]]; then cat "$WORK/log.$engine"; continue; fi
  URL="http://127.0.0.1:$DAEMON_PORT/metrics"
  curl -sf "$URL" >"$WORK/before" || true
  base=$(value getppid_all_total "$WORK/before")
  base=${base:-0}  # a series with no hit yet may be absent
  t0=$(date +%s%N)
  scraper=""
  if [[ -n ${TPE_E2E_SCRAPES:-} ]]; then
    # One connection (URL globbing): under TCG a curl process takes longer to start than a scrape.
    curl -s -o /dev/null "$URL?scrape=[1-1000000]" &
    scraper=$!
  fi
  ${TPE_E2E_PIN:+taskset -c $TPE_E2E_PIN} "$TRIGGER" tpe_vm_$engine "$N"
  [[ -n $scraper ]] && { kill $scraper; wait $scraper 2>/dev/null; }
  echo "$engine: $N calls in $((($(date +%s%N) - t0) / 1000000)) ms"
  all="" comm=""
  for _ in $(seq 1 100); do
    curl -sf "$URL" >"$WORK/after" || true
    all=$(value getppid_all_total "$WORK/after")
    all=${all:-0}
    comm=$(value "getppid_by_comm_total{comm=\"tpe_vm_$engine\"}" "$WORK/after")
    [[ $((${all%.*} - ${base%.*})) == "$N" && "$comm" == "$N" ]] && break
    sleep 0.2
  done
  check "$engine: counting counter grew by $N (before '$base', after '$all')" \
    test "$((${all%.*} - ${base%.*}))" == "$N"
  check "$engine: {comm} counter == $N (got '$comm')" test "$comm" == "$N"
  grep -E '^tracepoint_exporter_(samples_lost|.*lost.*|.*missed.*)' "$WORK/after" | grep -v ' 0$' || true
  check "$engine: no lost samples reported" \
    bash -c "! grep -E '^tracepoint_exporter_samples_lost_total\{.*\} [1-9]' '$WORK/after'"
  # No CPU went offline here: a reopen means the daemon took a live CPU for dead, closed its
  # events and lost the hits until the reopen (Debian 6.1 under TCG before the CheckCpus recheck).
  check "$engine: no CPU reopened (no hotplug happened)" \
    bash -c "! grep -E '^tracepoint_exporter_cpu_reopens_total\{.*\} [1-9]' '$WORK/after'"
  kill "$PID"
  wait "$PID" 2>/dev/null
  PID=""
  echo "--- $engine daemon log"
  cat "$WORK/log.$engine"
  echo "--- $engine scrape (tracepoint_exporter_ self-metrics and the two counters)"
  grep -E '^(getppid_|tracepoint_exporter_)' "$WORK/after"
done
echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
