#!/usr/bin/env bash
# Runs tracepoint_exporter's run-queue latency histogram and a bpftrace runqlat-style script at
# the same time on the same workload (perf bench sched messaging), then compares them bucket by
# bucket. Both use the same definition: start at sched_wakeup/sched_wakeup_new (pid) or at a
# sched_switch that leaves the task runnable (prev_state R = 0, or R+ = 256 when preempted); end
# at the sched_switch that runs it (next_pid). Writes docs/bench/RUNQLAT_COMPARISON.md.
#   bench/runqlat_compare.sh [SECONDS]     (root; installs bpftrace and linux-perf if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/testing/daemon.sh
SECONDS_TO_RUN=${1:-10}
bash scripts/build.sh >/dev/null
for p in bpftrace linux-perf; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

cat >"$WORK/config.json" <<'JSON'
{ "settings": {"ring_buffer_pages": 256},
  "metrics": [ { "name": "runqueue_latency_seconds", "help": "wakeup/requeue to run", "type": "latency",
  "start": [ {"event": "sched:sched_wakeup", "key": ["pid"]}, {"event": "sched:sched_wakeup_new", "key": ["pid"]},
             {"event": "sched:sched_switch", "key": ["prev_pid"], "filter": "prev_state == 0 || prev_state == 256"} ],
  "end": {"event": "sched:sched_switch", "key": ["next_pid"]},
  "buckets": {"type": "exp2", "min": 1e-6, "max": 4.0} } ] }
JSON
cat >"$WORK/runqlat.bt" <<'BT'
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @qtime[args->pid] = nsecs; }
tracepoint:sched:sched_switch {
  if (args->prev_state == 0 || args->prev_state == 256) { @qtime[args->prev_pid] = nsecs; }
  $ns = @qtime[args->next_pid];
  if ($ns) { @usecs = hist((nsecs - $ns) / 1000); }
  delete(@qtime[args->next_pid]);
}
BT

# Our daemon first (it sees everything bpftrace sees), then bpftrace; both stop together: the
# scrape and bpftrace's SIGINT are back to back.
start_daemon build/tracepoint_exporter "$WORK/config.json" "$WORK/tpe.log" || { cat "$WORK/tpe.log"; exit 1; }
TPE=$DAEMON_PID PORT=$DAEMON_PORT
bpftrace "$WORK/runqlat.bt" >"$WORK/bpftrace.out" 2>&1 &
BPF=$!
for _ in $(seq 1 100); do grep -q Attaching "$WORK/bpftrace.out" && break; sleep 0.1; done
END=$((SECONDS + SECONDS_TO_RUN))
while ((SECONDS < END)); do perf bench sched messaging -g 4 -l 200 >/dev/null 2>&1; done
kill -INT $BPF
sleep 0.3  # our reader drains within 100 ms + the reorder window; bpftrace prints its maps
curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/scrape"
wait $BPF || true
kill -TERM $TPE; wait $TPE || true

# A second run of the exporter alone on the same workload: shows the observer effect of
# bpftrace's BPF programs (they run before perf stamps the exporter's samples).
start_daemon build/tracepoint_exporter "$WORK/config.json" "$WORK/tpe2.log" || { cat "$WORK/tpe2.log"; exit 1; }
TPE=$DAEMON_PID PORT=$DAEMON_PORT
END=$((SECONDS + SECONDS_TO_RUN))
while ((SECONDS < END)); do perf bench sched messaging -g 4 -l 200 >/dev/null 2>&1; done
sleep 0.3
curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/scrape_alone"
kill -TERM $TPE; wait $TPE || true

python3 - "$WORK/bpftrace.out" "$WORK/scrape" "$SECONDS_TO_RUN" "$WORK/scrape_alone" >docs/bench/RUNQLAT_COMPARISON.md <<'PY'
import re, sys, platform, subprocess
bt_text, scrape, secs = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
# bpftrace: [lo, hi) in integer microseconds; [0] and [1] are single values.
bt = {}
for m in re.finditer(r'^\[(\d+)(?:, (\d+)(K|M)?)?\)?\]?\s+(\d+) \|', bt_text, re.M):
    lo = int(m.group(1)); cnt = int(m.group(4))
    k = 0 if lo <= 1 else lo.bit_length() - 1   # [2^k, 2^(k+1)) µs
    bt[k] = bt.get(k, 0) + cnt
