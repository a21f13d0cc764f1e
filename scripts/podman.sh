# Sourced by scripts/image.sh and tests/image/smoke_test.sh: podman with runc and storage of its own.
TPE_PODMAN_ROOT=${TPE_PODMAN_ROOT:-/var/tmp/tpe-podman}

podman_install() {
  local missing=()
  for p in podman runc mmdebstrap uidmap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "podman: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  mkdir -p "$TPE_PODMAN_ROOT"
  # Short names (debian:bookworm) resolve to the local images only: no registry is reachable.
  cat >"$TPE_PODMAN_ROOT/registries.conf" <<'CONF'
unqualified-search-registries = ["localhost"]
short-name-mode = "permissive"
CONF
}

# Podman's default limits (RLIMIT_NOFILE 1048576, RLIMIT_NPROC 4194304) are above what runc may
# set where root lacks CAP_SYS_RESOURCE (as on this project's VMs: "error setting rlimit type 7:
# operation not permitted"); containers get these instead: 8192 fds is plenty for the daemon.
TPE_PODMAN_ULIMITS=(--ulimit nofile=8192:8192 --ulimit nproc=4096:4096)

tpe_podman() {
  CONTAINERS_REGISTRIES_CONF="$TPE_PODMAN_ROOT/registries.conf" \
    podman --root "$TPE_PODMAN_ROOT/storage" --runroot "$TPE_PODMAN_ROOT/run" --runtime runc \
    --storage-driver overlay --cgroup-manager cgroupfs --events-backend file "$@"
}
