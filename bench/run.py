#!/usr/bin/env python3
"""Side-by-side tracer overhead on one machine, in one run (see bench/run.sh).

For each workload and tracer: the workload's rate and its ratio to the untraced baseline, the
tracer's CPU seconds per million events (utime+stime from /proc/<pid>/stat), events lost
(checked against the workload's own exact call count), peak RSS (VmHWM) and the tracer's
wakeups per second (voluntary context switches of all its threads). Writes the part of
docs/PERFORMANCE.md below its GENERATED_MARKER line (write_report: the text above it is kept).
"""
import argparse, json, os, platform, re, signal, subprocess, sys, tempfile, time, urllib.request

TICK = os.sysconf("SC_CLK_TCK")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK  # utime, stime (fields 14, 15)


def proc_status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def proc_wakeups(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            for line in open(f"/proc/{pid}/task/{t}/status"):
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


class Tracer:
    """A tracer process running system-wide while the workload runs."""

    def __init__(self, name, argv, ready=None, env=None):
        self.name, self.argv, self.ready = name, argv, ready
        self.out = tempfile.NamedTemporaryFile("w+", delete=False)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=self.out, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 30
        while self.ready and time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {open(self.out.name).read()[-2000:]}")
            if re.search(self.ready, open(self.out.name).read()):
                break
            time.sleep(0.05)
        time.sleep(1.0)  # every tracer gets the same settling time after it says it is ready
        self.cpu0, self.wake0 = proc_cpu(self.proc.pid), proc_wakeups(self.proc.pid)
        self.t0 = time.time()

    def sample(self):
        pid = self.proc.pid
        self.cpu = proc_cpu(pid) - self.cpu0
        self.wakeups = (proc_wakeups(pid) - self.wake0) / (time.time() - self.t0)
        self.rss_kib = proc_status(pid, "VmHWM")

    def stop(self, sig=signal.SIGINT):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=120)
        return open(self.out.name).read()


