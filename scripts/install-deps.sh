#!/usr/bin/env bash
# Installs everything tracepoint_exporter needs to build, test and run, from Debian packages.
# Used by the README Quick start, .ci/run and the Dockerfile, so all three stay the same.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --build    only what compiling the daemon needs (the image's build stage)
#   scripts/install-deps.sh --runtime  only the shared libraries the binary needs at run time
set -euo pipefail
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

RUNTIME=(libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libtraceevent1 libbpf1 libseccomp2 libsystemd0 libyaml-cpp0.7 libcrypt1 libcap2 libmicrohttpd12 libgnutls30 libelf1 libdw1 libdebuginfod1 liblzma5 libprotobuf32 zlib1g libabsl20220623 ca-certificates)
COMPILE=(build-essential cmake ninja-build pkg-config
         libspdlog-dev libfmt-dev nlohmann-json3-dev prometheus-cpp-dev libcli11-dev
         libtraceevent-dev libbpf-dev libseccomp-dev libsystemd-dev libyaml-cpp-dev libcrypt-dev libcap-dev libmicrohttpd-dev libgnutls28-dev libelf-dev libdw-dev libdebuginfod-dev liblzma-dev libabsl-dev
         libprotobuf-dev protobuf-compiler golang-github-google-pprof-dev golang-github-prometheus-client-model-dev zlib1g-dev)
BUILD=("${COMPILE[@]}" git libgtest-dev libgmock-dev libbenchmark-dev
       python3 help2man dpkg-dev openssl curl prometheus golang-go bpftrace bpftool clang-format clang-tidy clang libclang-rt-14-dev stress-ng systemtap-sdt-dev debuginfod elfutils
       chromium-headless-shell fonts-dejavu-core)

case "${1:-}" in
  --runtime) PKGS=("${RUNTIME[@]}") ;;
  --build) PKGS=("${COMPILE[@]}") ;;
  *) PKGS=("${BUILD[@]}") ;;
esac

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#PKGS[@]} packages present"
fi
