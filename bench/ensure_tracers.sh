#!/usr/bin/env bash
# Builds the exporter (scripts/build.sh) and installs what the side-by-side benches run beside it:
# bpftrace and bpftool (Debian packages). Sourced by bench/bpf_cost.sh and bench/uprobe_cost.sh.
bash scripts/build.sh >/dev/null
for p in bpftrace bpftool; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done
