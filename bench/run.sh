#!/usr/bin/env bash
# One command for the side-by-side performance comparison (issue: performance). Builds what it
# needs, installs linux-perf and bpftrace, runs every workload against every tracer in one run,
# and regenerates the generated part of docs/PERFORMANCE.md.   sudo bench/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
for p in linux-perf bpftrace; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done
python3 bench/run.py --build build "$@"
