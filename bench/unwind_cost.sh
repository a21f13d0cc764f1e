#!/usr/bin/env bash
# What unwinding user stacks costs: "dwarf" beside "frame_pointer" and perf (bench/unwind_cost.py),
# then the per-sample micro-benchmark (build/bench/micro/unwind_bench).
#   sudo bench/unwind_cost.sh [--seconds S] [--rate CALLS_PER_S]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v stress-ng >/dev/null && command -v perf >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng linux-perf >/dev/null; }
cmake --build build -j"$(nproc)" --target tracepoint_exporter syscall_loop unwind_bench
python3 bench/unwind_cost.py --build build "$@"
build/bench/micro/unwind_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
