#!/usr/bin/env bash
# What an off-CPU profile adds per context switch, beside bpftrace (bench/off_cpu_cost.py).
#   sudo bench/off_cpu_cost.sh [--seconds S] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/ensure_tracers.sh
command -v stress-ng >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
python3 bench/off_cpu_cost.py --build build "$@"
