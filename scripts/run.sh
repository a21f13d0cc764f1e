#!/usr/bin/env bash
# Builds (installing dependencies) and starts the daemon on config/default.json.
# Extra arguments go to tracepoint_exporter, e.g. --web.listen-address=127.0.0.1:9478.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
exec $SUDO "${BUILD_DIR:-build}/tracepoint_exporter" --config.file=config/default.json "$@"
