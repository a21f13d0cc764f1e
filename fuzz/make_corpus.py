#!/usr/bin/env python3
"""Regenerates the seed corpus fuzz/corpus/<target>/ from the checked-in test data.

The corpus is checked in; run this only after changing tests/data, config/ or the lists below:
    python3 fuzz/make_corpus.py
Seeds: captured format files (tests/data/**/format), config/*.json, filters from config/ and
src/filter/filter_unittest.cc, and the captured perf records (tests/data/linux-6.18/records/*.hex)
wrapped as each target's input layout expects (see the comment at the top of each target).
"""
import glob
import json
import os
import re
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def read_hex(name):
    out = bytearray()
    with open(os.path.join(ROOT, "tests/data/linux-6.18/records", name + ".hex")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            out += bytes(int(b, 16) for b in line.split())
    return bytes(out)


def raw_of(sample):
    size = struct.unpack_from("<I", sample, 32)[0]
    return sample[36:36 + size]


def header(type_, body, misc=0):
    return struct.pack("<IHH", type_, misc, 8 + len(body)) + body


SAMPLE_ID = struct.pack("<IIQQ", 4126, 4126, 0x9A00000000, 11)  # pid, tid, time, id
PERF_RECORD_LOST, PERF_RECORD_COMM, PERF_RECORD_EXIT, PERF_RECORD_FORK, PERF_RECORD_SAMPLE = 2, 3, 4, 7, 9
PERF_RECORD_LOST_SAMPLES = 13


def comm_record(name):
    body = struct.pack("<II", 4126, 4127) + name.encode() + b"\0"
    body += b"\0" * (-len(body) % 8)
    return header(PERF_RECORD_COMM, body + SAMPLE_ID)


def task_record(type_):
    return header(type_, struct.pack("<IIIIQ", 4127, 4126, 4127, 4126, 0x9A00000001) + SAMPLE_ID)


def lost_record():
    return header(PERF_RECORD_LOST, struct.pack("<QQ", 11, 42) + SAMPLE_ID)


def lost_samples_record():
    return header(PERF_RECORD_LOST_SAMPLES, struct.pack("<Q", 7) + SAMPLE_ID)


def crafted_elf(functions, extended_numbering=False):
    """A minimal x86-64 ET_DYN file as ElfFile reads it: one PT_LOAD over the whole file, sections
    .shstrtab, .symtab, .strtab, .note.gnu.build-id and .text; `functions` are (name, address,
    size) inside .text."""
    shstr = b"\0.shstrtab\0.symtab\0.strtab\0.note.gnu.build-id\0.text\0"
    names = {n: shstr.index(n.encode() + b"\0") for n in (".shstrtab", ".symtab", ".strtab", ".note.gnu.build-id",
                                                           ".text")}
    strtab = b"\0"
    syms = bytes(24)  # the null symbol
    for name, address, size in functions:
        syms += struct.pack("<IBBHQQ", len(strtab), 0x12, 0, 5, address, size)  # STB_GLOBAL, STT_FUNC, .text
        strtab += name.encode() + b"\0"
    note = struct.pack("<III", 4, 20, 3) + b"GNU\0" + bytes(range(20))  # NT_GNU_BUILD_ID
    layout = {"shstrtab": 0x100, "strtab": 0x180, "symtab": 0x200, "note": 0x300, "text": 0x340, "shdrs": 0x400}
    nsec = 6
    size = layout["shdrs"] + nsec * 64
    out = bytearray(size)
    out[0:64] = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, layout["shdrs"], 0, 64, 56, 1, 64, 0 if extended_numbering else nsec, 1)
    out[64:120] = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000)  # PT_LOAD r-x
    for key, data in (("shstrtab", shstr), ("strtab", strtab), ("symtab", syms), ("note", note)):
        out[layout[key]:layout[key] + len(data)] = data
    out[layout["text"]:layout["text"] + 0x40] = b"\xc3" * 0x40

    def shdr(name, type_, offset, sz, link=0, info=0, entsize=0, addr=0):
        return struct.pack("<IIQQQQIIQQ", name, type_, 0, addr, offset, sz, link, info, 1, entsize)

    out[layout["shdrs"]:] = b"".join([
        shdr(0, 0, 0, nsec if extended_numbering else 0),
        shdr(names[".shstrtab"], 3, layout["shstrtab"], len(shstr)),
        shdr(names[".symtab"], 2, layout["symtab"], len(syms), link=3, info=1, entsize=24),
        shdr(names[".strtab"], 3, layout["strtab"], len(strtab)),
        shdr(names[".note.gnu.build-id"], 7, layout["note"], len(note), addr=layout["note"]),
        shdr(names[".text"], 1, layout["text"], 0x40, addr=layout["text"])])
    return bytes(out)


