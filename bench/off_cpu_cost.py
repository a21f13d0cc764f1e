#!/usr/bin/env python3
"""What an off-CPU profile adds per context switch: `stress-ng --switch` (tasks that hand a token
to each other through pipes, so that the machine does little but switch) on every CPU, untraced,
under the exporter's off-CPU profile on each engine (perf: a sched:sched_switch sample with
callchains per switch, paired in user space; bpf: paired in the kernel, no sample), and under a bpftrace off-CPU script (the shape of BCC's
offcputime: the switch-out's time and stack ids in maps by thread, the ns added to (kstack,
ustack) at the switch-in).

    sudo bench/off_cpu_cost.sh [--seconds S] [--rounds R]

Per run the context switches are /proc/stat's `ctxt` delta over S seconds and the busy CPU time
its cpu line's (all but idle and iowait): the CPU time per switch is busy / switches, and a
tracer's cost per switch is that less the untraced run's, the tracer's own threads included
(the exporter's reader, symbolization and rendering are CPU time the switches did not get). The
exporter is scraped for its pprof every 10 s. Rounds rotate the three runs; medians are printed
as Markdown and written to docs/bench/OFF_CPU_COST.md (--out).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")

BPFTRACE = r"""
tracepoint:sched:sched_switch {
  if (args->prev_pid != 0) {
    @start[args->prev_pid] = nsecs;
    @kst[args->prev_pid] = kstack;
    @ust[args->prev_pid] = ustack;
  }
  $s = @start[args->next_pid];
  if ($s) {
    @off[@kst[args->next_pid], @ust[args->next_pid], args->next_comm] = sum(nsecs - $s);
    delete(@start[args->next_pid]);
  }
}
"""


def stat():
    """(context switches, busy CPU seconds) so far: /proc/stat's ctxt, and its cpu line less idle
    and iowait (proc(5))."""
    n, busy = 0, 0.0
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("ctxt "):
                n = int(line.split()[1])
            elif line.startswith("cpu "):
                v = [int(x) for x in line.split()[1:]]
                busy = (sum(v[:8]) - v[3] - v[4]) / CLK_TCK  # user..steal, less idle and iowait
    return n, busy


def run_load(seconds, ncpu):
    """Runs stress-ng --switch for `seconds`: (context switches, busy CPU seconds) meanwhile."""
    n0, b0 = stat()
    subprocess.run(["stress-ng", "--switch", str(ncpu), "--timeout", "%ds" % seconds, "--quiet"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    n1, b1 = stat()
    return n1 - n0, b1 - b0


def wait_http(url, proc, deadline_s=30):
    deadline = time.time() + deadline_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("the exporter did not start")
            time.sleep(0.2)


def traced(kind, binary, seconds, ncpu, port):
    if kind == "none":
        return run_load(seconds, ncpu), 0
    if kind in ("ours", "ours_bpf"):
        work = tempfile.mkdtemp()
        config = os.path.join(work, "config.json")
        with open(config, "w") as f:
            json.dump({"settings": {"ring_buffer_pages": 256},
                       "profiles": [{"name": "off_cpu", "type": "off_cpu",
                                     "engine": "bpf" if kind == "ours_bpf" else "perf",
                                     "labels": [{"name": "comm", "source": "comm"}]}]}, f)
        proc = subprocess.Popen([binary, "--config.file", config, "--web.listen-address", "127.0.0.1:%d" % port],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = "http://127.0.0.1:%d" % port
        wait_http(url + "/metrics", proc)
        scraper_stop = time.time() + seconds

        def scrape_loop():
            while time.time() < scraper_stop:
                time.sleep(min(10, max(0, scraper_stop - time.time())))
                try:
                    urllib.request.urlopen(url + "/debug/pprof/off_cpu", timeout=30).read()
                except OSError:
                    pass
        import threading
        t = threading.Thread(target=scrape_loop)
        t.start()
        try:
            n = run_load(seconds, ncpu)
        finally:
            t.join()
            lost = 0
            for line in urllib.request.urlopen(url + "/metrics", timeout=10).read().decode().splitlines():
                if line.startswith("tracepoint_exporter_samples_lost_total{"):
                    lost += int(float(line.split()[-1]))
            proc.terminate()
            proc.wait(timeout=30)
        return n, lost
    # bpftrace
    script = tempfile.NamedTemporaryFile("w", suffix=".bt", delete=False)
    script.write(BPFTRACE)
    script.close()
    out = tempfile.NamedTemporaryFile("w+", delete=False)
    proc = subprocess.Popen(["bpftrace", script.name], stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while "Attaching" not in open(out.name).read():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("bpftrace did not attach: " + open(out.name).read()[-2000:])
        time.sleep(0.1)
    time.sleep(1)
    try:
        n = run_load(seconds, ncpu)
    finally:
        proc.send_signal(2)  # SIGINT: bpftrace prints its maps and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return n, 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=19480)
    ap.add_argument("--out", default="docs/bench/OFF_CPU_COST.md")
    args = ap.parse_args()
    binary = os.path.join(args.build, "tracepoint_exporter")
    ncpu = os.cpu_count()
    kinds = ["none", "ours", "ours_bpf", "bpftrace"]
    runs = {k: [] for k in kinds}
    lost = []
    for r in range(args.rounds):
        for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
            (n, busy), l = traced(kind, binary, args.seconds, ncpu, args.port)
            print("round %d %s: %d switches (%.0f/s), %.1f CPU s busy%s" % (
                r + 1, kind, n, n / args.seconds, busy, ", %d samples lost" % l if kind.startswith("ours") else ""),
                  file=sys.stderr)
            runs[kind].append((n, busy))
            if kind.startswith("ours"):
                lost.append(l)
    ns_per = {k: statistics.median(busy * 1e9 / n for n, busy in v) for k, v in runs.items()}
    rate = {k: statistics.median(n for n, _ in v) / args.seconds for k, v in runs.items()}
    lines = [
        "| `stress-ng --switch %d`, %d CPUs busy, %d s, %d round(s) | switches/s | CPU ns per switch | added per switch |"
        % (ncpu, ncpu, args.seconds, args.rounds),
        "|---|---|---|---|",
        "| untraced | %.0f | %.0f | |" % (rate["none"], ns_per["none"]),
        "| tracepoint_exporter, off-CPU profile (perf engine), scraped every 10 s | %.0f | %.0f | %.0f ns |"
        % (rate["ours"], ns_per["ours"], ns_per["ours"] - ns_per["none"]),
        "| tracepoint_exporter, off-CPU profile (bpf engine: paired in the kernel), scraped every 10 s | %.0f | %.0f | %.0f ns |"
        % (rate["ours_bpf"], ns_per["ours_bpf"], ns_per["ours_bpf"] - ns_per["none"]),
        "| bpftrace off-CPU script (kstack, ustack by thread; sum at switch-in) | %.0f | %.0f | %.0f ns |"
        % (rate["bpftrace"], ns_per["bpftrace"], ns_per["bpftrace"] - ns_per["none"]),
        "",
        "Ratios of the added ns to bpftrace's: bpf engine %.2f, perf engine %.2f. Samples the perf engine lost "
        "(PERF_RECORD_LOST, all rounds): %d."
        % ((ns_per["ours_bpf"] - ns_per["none"]) / max(ns_per["bpftrace"] - ns_per["none"], 1e-9),
           (ns_per["ours"] - ns_per["none"]) / max(ns_per["bpftrace"] - ns_per["none"], 1e-9), sum(lost)),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Off-CPU profile cost\n\nMeasured by `bench/off_cpu_cost.sh` (%s).\n\n" % time.strftime("%Y-%m-%d")
                    + text)


if __name__ == "__main__":
    main()
