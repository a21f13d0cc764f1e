#!/usr/bin/env bash
# Builds the container image from the Dockerfile without a Docker engine or a registry: podman
# (with runc: crun refuses hosts with hybrid cgroups), a debian:bookworm base made by mmdebstrap
# from this machine's own apt sources, and the Dockerfile unchanged. All from Debian packages.
#   scripts/image.sh [TAG]        default tag localhost/tracepoint-exporter:latest
#   scripts/image.sh --base-only  only the debian:bookworm base (CI makes it while it compiles)
# Podman's storage is its own (TPE_PODMAN_ROOT, default /var/tmp/tpe-podman), so nothing else on
# the host is touched. With Docker, the same Dockerfile builds as is: docker build -t TAG .
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-localhost/tracepoint-exporter:latest}
source scripts/podman.sh
podman_install

if ! tpe_podman image exists localhost/debian:bookworm; then
  # The host's apt sources (a file of them, not a host name) are what the base uses.
  sources=""
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    [[ -s $f ]] && grep -qE '^(deb |Types: deb)' "$f" && { sources=$f; break; }
  done
  [[ -n $sources ]] || { echo "image: no Debian apt sources on this host to build the base from"; exit 1; }
  base=$(mktemp -d)
  echo "image: building the debian:bookworm base with mmdebstrap from $sources"
  mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm "$base/base.tar" "$sources"
  tpe_podman import "$base/base.tar" localhost/debian:bookworm >/dev/null
  tpe_podman tag localhost/debian:bookworm localhost/debian:bookworm-slim
  rm -rf "$base"
fi
[[ $TAG == --base-only ]] && exit 0

echo "image: podman build $TAG"
# --pull=never: the FROM lines resolve to the local base (debian:bookworm -> localhost/debian:bookworm).
tpe_podman build --pull=never --network=host -t "$TAG" -f Dockerfile . 
size=$(tpe_podman image inspect "$TAG" --format '{{.Size}}')
echo "image: $TAG is $((size / 1024 / 1024)) MiB"
