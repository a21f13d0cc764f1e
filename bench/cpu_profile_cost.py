#!/usr/bin/env python3
"""What a continuous CPU profile costs: the exporter with a 19 Hz cpu-clock profile on every CPU,
on each engine, alone and with an off-CPU profile beside it ("both views"), beside
`perf record -F 19 -a -g` collecting the same samples for the same time (and, for both views,
`perf record` of the clock at 19 Hz plus sched:sched_switch with stacks).

    sudo bench/cpu_profile_cost.sh [--seconds S] [--rounds R]

All run while stress-ng keeps every CPU busy (so every timer tick of the clock is a sample:
19 per second per CPU, the idle task being left out). Per tracer and round: its own CPU time
(user + system, /proc/PID/stat for the exporter, wait4's rusage for perf record and its
`sleep`) over S seconds, as a share of one CPU, and its resident memory (VmRSS at the end and
VmHWM for the exporter, ru_maxrss for perf). The exporter is scraped for each profile's pprof
every 10 s, as Parca or Alloy would, and that rendering is part of its CPU time; its first
scrape, which reads /proc/kallsyms (again every 10 minutes) and the symbol tables of the mapped
files, comes before the measured time and is reported apart. The samples' kernel side (the
timer interrupt, the callchain walk or the bpf program's stack walk) is charged to the
interrupted tasks, the same for all. Rounds rotate the tracers; medians are printed as Markdown
and written to docs/bench/CPU_PROFILE_COST.md (--out).
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


def proc_cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14, 15


def proc_status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def run_exporter(binary, seconds, port, scrape_every, engine="perf", off_cpu=False):
    work = tempfile.mkdtemp()
    config = os.path.join(work, "config.json")
    profiles = [{"name": "cpu", "event": "cpu-clock", "engine": engine,
                 "labels": [{"name": "comm", "source": "comm"}]}]
    if off_cpu:  # the off-CPU view, on the same engine
        profiles.append({"name": "off_cpu", "type": "off_cpu", "engine": engine,
                         "labels": [{"name": "comm", "source": "comm"}]})
    names = [p["name"] for p in profiles]
    with open(config, "w") as f:
        json.dump({"profiles": profiles}, f)
    proc = subprocess.Popen([binary, "--config.file", config, "--web.listen-address", "127.0.0.1:%d" % port],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/metrics", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the exporter did not start")
                time.sleep(0.2)
        # Warm-up: the first scrape reads /proc/kallsyms and the mapped files' symbol tables, which
        # later scrapes reuse (kallsyms is read again every 10 minutes or when a kernel address
        # is new); its CPU time is reported apart.
        first0 = proc_cpu_seconds(proc.pid)
        if scrape_every:
            for name in names:
                urllib.request.urlopen(url + "/debug/pprof/" + name, timeout=30).read()
        cpu0 = proc_cpu_seconds(proc.pid)
        first = cpu0 - first0
        t0 = time.monotonic()
        scrapes = 0
        while time.monotonic() - t0 < seconds:
            time.sleep(min(scrape_every or seconds, seconds - (time.monotonic() - t0)))
            if scrape_every:
                for name in names:
                    body = urllib.request.urlopen(url + "/debug/pprof/" + name, timeout=30).read()
                    scrapes += len(body) > 0
        cpu = proc_cpu_seconds(proc.pid) - cpu0
        elapsed = time.monotonic() - t0
        rss = proc_status_kib(proc.pid, "VmRSS")
        hwm = proc_status_kib(proc.pid, "VmHWM")
        samples = 0
        for line in urllib.request.urlopen(url + "/metrics", timeout=10).read().decode().splitlines():
            if line.startswith('tracepoint_exporter_profile_samples_total{profile="cpu"}'):
                samples = int(float(line.split()[-1]))
        return {"cpu": cpu / elapsed, "rss": rss, "hwm": hwm, "samples": samples, "scrapes": scrapes,
                "first": first}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_perf(seconds, off_cpu=False):
    out = tempfile.mktemp(suffix=".data")
    events = ["-F", "19"] if not off_cpu else ["-e", "cpu-clock/freq=19/", "-e", "sched:sched_switch"]
    proc = subprocess.Popen(["perf", "record"] + events + ["-a", "-g", "-o", out, "--", "sleep", str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    _, status, ru = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - t0
    size = os.path.getsize(out) if os.path.exists(out) else 0
    if os.path.exists(out):
        os.unlink(out)
    return {"cpu": (ru.ru_utime + ru.ru_stime) / elapsed, "rss": ru.ru_maxrss, "hwm": ru.ru_maxrss,
            "bytes": size}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--port", type=int, default=19479)
    ap.add_argument("--scrape-every", type=int, default=10, help="seconds between pprof scrapes; 0: none")
    ap.add_argument("--out", default="docs/bench/CPU_PROFILE_COST.md")
    args = ap.parse_args()
    binary = os.path.join(args.build, "tracepoint_exporter")
    ncpu = os.cpu_count()
    load = subprocess.Popen(["stress-ng", "--cpu", str(ncpu), "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    scraped = "scraped every %d s" % args.scrape_every if args.scrape_every else "not scraped"
    tracers = [  # (row, run)
        ("tracepoint_exporter, cpu-clock profile at 19 Hz (perf engine), " + scraped,
         lambda: run_exporter(binary, args.seconds, args.port, args.scrape_every, "perf")),
        ("tracepoint_exporter, cpu-clock profile at 19 Hz (bpf engine), " + scraped,
         lambda: run_exporter(binary, args.seconds, args.port, args.scrape_every, "bpf")),
        ("`perf record -F 19 -a -g`", lambda: run_perf(args.seconds)),
        ("tracepoint_exporter, both views (CPU and off-CPU profiles) on the perf engine, " + scraped,
         lambda: run_exporter(binary, args.seconds, args.port, args.scrape_every, "perf", off_cpu=True)),
        ("tracepoint_exporter, both views (CPU and off-CPU profiles) on the bpf engine, " + scraped,
         lambda: run_exporter(binary, args.seconds, args.port, args.scrape_every, "bpf", off_cpu=True)),
        ("`perf record -e cpu-clock/freq=19/ -e sched:sched_switch -a -g`", lambda: run_perf(args.seconds, True)),
    ]
    results = {row: [] for row, _ in tracers}
    try:
        time.sleep(2)
        for r in range(args.rounds):
            order = tracers[r % len(tracers):] + tracers[:r % len(tracers)]
            for row, run in order:
                res = run()
                print("round %d %s: %s" % (r + 1, row, res), file=sys.stderr)
                results[row].append(res)
    finally:
        load.terminate()
        load.wait()
    med = lambda rows, k: statistics.median(x[k] for x in rows)
    lines = [
        "| %d CPUs busy, %d s, %d round(s) | CPU (%% of one CPU) | RSS at the end (MiB) | peak RSS (MiB) |"
        % (ncpu, args.seconds, args.rounds),
        "|---|---|---|---|",
    ]
    for row, _ in tracers:
        rows = results[row]
        lines.append("| %s | %.3f %% | %.1f | %.1f |" % (row, 100 * med(rows, "cpu"), med(rows, "rss") / 1024,
                                                       med(rows, "hwm") / 1024))
    ours = results[tracers[0][0]]
    bpf = results[tracers[1][0]]
    perfs = results[tracers[2][0]]
    both = results[tracers[3][0]]
    perf_both = results[tracers[5][0]]
    lines += [
        "",
        "Exporter (perf engine): %d samples in the last round (%.1f/s; %d CPUs x 19 Hz = %d/s); bpf engine: %d; "
        "perf.data: %.1f MiB." % (ours[-1]["samples"], ours[-1]["samples"] / args.seconds, ncpu, 19 * ncpu,
                                  bpf[-1]["samples"], perfs[-1]["bytes"] / 2**20),
        "Ratios, exporter / perf record (CPU): CPU profile %.2f (perf engine), %.2f (bpf engine); both views %.2f "
        "(perf engine), %.2f (bpf engine)."
        % (med(ours, "cpu") / max(med(perfs, "cpu"), 1e-9), med(bpf, "cpu") / max(med(perfs, "cpu"), 1e-9),
           med(both, "cpu") / max(med(perf_both, "cpu"), 1e-9),
           med(results[tracers[4][0]], "cpu") / max(med(perf_both, "cpu"), 1e-9)),
        "The exporter's first scrape (before the measured time: it reads /proc/kallsyms and the symbol tables "
        "later scrapes reuse) took %.2f s of CPU (median, perf engine)." % med(ours, "first"),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# CPU profile cost\n\nMeasured by `bench/cpu_profile_cost.sh` (%s).\n\n" % time.strftime("%Y-%m-%d")
                    + text)


if __name__ == "__main__":
    main()
