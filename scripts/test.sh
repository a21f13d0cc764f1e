#!/usr/bin/env bash
# Builds (installing dependencies) and runs every test tier with ctest: unit, kernel, e2e.
# Kernel and e2e tests need root; without it they skip with the reason, unless
# TPE_REQUIRE_KERNEL=1 (as in CI), which turns a skip into a failure.
#   scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo --preserve-env=TPE_REQUIRE_KERNEL"; fi
$SUDO ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure "$@"
