#!/usr/bin/env bash
# ns per program run, the bpf engine beside bpftrace (bench/bpf_cost.py). Builds what it needs and
# installs bpftrace and bpftool.   sudo bench/bpf_cost.sh [--rounds N] [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/ensure_tracers.sh
python3 bench/bpf_cost.py --build build "$@"
