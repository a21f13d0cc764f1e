#!/usr/bin/env bash
# What a uprobe costs per hit (bench/uprobe_cost.py). Builds what it needs and installs bpftrace.
#   sudo bench/uprobe_cost.sh [--rounds R] [--calls N]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/ensure_tracers.sh
python3 bench/uprobe_cost.py --build build "$@"
