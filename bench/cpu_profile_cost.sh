#!/usr/bin/env bash
# What a continuous 19 Hz CPU profile costs, beside perf record (bench/cpu_profile_cost.py).
#   sudo bench/cpu_profile_cost.sh [--seconds S] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v stress-ng >/dev/null && command -v perf >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng linux-perf >/dev/null; }
[[ -x build/tracepoint_exporter ]] || cmake --build build -j"$(nproc)" --target tracepoint_exporter
python3 bench/cpu_profile_cost.py --build build "$@"