# bpftrace prints K/M suffixes for large bounds: handle those lines too.
for m in re.finditer(r'^\[(\d+)([KM]), (\d+)([KM])\)\s+(\d+) \|', bt_text, re.M):
    mult = {'K': 1024, 'M': 1024 * 1024}
    lo = int(m.group(1)) * mult[m.group(2)]
    bt[lo.bit_length() - 1] = bt.get(lo.bit_length() - 1, 0) + int(m.group(5))
# ours: cumulative le buckets in seconds → per bucket; (2^k, 2^(k+1)] µs ↔ bpftrace [2^k, 2^(k+1)).
def parse(text):
    cum = []
    for m in re.finditer(r'^runqueue_latency_seconds_bucket\{le="([^"]+)"\} (\d+)', text, re.M):
        cum.append((float('inf') if m.group(1) == '+Inf' else float(m.group(1)), int(m.group(2))))
    out, prev = {}, 0
    for le, c in cum:
        n = c - prev; prev = c
        if le == float('inf'): k = max(out) + 1 if out else 0
        else:
            us = round(le * 1e6)
            k = 0 if us <= 2 else (us.bit_length() - 2)   # le=2^(k+1) µs → k; le=1,2 µs → bucket 0
        out[k] = out.get(k, 0) + n
    return out
ours = parse(scrape)
alone = parse(open(sys.argv[4]).read())
def label(k):
    return "< 2 µs" if k == 0 else f"[{2**k}, {2**(k+1)}) µs"
kernel = platform.release()
tot_bt, tot_us = sum(bt.values()), sum(ours.values())
print("# Run-queue latency: tracepoint_exporter vs bpftrace (runqlat-style), same workload, same time\n")
print(f"Generated by `bench/runqlat_compare.sh {secs}` on Linux {kernel}, {subprocess.getoutput('nproc')} CPUs; workload: "
      f"`perf bench sched messaging -g 4 -l 200` in a loop for {secs} s. Both tools traced the same events at the same time.\n")
print("| bucket | bpftrace | tracepoint_exporter (same run) | ratio | tracepoint_exporter alone (next run) |\n|---|---:|---:|---:|---:|")
for k in sorted(set(bt) | set(ours) | set(alone)):
    a, b, c = bt.get(k, 0), ours.get(k, 0), alone.get(k, 0)
    r = f"{b / a:.3f}" if a else "-"
    print(f"| {label(k)} | {a} | {b} | {r} | {c} |")
r = f"{tot_us / tot_bt:.4f}" if tot_bt else "-"
print(f"| **total** | **{tot_bt}** | **{tot_us}** | **{r}** | **{sum(alone.values())}** |\n")
print("In the same run, the exporter's smallest latencies sit one bucket higher than bpftrace's: the kernel runs a "
      "tracepoint's BPF programs before perf stamps its samples (perf_trace_run_bpf_submit), and bpftrace's "
      "sched_switch program (map lookup, hist, delete) is heavier than its sched_wakeup one, so its run time is added "
      "to the exporter's end timestamps. Alone (last column), the exporter's low buckets have bpftrace's shape.\n")
sw = re.search(r'^tracepoint_exporter_samples_total\{event="sched:sched_switch",filter=""\} (\d+)', scrape, re.M)
if sw and tot_bt > int(sw.group(1)):
    print(f"Open question, measured: bpftrace recorded {tot_bt} pairs, more than the {sw.group(1)} sched_switch samples the "
          "exporter received (none lost) over a window that contains bpftrace's. Perf delivered fewer sched_switch "
          "events than the BPF program saw while both were attached. One candidate, not confirmed: "
          "perf_trace_run_bpf_submit() skips perf delivery of an event when an attached BPF program returns 0.\n")
print("tracepoint_exporter's own accounting of the run (self-metrics):\n")
print("```")
for line in scrape.splitlines():
    if re.match(r'^tracepoint_exporter_(samples_lost_total|samples_total|latency_unmatched_total|ring_lost_samples_total)', line):
        print(line)
print("```\n")
print("Bucket edges differ only at exact boundaries: bpftrace's `hist()` puts integer microseconds in [2^k, 2^(k+1)); "
      "tracepoint_exporter's Prometheus buckets hold nanosecond values in (2^k µs, 2^(k+1) µs]. The exporter starts "
      "before bpftrace attaches and is scraped 0.3 s after bpftrace is stopped, so it may count slightly more at the "
      "edges; every one of its ends is accounted for above (observations + no_start = sched_switch samples).")
PY
cat docs/bench/RUNQLAT_COMPARISON.md
