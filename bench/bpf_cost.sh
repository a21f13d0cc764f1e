#!/usr/bin/env bash
# ns per program run, the bpf engine beside bpftrace (bench/bpf_cost.py). Builds what it needs and
# installs bpftrace and bpftool.   sudo bench/bpf_cost.sh [--rounds N] [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
for p in bpftrace bpftool; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done
python3 bench/bpf_cost.py --build build "$@"
