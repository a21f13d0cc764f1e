#!/usr/bin/env bash
# The container image run as deploy/kubernetes/daemonset.yaml runs it: the ConfigMap's config, the
# container's args, its securityContext (capabilities dropped but those it adds, a read-only
# root), the host PID namespace and the host's tracefs. Podman with runc (scripts/podman.sh).
#   tests/image/smoke_test.sh [IMAGE]    default localhost/tracepoint-exporter:latest (scripts/image.sh)
# Checks: /metrics is served, a counter moves, every metric of the ConfigMap reports its engine,
# a SIGHUP reload works inside, --security.drop-capabilities works inside, a clean stop.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
IMAGE=${1:-localhost/tracepoint-exporter:latest}
YAML=$SRC/deploy/kubernetes/daemonset.yaml
WORK=$(mktemp -d)
source "$SRC/scripts/podman.sh"
source "$SRC/tests/testing/daemon.sh"
NAMES=()
cleanup() {
  for n in "${NAMES[@]}"; do tpe_podman rm -f -t 2 "$n" >/dev/null 2>&1; done
  rm -rf "$WORK"
}
trap cleanup EXIT

if [[ $(id -u) -ne 0 ]]; then
  echo "image smoke test skipped: needs root (podman with the host's tracefs and PID namespace)"
  [[ "${TPE_REQUIRE_KERNEL:-}" == 1 ]] && { echo "TPE_REQUIRE_KERNEL=1: a skip is a failure"; exit 1; }
  exit 0
fi
tpe_podman image exists "$IMAGE" || { echo "no image $IMAGE: run scripts/image.sh first"; echo "0 passed, 1 failed"; exit 1; }

# What the DaemonSet says, read from its YAML: the ConfigMap's config.json, the container's args,
# the capabilities it adds, readOnlyRootFilesystem and the tracefs hostPath.
mkdir -p "$WORK/config"
awk '/^  config.json: \|/{on=1; next} on && /^---/{exit} on{sub(/^    /, ""); print}' "$YAML" >"$WORK/config/config.json"
mapfile -t ARGS < <(sed -n 's/^ *args: \[\(.*\)\]$/\1/p' "$YAML" | tr ',' '\n' | sed 's/^ *"//; s/" *$//')
CAPS=$(sed -n 's/^ *add: \[\(.*\)\]$/\1/p' "$YAML" | tr -d ' ')
RO=$(sed -n 's/^ *readOnlyRootFilesystem: *//p' "$YAML")
HOSTPID=$(sed -n 's/^ *hostPID: *//p' "$YAML")
TRACEFS=$(awk '/name: tracefs/{getline; if ($0 ~ /hostPath/) {sub(/.*path: */, ""); sub(/}.*/, ""); print}}' "$YAML")
check "the DaemonSet's config, args and securityContext were read" \
  bash -c "python3 -m json.tool '$WORK/config/config.json' >/dev/null && [[ -n '$CAPS' && '${#ARGS[@]}' -ge 1 && '$RO' == true && '$HOSTPID' == true && '$TRACEFS' == /sys/kernel/tracing ]]"
echo "DaemonSet: args ${ARGS[*]}; capabilities $CAPS; read-only root $RO; hostPID $HOSTPID; tracefs $TRACEFS"
PORT=$(sed -n 's/.*--web.listen-address=[^:]*:\([0-9]*\).*/\1/p' <<<"${ARGS[*]}")

# run NAME EXTRA_ARG...: the container as the DaemonSet runs it (host network stands in for the
# pod network: the daemon listens on the port its args name).
run() {
  local name=$1
  shift
  NAMES+=("$name")
  tpe_podman run -d --name "$name" --pid=host --network=host --read-only "${TPE_PODMAN_ULIMITS[@]}" \
    --cap-drop=ALL --cap-add="$CAPS" \
    -v "$TRACEFS:/sys/kernel/tracing" -v "$WORK/config:/etc/tracepoint_exporter:ro" \
    "$IMAGE" "${ARGS[@]}" "$@" >/dev/null
}
wait_serving() {  # PORT NAME
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$1/metrics" >"$WORK/scrape" 2>/dev/null && return 0
    [[ $(tpe_podman inspect -f '{{.State.Running}}' "$2" 2>/dev/null) == true ]] || return 1
    sleep 0.2
  done
  return 1
}
counter() { sed -n "s/^$1 \([0-9.e+]*\)$/\1/p" "$WORK/scrape"; }

if curl -s "http://127.0.0.1:$PORT/" >/dev/null 2>&1; then
  echo "port $PORT is in use on this host: stop what listens there"; echo "0 passed, 1 failed"; exit 1
fi
run tpe-smoke
check "the container serves /metrics on :$PORT" wait_serving "$PORT" tpe-smoke
wait_serving "$PORT" tpe-smoke || tpe_podman logs tpe-smoke 2>&1 | tail -20
a=$(counter context_switches_total)
sleep 1
curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/scrape"
b=$(counter context_switches_total)
check "context_switches_total moves ($a -> $b)" bash -c "[[ -n '$a' && -n '$b' ]] && python3 -c 'import sys; sys.exit(0 if float(\"$b\") > float(\"$a\") else 1)'"
missing=""
for m in $(python3 -c 'import json,sys; print(" ".join(m["name"] for m in json.load(open(sys.argv[1]))["metrics"]))' "$WORK/config/config.json"); do
  grep -qE "^tracepoint_exporter_metric_info\{.*engine=\"(perf|bpf)\".*metric=\"$m\"|^tracepoint_exporter_metric_info\{.*metric=\"$m\".*engine=\"(perf|bpf)\"" "$WORK/scrape" || missing+=" $m"
done
check "every metric of the ConfigMap reports its engine (missing:${missing:- none})" test -z "$missing"
grep '^tracepoint_exporter_metric_info' "$WORK/scrape"

tpe_podman kill --signal HUP tpe-smoke >/dev/null
reloaded=0
for _ in $(seq 1 50); do
  tpe_podman logs tpe-smoke 2>&1 | grep -q 'reloaded /etc/tracepoint_exporter/config.json' && { reloaded=1; break; }
  sleep 0.2
done
check "SIGHUP reloads the config inside the container" test $reloaded == 1
check "still serving after the reload" wait_serving "$PORT" tpe-smoke

tpe_podman stop -t 10 tpe-smoke >/dev/null
rc=$(tpe_podman inspect -f '{{.State.ExitCode}}' tpe-smoke)
tpe_podman logs tpe-smoke >"$WORK/log" 2>&1
check "a stop (SIGTERM) shuts down and exits 0 (exit code $rc)" bash -c "[[ $rc == 0 ]] && grep -q 'received SIGTERM, shutting down' '$WORK/log'"

# --security.drop-capabilities inside: the perf events and BPF programs stay open and counting.
run tpe-smoke-dropcaps --security.drop-capabilities
check "with --security.drop-capabilities the container serves /metrics" wait_serving "$PORT" tpe-smoke-dropcaps
tpe_podman logs tpe-smoke-dropcaps >"$WORK/log" 2>&1
check "it says it dropped its capabilities" grep -q 'dropped all capabilities' "$WORK/log"
a=$(counter context_switches_total)
sleep 1
curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/scrape"
b=$(counter context_switches_total)
check "context_switches_total moves without capabilities ($a -> $b)" bash -c "[[ -n '$a' && -n '$b' ]] && python3 -c 'import sys; sys.exit(0 if float(\"$b\") > float(\"$a\") else 1)'"
tpe_podman logs tpe-smoke-dropcaps 2>&1 | tail -3

echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