class Exporter(Tracer):
    def __init__(self, name, build, config, pages=64):
        self.cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump({"settings": {"ring_buffer_pages": pages}, "metrics": config}, self.cfg)
        self.cfg.close()
        super().__init__(name, [f"{build}/tracepoint_exporter", f"--config.file={self.cfg.name}",
                                "--web.listen-address=127.0.0.1:0"])

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=self.out, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline and not self.port:
            m = re.search(r"\(port (\d+)\)", open(self.out.name).read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError(open(self.out.name).read())
            time.sleep(0.05)
        time.sleep(1.0)
        self.cpu0, self.wake0, self.t0 = proc_cpu(self.proc.pid), proc_wakeups(self.proc.pid), time.time()

    def scrape(self):
        time.sleep(0.3)  # the reader drains every 100 ms
        return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read().decode()


def value(scrape, pattern):
    total, found = 0.0, False
    for line in scrape.splitlines():
        if not line.startswith("#") and re.match(pattern, line):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


def run_loop(build, seconds, threads, rate=0):
    out = subprocess.run([f"{build}/bench/workloads/syscall_loop", str(seconds), str(threads), str(rate)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


ENTER = "syscalls:sys_enter_getppid"
EXIT = "syscalls:sys_exit_getppid"
COMM = [{"name": "comm", "source": "comm"}]
LAT = {"name": "getppid_latency_seconds", "type": "latency", "start": {"event": ENTER, "key": ["common_pid"]},
       "end": {"event": EXIT, "key": ["common_pid"]}, "buckets": {"type": "exp2", "min": 1e-7, "max": 1.0},
       "engine": "perf"}
LAT_BPF = dict(LAT, engine="bpf")
COMM_PERF = {"name": "c_total", "type": "counter", "event": ENTER, "labels": COMM, "engine": "perf"}
COMM_BPF = dict(COMM_PERF, engine="bpf")


def tracers_w1(build, shm):
    bt_hist = ("tracepoint:syscalls:sys_enter_getppid { @s[tid] = nsecs; } "
               "tracepoint:syscalls:sys_exit_getppid /@s[tid]/ { @h = hist(nsecs - @s[tid]); delete(@s[tid]); }")
    return [
        ("perf stat", lambda: Tracer("perf stat", ["perf", "stat", "-a", "-e", ENTER], None)),
        ("perf record -c 1", lambda: Tracer("perf record", ["perf", "record", "-a", "-c", "1", "-m", "64", "-e", ENTER,
                                                             "-o", f"{shm}/perf.data"], None)),
        ("bpftrace count()", lambda: Tracer("bpftrace", ["bpftrace", "-e", "tracepoint:syscalls:sys_enter_getppid { @ = count(); }"], "Attaching")),
        ("bpftrace @[comm] = count()", lambda: Tracer("bpftrace", ["bpftrace", "-e", "tracepoint:syscalls:sys_enter_getppid { @[comm] = count(); }"], "Attaching")),
        ("bpftrace enter→exit hist()", lambda: Tracer("bpftrace", ["bpftrace", "-e", bt_hist], "Attaching")),
        ("exporter: counting-mode counter", lambda: Exporter("exporter", build, [{"name": "c_total", "type": "counter", "event": ENTER}])),
        ("exporter: sampled counter {comm}", lambda: Exporter("exporter", build, [COMM_PERF])),
        ("exporter: enter→exit latency histogram", lambda: Exporter("exporter", build, [LAT])),
        ("exporter bpf: counter {comm}", lambda: Exporter("exporter", build, [COMM_BPF])),
        ("exporter bpf: enter→exit latency histogram", lambda: Exporter("exporter", build, [LAT_BPF])),
    ]


def observed(name, tracer, out, scrape, truth):
    """Events the tracer counted, for the loss check against the workload's exact count."""
    if name.startswith("perf stat"):
        m = re.search(r"([\d,.]+)\s+syscalls:sys_enter_getppid", out)
        return int(m.group(1).replace(",", "").replace(".", "")) if m else None
    if name.startswith("perf record"):
        m = re.search(r"\((\d+) samples\)", out)
        return int(m.group(1)) if m else None
    if name.startswith("bpftrace count"):
        m = re.search(r"^@: (\d+)", out, re.M)
        return int(m.group(1)) if m else None
    if name.startswith("bpftrace @[comm]"):
        m = re.search(r"^@\[tpe_bench_loop\]: (\d+)", out, re.M)
        return int(m.group(1)) if m else None
    if name.startswith("bpftrace"):
        return sum(int(c) for c in re.findall(r"^\[.*?\)?\]?\s+(\d+) \|", out, re.M))
    if "latency" in name:
        v = value(scrape, r"getppid_latency_seconds_count")
        return int(v) if v is not None else None
    if "{comm}" in name:
        v = value(scrape, r'c_total\{comm="tpe_bench_loop"\}')
        return int(v) if v is not None else None
    v = value(scrape, r"c_total ")
    return int(v) if v is not None else None


def measure(name, make, build, seconds, threads, rate=0):
    t = make() if make else None
    if t:
        t.start()
    w = run_loop(build, seconds, threads, rate)
    row = {"tool": name, "rate": w["rate"], "calls": w["calls"]}
    if t:
        t.sample()
        scrape = t.scrape() if isinstance(t, Exporter) else ""
        out = t.stop(signal.SIGTERM if isinstance(t, Exporter) else signal.SIGINT)
        seen = observed(name, t, out, scrape, w["calls"])
        lost = None if seen is None else max(0, w["calls"] - seen)
        if isinstance(t, Exporter):
            lost_self = value(scrape, r"tracepoint_exporter_samples_lost_total")
            row["lost_self"] = lost_self
        row.update(cpu_per_m=t.cpu / (w["calls"] / 1e6), lost=lost, seen=seen, rss_mib=t.rss_kib / 1024,
                   wakeups=t.wakeups, cpu=t.cpu)
    return row


def fmt_lost(r):
    return "?" if r.get("lost") is None else f"{r['lost']:,}"


def fmt_rows(rows, base):
    out = ["| tracer | calls/s | × baseline | CPU s per M events | lost | peak RSS MiB | wakeups/s |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "cpu" not in r:
            out.append(f"| {r['tool']} | {r['rate']:,.0f} | 1.00 | - | - | - | - |")
            continue
        out.append(f"| {r['tool']} | {r['rate']:,.0f} | {r['rate'] / base:.2f} | {r['cpu_per_m']:.3f} | {fmt_lost(r)} | "
                   f"{r['rss_mib']:.1f} | {r['wakeups']:.0f} |")
    return "\n".join(out)


def w2_pipe(build, shm, quick):
    loops = "100000" if quick else "300000"
    def bench():
        out = subprocess.run(["perf", "bench", "sched", "pipe", "-l", loops], capture_output=True, text=True).stdout
        return float(re.search(r"([\d.]+) ops/sec", out).group(1))
    events = ["-e", "sched:sched_switch", "-e", "sched:sched_waking"]
    tools = [
        ("baseline", None),
        ("perf stat", lambda: Tracer("perf stat", ["perf", "stat", "-a"] + events, None)),
        ("perf record -c 1", lambda: Tracer("perf record", ["perf", "record", "-a", "-c", "1", "-m", "64"] + events + ["-o", f"{shm}/perf2.data"], None)),
        ("bpftrace count()", lambda: Tracer("bpftrace", ["bpftrace", "-e", "tracepoint:sched:sched_switch, tracepoint:sched:sched_waking { @[probe] = count(); }"], "Attaching")),
        ("exporter: counting-mode counters", lambda: Exporter("exporter", build, [
            {"name": "a_total", "type": "counter", "event": "sched:sched_switch"},
            {"name": "b_total", "type": "counter", "event": "sched:sched_waking"}])),
        ("exporter: sampled counters {comm}", lambda: Exporter("exporter", build, [
            {"name": "a_total", "type": "counter", "event": "sched:sched_switch", "labels": COMM, "engine": "perf"},
            {"name": "b_total", "type": "counter", "event": "sched:sched_waking", "labels": COMM, "engine": "perf"}])),
        ("exporter bpf: counters {comm}", lambda: Exporter("exporter", build, [
            {"name": "a_total", "type": "counter", "event": "sched:sched_switch", "labels": COMM, "engine": "bpf"},
            {"name": "b_total", "type": "counter", "event": "sched:sched_waking", "labels": COMM, "engine": "bpf"}])),
    ]
    rows = []
    for name, make in tools:
        t = make() if make else None
        if t:
            t.start()
        ops = bench()
        row = {"tool": name, "ops": ops}
        if t:
            t.sample()
            scrape = t.scrape() if isinstance(t, Exporter) else ""
            t.stop(signal.SIGTERM if isinstance(t, Exporter) else signal.SIGINT)
            row.update(cpu=t.cpu, rss=t.rss_kib / 1024, wakeups=t.wakeups,
                       lost=value(scrape, r"tracepoint_exporter_samples_lost_total") if scrape else None)
        rows.append(row)
    base = rows[0]["ops"]
    out = ["| tracer | pipe ops/s | × baseline | tracer CPU s | lost (exporter self-metric) | peak RSS MiB | wakeups/s |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "cpu" not in r:
            out.append(f"| {r['tool']} | {r['ops']:,.0f} | 1.00 | - | - | - | - |")
        else:
            lost = "-" if r["lost"] is None else f"{r['lost']:,.0f}"
            out.append(f"| {r['tool']} | {r['ops']:,.0f} | {r['ops'] / base:.2f} | {r['cpu']:.2f} | {lost} | {r['rss']:.1f} | {r['wakeups']:.0f} |")
    return "\n".join(out)


def w3_ladder(build, shm, quick):
    rates = [250e3, 500e3, 600e3, 700e3, 800e3, 900e3, 1e6, 1.5e6, 0]
    secs = 1.5 if quick else 3
    tools = [("perf record -c 1 -m 64", lambda: Tracer("perf record", ["perf", "record", "-a", "-c", "1", "-m", "64", "-e", ENTER, "-o", f"{shm}/perf3.data"], None)),
             ("exporter sampled {comm}, 64 pages", lambda: Exporter("exporter", build, [COMM_PERF], pages=64)),
             ("exporter bpf {comm}", lambda: Exporter("exporter", build, [COMM_BPF]))]
    lines = ["| tracer | target calls/s | achieved calls/s | lost |", "|---|---:|---:|---:|"]
    ceilings, ladder_rows = {}, []
    for name, make in tools:
        best = 0
        for rate in rates:
            kind = "perf record -c 1" if name.startswith("perf") else "exporter: sampled counter {comm}"
            r = measure(kind, make, build, secs, 1, rate)
            target = "max" if rate == 0 else f"{rate:,.0f}"
            lines.append(f"| {name} | {target} | {r['rate']:,.0f} | {fmt_lost(r)} |")
            who = "perf" if name.startswith("perf") else "bpf" if "bpf" in name else "exporter"
            ladder_rows.append((who, rate, r["lost"]))
            if r["lost"] == 0:
                best = max(best, r["rate"])
            elif r["lost"]:
                break
        ceilings[name] = best
    return "\n".join(lines), ceilings, ladder_rows


def w4_burst(build, shm):
    tools = [("perf record -c 1", lambda: Tracer("perf record", ["perf", "record", "-a", "-c", "1", "-m", "64", "-e", ENTER, "-o", f"{shm}/perf4.data"], None)),
             ("exporter: sampled counter {comm}", lambda: Exporter("exporter", build, [COMM_PERF])),
             ("exporter bpf: counter {comm}", lambda: Exporter("exporter", build, [COMM_BPF]))]
    lines = ["| tracer | calls in 100 ms burst | lost |", "|---|---:|---:|"]
    bpf_lost = None
    for name, make in tools:
        r = measure(name, make, build, 0.1, 1)
        lines.append(f"| {name} | {r['calls']:,} | {fmt_lost(r)} |")
        if "bpf" in name:
            bpf_lost = r["lost"]
    return "\n".join(lines), bpf_lost


def footprint(build):
    """RSS of the exporter with every shipped metric (config/default.json + config/latency.json)."""
    metrics = []
    for f in ("default.json", "latency.json"):
        text = open(os.path.join(ROOT, "config", f)).read()
        text = re.sub(r"^\s*//.*$", "", text, flags=re.M)
        metrics += json.loads(text)["metrics"]
    t = Exporter("exporter", build, metrics)
    t.start()
    time.sleep(3)
    t.scrape()
    status = {k: proc_status(t.proc.pid, k) for k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")}
    t.stop(signal.SIGTERM)
    rings_kib = 64 * os.sysconf("SC_PAGE_SIZE") // 1024 * os.cpu_count()
    return len(metrics), status, rings_kib


def micro(build):
    out = subprocess.run([f"{build}/bench/micro/collectors_bench", "--benchmark_format=json"], capture_output=True, text=True).stdout
    rows = ["| benchmark | time | per |", "|---|---:|---|"]
    results = {}
    for b in json.loads(out)["benchmarks"]:
        per = "sample" if "Scrape" not in b["name"] else "scrape"
        rows.append(f"| {b['name']} | {b['real_time']:.1f} {b['time_unit']} | {per} |")
        results[b["name"]] = (b["real_time"], b["time_unit"])
    return "\n".join(rows), results


def targets(w1, ceilings, ladder_rows, fp, micro_results, w4_bpf_lost):
    def ratio(t, a, b):
        return w1[t][a]["rate"] / w1[t][b]["rate"]
    rows = ["| target | measured | met |", "|---|---|---|"]
    def add(name, measured, ok):
        rows.append(f"| {name} | {measured} | {'yes' if ok else '**no**'} |")
    for t in (1, 2):
        r = ratio(t, "exporter: counting-mode counter", "perf stat")
        add(f"counting-mode counter ≥ 0.95 × perf stat's rate ({t} CPU)", f"{r:.3f}", r >= 0.95)
    for t in (1, 2):
        r = ratio(t, "exporter: sampled counter {comm}", "perf record -c 1")
        add(f"sampled counter {{comm}} rate ≥ perf record's ({t} CPU)", f"{r:.3f}", r >= 1.0)
        c = w1[t]["exporter: sampled counter {comm}"]["cpu_per_m"]
        add(f"daemon CPU ≤ 0.10 s per million samples ({t} CPU)", f"{c:.3f} s", c <= 0.10)
    bad = [r for r in ladder_rows if r[0] == "exporter" and r[2] and r[1] in [x[1] for x in ladder_rows if x[0] == "perf" and x[2] == 0]]
    add("no sample lost at any W3 rate where perf record loses none",
        "lost at " + ", ".join(f"{x[1]:,.0f}/s" for x in bad) if bad else "none lost", not bad)
    for t in (1, 2):
        r = ratio(t, "exporter: enter→exit latency histogram", "bpftrace enter→exit hist()")
        add(f"latency histogram ≥ 0.8 × bpftrace hist()'s rate ({t} CPU)", f"{r:.3f}", r >= 0.8)
    for t in (1, 2):
        r = ratio(t, "exporter bpf: counter {comm}", "bpftrace @[comm] = count()")
        add(f"bpf counter {{comm}} ≥ 1.0 × bpftrace @[comm] = count()'s rate ({t} CPU)", f"{r:.3f}", r >= 1.0)
        r = ratio(t, "exporter bpf: enter→exit latency histogram", "bpftrace enter→exit hist()")
        add(f"bpf latency histogram ≥ 1.2 × bpftrace hist()'s rate ({t} CPU)", f"{r:.3f}", r >= 1.2)
        lost = [w1[t][k]["lost"] for k in ("exporter bpf: counter {comm}", "exporter bpf: enter→exit latency histogram")]
        add(f"bpf engine loses nothing in W1 ({t} CPU)", ", ".join(str(x) for x in lost), all(x == 0 for x in lost))
    bpf_lost = [r for r in ladder_rows if r[0] == "bpf" and r[2] != 0]
    add("bpf engine: zero loss at every W3 rate",
        "lost at " + ", ".join(f"{x[1]:,.0f}/s" for x in bpf_lost) if bpf_lost else "none lost", not bpf_lost)
    add("bpf engine: zero loss in W4", f"{w4_bpf_lost}", w4_bpf_lost == 0)
    vals = list(ceilings.values())
    cr = vals[1] / vals[0] if vals[0] else float("inf")
    add("zero-loss ceiling ≥ 2 × perf record's (same 64-page buffer)", f"{cr:.2f} ({vals[1]:,.0f} vs {vals[0]:,.0f} calls/s)", cr >= 2)
    n, st, rings = fp
    add(f"RSS ≤ 30 MiB beyond the rings with {n} metrics", f"VmHWM {st['VmHWM'] / 1024:.1f} MiB", st["VmHWM"] / 1024 <= 30)
    t, unit = micro_results.get("BM_Scrape10kSeries", (0, "ms"))
    add("scrape of 10,000 series < 50 ms", f"{t:.1f} {unit}", unit == "ms" and t < 50)
    t, unit = micro_results.get("BM_BpfScrape10kSeries", (0, "ms"))
    add("bpf engine: scrape of 10,000 series < 50 ms", f"{t:.1f} {unit}", unit == "ms" and t < 50)
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/PERFORMANCE.md"))
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    secs = 2 if a.quick else 4
    shm = tempfile.mkdtemp(dir="/dev/shm")
    sections = []
    w1 = {}
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    head = (f"## Last run of `bench/run.sh`\n\nGenerated by `bench/run.sh{' --quick' if a.quick else ''}` on {time.strftime('%Y-%m-%d')}: "
            f"Linux {platform.release()}, {os.cpu_count()} CPUs ({cpu_model}), "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB. All numbers of one table come "
            "from one run of the script, side by side; the VM is noisy, so compare ratios within a table. Rates of a "
            "getppid() loop measure a tracer's cost only coarsely where a syscall costs 1-1.5 us (PTI): the bpf "
            "rows' rate ratios are no measure of per-event cost; ns per program run, beside bpftrace's, are in "
            "docs/bench/BPF_COST.md (bench/bpf_cost.sh).\n")
    for threads in (1, 2):
        print(f"W1: getppid loop on {threads} CPU(s)", file=sys.stderr)
        rows = [measure("baseline (untraced)", None, build, secs, threads)]
        for name, make in tracers_w1(build, shm):
            print(f"  {name}", file=sys.stderr)
            rows.append(measure(name, make, build, secs, threads))
        w1[threads] = {r["tool"]: r for r in rows}
        sections.append(f"## W1: getppid() loop, {threads} thread(s) pinned, {secs} s each\n\n"
                        "Events = getppid() calls (the latency rows see 2 tracepoint hits per call). "
                        "Lost = the workload's exact call count − what the tracer counted.\n\n" + fmt_rows(rows, rows[0]["rate"]))
    print("W2: perf bench sched pipe", file=sys.stderr)
    sections.append("## W2: `perf bench sched pipe` with sched:sched_switch + sched:sched_waking\n\n" + w2_pipe(build, shm, a.quick))
    print("W3: rate ladder", file=sys.stderr)
    table, ceilings, ladder_rows = w3_ladder(build, shm, a.quick)
    sections.append("## W3: rate ladder (paced getppid loop, 1 thread), same buffer size (64 pages per CPU)\n\n" + table +
                    "\n\nZero-loss ceiling: " + ", ".join(f"{k}: {v:,.0f} calls/s" for k, v in ceilings.items()))
    print("W4: burst", file=sys.stderr)
    w4_table, w4_bpf_lost = w4_burst(build, shm)
    sections.append("## W4: a 100 ms burst at full rate\n\n" + w4_table)
    print("micro-benchmarks", file=sys.stderr)
    micro_table, micro_results = micro(build)
    sections.append("## Micro-benchmarks (Google Benchmark, `build/bench/micro/collectors_bench`)\n\n"
                    "Decode + aggregate of one captured sample, and the snapshot + text serialization of a 10,000-series scrape.\n\n" + micro_table)
    print("footprint", file=sys.stderr)
    n, st, rings_kib = footprint(build)
    sections.append(f"## Footprint with {n} metrics (config/default.json + config/latency.json), idle host\n\n"
                    f"VmHWM {st['VmHWM'] / 1024:.1f} MiB; VmRSS {st['VmRSS'] / 1024:.1f} MiB = RssAnon "
                    f"{st['RssAnon'] / 1024:.1f} + RssFile {st['RssFile'] / 1024:.1f} + RssShmem {st['RssShmem'] / 1024:.1f} MiB; "
                    f"mapped rings {rings_kib / 1024:.1f} MiB (64 pages × {os.cpu_count()} CPUs).")
    sections.insert(0, cost_section())
    sections.insert(0, "## Targets (from the tables below, this run)\n\n" +
                    targets(w1, ceilings, ladder_rows, (n, st, rings_kib), micro_results, w4_bpf_lost))
    doc = head + "\n" + "\n\n".join(sections) + "\n"
    write_report(a.out, doc)
    print(doc)
    subprocess.run(["rm", "-rf", shm])


GENERATED_MARKER = "<!-- bench/run.py rewrites everything below this line; edit the text above it. -->"


def write_report(path, generated):
    """Writes `generated` below GENERATED_MARKER in `path`, keeping what is above the marker (the
    hand-written part of docs/PERFORMANCE.md); a file without the marker gets a bare title."""
    kept = "# Performance\n\n"
    if os.path.exists(path):
        text = open(path).read()
        at = text.find(GENERATED_MARKER)
        if at >= 0:
            kept = text[:at]
    with open(path, "w") as f:
        f.write(kept + GENERATED_MARKER + "\n\n" + generated)


def cost_section():
    """The ns-per-event tables of bench/bpf_cost.sh and bench/uprobe_cost.sh (their last runs,
    docs/bench/BPF_COST.md and docs/bench/UPROBE_COST.md), which measure what rates here cannot."""
    parts = ["## Cost per event (bench/bpf_cost.sh, bench/uprobe_cost.sh)\n\n"
             "Loop rates below are coarse where a syscall costs 1-1.5 us (PTI): what a program costs per event "
             "comes from the kernel's own accounting (bpf_stats), side by side with bpftrace, in these runs."]
    for name in ("BPF_COST.md", "UPROBE_COST.md", "PROFILE_COST.md", "CPU_PROFILE_COST.md", "OFF_CPU_COST.md"):
        path = os.path.join(ROOT, "docs", "bench", name)
        if os.path.exists(path):
            body = open(path).read().split("\n", 1)[1].strip()  # without its title
            parts.append("### From docs/bench/%s\n\n%s" % (name, body))
    return "\n\n".join(parts)


if __name__ == "__main__":
    main()
