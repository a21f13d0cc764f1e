#!/usr/bin/env bash
# Installs dependencies (scripts/install-deps.sh) and builds tracepoint_exporter.
#   BUILD_DIR=build        where to build
#   TPE_WERROR=ON|OFF      warnings as errors (default ON)
#   TPE_SANITIZE=ON|OFF    AddressSanitizer + UndefinedBehaviorSanitizer (default OFF)
#   TPE_BUILD_TESTS=ON|OFF tests and benchmarks too (default ON)
#   TPE_DEBUG_INFO=ON|OFF  debug information (default ON; the container image builds without)
#   TPE_FUZZ=ON|OFF        the libFuzzer targets too (default OFF; needs CXX=clang++, see fuzz/run.sh)
#   CXX                    the C++ compiler of a new BUILD_DIR (CMake's default: c++, i.e. g++)
#   TPE_DEPS=--build       what scripts/install-deps.sh installs (default: everything, for the tests)
#   CMAKE_BUILD_TYPE       default RelWithDebInfo
#   TPE_BUILD_TARGETS      only these targets (space-separated, e.g. "tpe_tests_unit tpe_fuzzers");
#                          default: everything
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh ${TPE_DEPS:-}
BUILD_DIR=${BUILD_DIR:-build}
# ccache, when installed, is used (developers' worktrees share one cache; CI has none).
LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$BUILD_DIR" -G Ninja "${LAUNCHER[@]}" \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DTPE_WERROR="${TPE_WERROR:-ON}" -DTPE_SANITIZE="${TPE_SANITIZE:-OFF}" -DTPE_BUILD_TESTS="${TPE_BUILD_TESTS:-ON}" \
  -DTPE_DEBUG_INFO="${TPE_DEBUG_INFO:-ON}" -DTPE_FUZZ="${TPE_FUZZ:-OFF}" >/dev/null
targets=()
# shellcheck disable=SC2206  # a list of target names, split on spaces
[[ -n ${TPE_BUILD_TARGETS:-} ]] && targets=(--target ${TPE_BUILD_TARGETS})
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
echo "build: $BUILD_DIR/tracepoint_exporter"