def elf_and_perf_map_seeds():
    # elf_fuzzer: whole files.
    write("elf_fuzzer", "minimal", crafted_elf([("crafted_fn", 0x340, 0x10), ("other_fn@@V_1", 0x350, 0x20)]))
    write("elf_fuzzer", "extended_numbering", crafted_elf([("f", 0x340, 0)], extended_numbering=True))
    # perf_map_fuzzer: <max_entries selector> <text>; 255 = the default bound.
    perf_map = ("7f3a1c000000 b py::_run_code:/usr/lib/python3.12/runpy.py\n"
                "0x7f3a1c000100 40 LazyCompile:~handler /srv/app.js:10\n"
                "7f3a1c000200 20 old\n7f3a1c000200 30 regenerated\n7f3a1c0003")
    write("perf_map_fuzzer", "node_python", b"\xff" + perf_map.encode())
    write("perf_map_fuzzer", "truncated", b"\x02" + perf_map.encode())
    write("perf_map_fuzzer", "status", b"\xff" + b"Name:\tnode\nTgid:\t4242\nPid:\t4242\n"
          b"Uid:\t1000\t1000\t1000\t1000\nNStgid:\t4242\t7\nNSpid:\t4242\t7\n")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    records = {n: read_hex(n) for n in ("sched_switch", "sys_enter_write", "net_dev_xmit")}
    others = [comm_record("tpe_capture"), task_record(PERF_RECORD_FORK), task_record(PERF_RECORD_EXIT),
              lost_record(), lost_samples_record()]

    # format_fuzzer: every captured format file.
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/data/**/format"), recursive=True)):
        parts = path.split(os.sep)
        write("format_fuzzer", "%s_%s_%s" % (parts[-5], parts[-3], parts[-2]), open(path, "rb").read())

    # config_fuzzer: the shipped configs and a few small ones.
    filters = []
    for path in sorted(glob.glob(os.path.join(ROOT, "config/*.json"))):
        text = open(path).read()
        write("config_fuzzer", os.path.basename(path), text)
        filters += re.findall(r'"filter":\s*"((?:[^"\\]|\\.)*)"', text)
    small = {
        "minimal.json": {"metrics": [{"name": "a_total", "type": "counter", "event": "sched:sched_switch"}]},
        "settings.json": {"settings": {"ring_buffer_pages": 8, "max_series_per_metric": 100},
                          "metrics": [{"name": "b_total", "type": "counter", "event": "x:y",
                                       "labels": [{"name": "comm", "source": "comm"},
                                                  {"name": "f", "field": "f", "decode": "hex"}]}]},
        "histogram.json": {"metrics": [{"name": "h", "type": "histogram", "event": "x:y",
                                        "value": {"field": "len", "scale": 0.5},
                                        "buckets": {"type": "explicit", "bounds": [1, 2.5, 1e3]}}]},
        "latency.json": {"metrics": [{"name": "l_seconds", "type": "latency",
                                      "start": [{"event": "a:b", "key": ["pid"], "filter": "pid != 0"}],
                                      "end": {"event": "a:c", "key": ["pid"]},
                                      "buckets": {"type": "linear", "start": 0, "width": 0.1, "count": 10},
                                      "max_inflight": 10, "timeout_seconds": 1.5}]},
    }
    for name, obj in small.items():
        write("config_fuzzer", name, json.dumps(obj))
    write("config_fuzzer", "comments.json", '// c\n{/* x */ "metrics": [{"name": "a_total", "type": "counter",'
          ' "event": "a:b"}]}\n')

    # filter_fuzzer: <filter> '\0' <format selector> <record>. Selectors: 0 sched_switch,
    # 1 sys_enter_openat, 2 net_dev_xmit, 3 foo_rel, 4 tcp_retransmit_skb, 5 sched_waking,
    # 6 ipi_send_cpumask (see filter_fuzzer.cc).
    switch_raw = raw_of(records["sched_switch"])
    xmit_raw = raw_of(records["net_dev_xmit"])
    openat = bytearray(48)
    struct.pack_into("<iqQQ", openat, 8, 257, 0, 0x11, 0x241)
    rel = bytearray(32)
    struct.pack_into("<BxxxI", rel, 8, 1, (6 << 16) | 4)
    rel[20:26] = b"hello\0"
    waking = bytearray(40)
    waking[8:13] = b"sleep"
    ipi = bytearray(40)
    struct.pack_into("<I", ipi, 8, (8 << 16) | 32)
    struct.pack_into("<Q", ipi, 32, 0b0110)
    seeds = [
        (0, switch_raw, filters + [
            "prev_pid == 1 || prev_pid == 2 && next_pid == 3", "!(prev_state & 0x3) && CPU & CPUS{0,2}",
            "prev_comm ~ \"!kworker*\" || next_comm == 'a\"b' && common_pid != -1",
            "prev_comm ~ \"*[e]ta\" && next_comm ~ \"swap?er/[0-9]\"", "comm ~ \"tpe_*\" && cpu < 4",
            "common_type == 65908 && prev_pid < 4294967296", "prev_pid == 0x10 || prev_pid == 010",
            "!!prev_pid == -9223372036854775808", "(prev_prio >= 100 && (next_prio <= 120 || next_pid > 0))",
            "COMM == \"tpe_capture\" && prev_comm.ustring != \"x\""]),
        (1, bytes(openat), ["filename.ustring ~ \"/etc/*\" && flags & 0x40", "dfd == 0xffffffffffffff9c",
                            "__syscall_nr == 257 && mode != 0"]),
        (2, xmit_raw, ["name == \"lo\" && len > 100", "name ~ \"*o\" || rc != 0", "name ~ \"e?h[0-9]\""]),
        (3, bytes(rel), ["msg == \"hello\" && ok == 1", "msg ~ \"*llo\""]),
        (4, bytes(80), ["dport != 22", "saddr == 0x0100007f && state == 1", "family < 3 && sport & 0xff00"]),
        (5, bytes(waking), ["comm == \"sleep\" && COMM != \"bash\"", "target_cpu & CPUS{0-3}"]),
        (6, bytes(ipi), ["cpumask & CPUS{2}", "cpumask == CPUS{1-2} || callsite & CPUS{0-1}"]),
    ]
    n = 0
    for sel, rec, texts in seeds:
        for t in texts:
            write("filter_fuzzer", "%03d" % n, t.encode() + b"\0" + bytes([sel]) + rec)
            n += 1

    # sample_decode_fuzzer: <decoder selector> <record>. Selectors: 0 sched_switch,
    # 1 sys_enter_write, 2 net_dev_xmit, ... (see sample_decode_fuzzer.cc).
    for sel, name in enumerate(("sched_switch", "sys_enter_write", "net_dev_xmit")):
        write("sample_decode_fuzzer", name, bytes([sel]) + records[name])
    for i, r in enumerate(others):
        write("sample_decode_fuzzer", "record_%d" % i, bytes([i]) + r)

    # ring_cursor_fuzzer: <k> <begin u64> <avail u32> <ring bytes>; ring size 2^(3 + k % 14).
    stream = records["sched_switch"] + others[0] + records["net_dev_xmit"] + records["sys_enter_write"] + \
        others[1] + others[3]
    for k, begin in ((9, 0), (9, 4096 * 7 + 4000), (5, 200), (6, 0xFFFFFFFFFFFFFFF0)):
        size = 1 << (3 + k)
        ring = bytearray(size)
        data = stream[:size]
        for i, b in enumerate(data):
            ring[(begin + i) % size] = b
        write("ring_cursor_fuzzer", "ring_%d_%x" % (size, begin),
              bytes([k]) + struct.pack("<QI", begin % (1 << 64), len(data)) + bytes(ring))

    elf_and_perf_map_seeds()


if __name__ == "__main__":
    main()
