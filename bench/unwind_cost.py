#!/usr/bin/env python3
"""What unwinding user stacks from the code's unwind tables ("unwind": "dwarf") costs, beside
frame pointers and beside perf.

    sudo bench/unwind_cost.sh [--seconds S]

1. Both views at 19 Hz: a CPU profile (cpu-clock, every CPU) and an off-CPU profile, labelled by
   comm, scraped (pprof) as Parca does (back-to-back 10 s windows) and, separately, whole every
   10 s, while stress-ng keeps both CPUs busy and
   Debian's python3.11 runs a Python loop (stripped, no frame pointers: what dwarf is for; the
   one in /usr/bin, not one on PATH, which may be a pyenv build carrying DWARF). The exporter
   with "dwarf" and with "frame_pointer", beside `perf record -F 19 -a --call-graph dwarf` of
   the same two events plus the `perf script` that unwinds and names its samples (ours unwinds
   as it goes). Each row: the tracer's CPU time (user + system, of one CPU) and its RSS.
2. A tracepoint profile at a high rate: raw_syscalls:sys_enter (id == getppid),
   user stacks (getppid() of any task: the loop's are nearly all), the loop (bench/workloads/syscall_loop) paced at 20,000 calls/s: per call, the
   tracer's CPU ns and the loop's CPU ns (the kernel's sample writing is charged to it), for
   "dwarf", "frame_pointer" and `perf record --call-graph dwarf -e raw_syscalls:sys_enter`
   (+ `perf script`), with the untraced loop's ns per call beside them.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

GETPPID = 110


# Debian's own build (-O2, no frame pointers, stripped): what "dwarf" is for.
PYTHON = "/usr/bin/python3.11"


def proc_cpu(pid):
    """Seconds of CPU the process's live threads ran: /proc/PID/task/*/schedstat (ns, the
    scheduler's own sum), not /proc/PID/stat's clock ticks, which at 10 ms are a tenth of what
    0.3 % of a CPU over 30 s amounts to. The threads measured here live as long as the process."""
    ns = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                ns += int(f.read().split()[0])
        except OSError:
            pass  # a thread that exited between the listing and the read
    return ns / 1e9


def rss_kib(pid, field="VmRSS"):
    """KiB of /proc/PID/status's `field`: VmRSS (now) or VmHWM (the peak)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def metric(url, name, labels):
    for line in urllib.request.urlopen(url + "/metrics", timeout=10).read().decode().splitlines():
        if line.startswith(name + "{") and all('%s="%s"' % kv in line for kv in labels.items()):
            return float(line.split()[-1])
    return 0.0


class Exporter:
    def __init__(self, binary, port, config):
        self.work = tempfile.mkdtemp()
        path = os.path.join(self.work, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        self.proc = subprocess.Popen([binary, "--config.file", path, "--web.listen-address", "127.0.0.1:%d" % port],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = "http://127.0.0.1:%d" % port
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/metrics", timeout=2).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the exporter did not start")
                time.sleep(0.2)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def scrape_windows(url, seconds):
    """Both profiles as Parca pulls them: back-to-back windows (?seconds=10), the two at once."""
    import threading
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        w = max(1, min(10, int(round(seconds - (time.monotonic() - t0)))))
        threads = [threading.Thread(target=lambda p=p: urllib.request.urlopen(
            "%s/debug/pprof/%s?seconds=%d" % (url, p, w), timeout=w + 60).read()) for p in ("cpu", "off_cpu")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def scrape_cumulative(url, seconds):
    """Both profiles whole (every stack since the start) every 10 s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(min(10, seconds - (time.monotonic() - t0)))
        for p in ("cpu", "off_cpu"):
            urllib.request.urlopen(url + "/debug/pprof/" + p, timeout=60).read()


def both_views(binary, port, seconds, unwind, warmup, scrape):
    profiles = [{"name": "cpu", "event": "cpu-clock", "frequency_hz": 19, "unwind": unwind,
                 "labels": [{"name": "comm", "source": "comm"}]},
                {"name": "off_cpu", "type": "off_cpu", "unwind": unwind,
                 "labels": [{"name": "comm", "source": "comm"}]}]
    e = Exporter(binary, port, {"profiles": profiles})
    try:
        time.sleep(warmup)  # a continuous profiler's steady state: the profiles hold the load's stacks
        for p in ("cpu", "off_cpu"):  # warm: kallsyms, symbol tables, debug info, unwind tables
            urllib.request.urlopen(e.url + "/debug/pprof/" + p, timeout=60).read()
        c0, t0 = proc_cpu(e.proc.pid), time.monotonic()
        scrape(e.url, seconds)
        cpu = (proc_cpu(e.proc.pid) - c0) / (time.monotonic() - t0)
        whole = metric(e.url, "tracepoint_exporter_profile_unwind_ends_total", {"profile": "cpu", "reason": "outermost"})
        return {"cpu": cpu, "rss": rss_kib(e.proc.pid), "peak": rss_kib(e.proc.pid, "VmHWM"), "outermost": whole}
    finally:
        e.stop()


def perf_record(args, seconds):
    out = tempfile.mktemp(suffix=".data")
    t0 = time.monotonic()
    rec = subprocess.Popen(["perf", "record", "-q", "-o", out] + args + ["--", "sleep", str(seconds)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, ru = os.wait4(rec.pid, 0)
    elapsed = time.monotonic() - t0
    cpu_record = ru.ru_utime + ru.ru_stime
    size = os.path.getsize(out) if os.path.exists(out) else 0
    script = subprocess.Popen(["perf", "script", "-i", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, ru2 = os.wait4(script.pid, 0)
    cpu_script = ru2.ru_utime + ru2.ru_stime
    if os.path.exists(out):
        os.unlink(out)
    return {"cpu": (cpu_record + cpu_script) / elapsed, "record": cpu_record / elapsed, "script": cpu_script / elapsed,
            "rss": max(ru.ru_maxrss, ru2.ru_maxrss), "bytes": size, "cpu_s": cpu_record + cpu_script}


def loop_run(loop, seconds, rate):
    """Starts the loop (one thread, `rate` calls/s): its JSON line comes at its end."""
    return subprocess.Popen([loop, str(seconds), "1", str(rate)], stdout=subprocess.PIPE, text=True)


def loop_finish(p):
    _, _, ru = os.wait4(p.pid, 0)
    out = json.loads(p.stdout.read())
    return out["calls"], ru.ru_utime + ru.ru_stime


def tracepoint(binary, loop, port, seconds, rate, tracer):
    if tracer == "none":
        calls, cpu = loop_finish(loop_run(loop, seconds, rate))
        return {"loop_ns": 1e9 * cpu / calls, "tracer_ns": 0.0, "calls": calls, "samples": 0}
    if tracer.startswith("perf"):
        p = loop_run(loop, seconds + 2, rate)
        time.sleep(1)
        r = perf_record(["-e", "raw_syscalls:sys_enter", "--filter", "id == %d" % GETPPID,
                         "--call-graph", "dwarf", "-a"], seconds)
        calls, _ = loop_finish(p)
        # The loop ran 2 s longer than perf record: its ns per call is not comparable (left out).
        return {"loop_ns": -1, "tracer_ns": 1e9 * r["cpu_s"] / (rate * seconds), "calls": calls, "samples": -1}
    p = loop_run(loop, seconds + 3, rate)
    cfg = {"settings": {"ring_buffer_pages": 2048},
           "profiles": [{"name": "tp", "event": "raw_syscalls:sys_enter", "stack": "user", "unwind": tracer,
                         "filter": "id == %d" % GETPPID}]}
    e = Exporter(binary, port, cfg)
    try:
        c0 = proc_cpu(e.proc.pid)
        s0 = metric(e.url, "tracepoint_exporter_profile_samples_total", {"profile": "tp"})
        time.sleep(seconds)
        c1 = proc_cpu(e.proc.pid)
        s1 = metric(e.url, "tracepoint_exporter_profile_samples_total", {"profile": "tp"})
        lost = metric(e.url, "tracepoint_exporter_samples_lost_total", {})
    finally:
        e.stop()
    calls, cpu = loop_finish(p)
    n = max(s1 - s0, 1)
    return {"loop_ns": 1e9 * cpu / calls, "tracer_ns": 1e9 * (c1 - c0) / n, "calls": calls, "samples": s1 - s0,
            "lost": lost}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=30, help="seconds of profiling before the measured window")
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--port", type=int, default=19481)
    ap.add_argument("--out", default="docs/bench/UNWIND_COST.md")
    args = ap.parse_args()
    binary = os.path.join(args.build, "tracepoint_exporter")
    loop = os.path.join(args.build, "bench/workloads/syscall_loop")
    lines = []
    load = [subprocess.Popen(["stress-ng", "--cpu", str(os.cpu_count()), "--quiet"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL),
            subprocess.Popen([PYTHON, "-c", "while True:\n  sum(range(1000))\n"])]
    try:
        time.sleep(2)
        def ours(unwind, scrape):
            return lambda: both_views(binary, args.port, args.seconds, unwind, args.warmup, scrape)
        rows = [("tracepoint_exporter, `\"unwind\": \"dwarf\"`, 10 s windows", ours("dwarf", scrape_windows)),
                ("tracepoint_exporter, `\"unwind\": \"dwarf\"`, whole profile every 10 s",
                 ours("dwarf", scrape_cumulative)),
                ("tracepoint_exporter, `\"unwind\": \"frame_pointer\"`, 10 s windows",
                 ours("frame_pointer", scrape_windows)),
                ("`perf record -e cpu-clock/freq=19/ -e sched:sched_switch -a --call-graph dwarf` + `perf script`",
                 lambda: perf_record(["-e", "cpu-clock/freq=19/", "-e", "sched:sched_switch", "-a", "--call-graph",
                                      "dwarf"], args.seconds))]
        lines += ["## Both views (CPU and off-CPU profiles) at 19 Hz, %d CPUs busy, %d s after %d s of warm-up, "
                  "scraped as Parca does (back-to-back 10 s windows, `?seconds=10`) or whole every 10 s"
                  % (os.cpu_count(), args.seconds, args.warmup), "",
                  "| tracer | CPU (% of one CPU) | RSS (MiB) | peak RSS (MiB) | notes |", "|---|---|---|---|---|"]
        for name, run in rows:
            r = run()
            print(name, r, file=sys.stderr)
            note = ("%d CPU stacks unwound whole" % r["outermost"] if r["outermost"] else "") if "outermost" in r else (
                "perf record %.3f %% + perf script %.3f %%; perf.data %.1f MiB"
                % (100 * r["record"], 100 * r["script"], r["bytes"] / 2**20))
            lines.append("| %s | %.3f %% | %.1f | %.1f | %s |" % (name, 100 * r["cpu"], r["rss"] / 1024,
                                                               r.get("peak", r["rss"]) / 1024, note))
    finally:
        for p in load:
            p.terminate()
            p.wait()
    lines += ["", "## A tracepoint profile at %d calls/s (raw_syscalls:sys_enter, getppid, user stacks), %d s"
              % (args.rate, 10), "",
              "| tracer | tracer CPU ns per sample | loop CPU ns per call | samples | calls |", "|---|---|---|---|---|"]
    for name, tracer in [("untraced", "none"), ("tracepoint_exporter, dwarf", "dwarf"),
                         ("tracepoint_exporter, frame_pointer", "frame_pointer"),
                         ("`perf record --call-graph dwarf` + `perf script`", "perf")]:
        r = tracepoint(binary, loop, args.port, 10, args.rate, tracer)
        print(name, r, file=sys.stderr)
        lines.append("| %s | %.0f | %s | %s | %d |" % (name, r["tracer_ns"],
                                                     "%.0f" % r["loop_ns"] if r["loop_ns"] >= 0 else "-",
                                                       "%d" % r["samples"] if r["samples"] >= 0 else "-", r["calls"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Unwinding cost\n\nMeasured by `bench/unwind_cost.sh` (%s).\n\n" % time.strftime("%Y-%m-%d") + text)


if __name__ == "__main__":
    main()
