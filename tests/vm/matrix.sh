#!/usr/bin/env bash
# Kernel matrix: boots Debian's kernels under qemu (TCG, no /dev/kvm needed) with the host root
# shared read-only over virtio-9p (an overlay on a tmpfs in the guest), and runs in each guest the
# kernel tier (kernel-label ctest binaries, both engines, hotplug tests included: -smp 2) and an e2e
# exact count through the daemon binary on engine perf and engine bpf (tests/vm/guest.sh).
#   tests/vm/matrix.sh BUILD_DIR [METAPACKAGE...]
# Default metapackages: linux-image-amd64 (6.1), linux-image-rt-amd64 (6.1 PREEMPT_RT),
# linux-image-6.12-amd64. SUITE/METAPACKAGE resolves the metapackage in another suite of the same
# Debian mirror: bullseye/linux-image-amd64 is Debian 11's 5.10 (the suite's own point release,
# 5.10.223: the mirror here does not serve every bullseye-security kernel, the RT one among them),
# through a private APT_CONFIG under the cache, so the host's apt state is untouched. Kernels are
# resolved through the metapackage, fetched with `apt-get download` and cached, extracted and
# depmod'ed, under TPE_VM_CACHE (~/.cache/tpe-vm).
# Results come from a writable 9p share, never from qemu's exit code. A guest fails when a test
# fails, when its kernel is tainted after the run or when its dmesg has a WARNING.
# Prints one summary line per kernel; exits non-zero if any kernel fails. Under CI=true a missing
# qemu or kernel is a failure, not a skip. TPE_VM_JOBS guests at a time (default 2: one host
# thread each); TPE_VM_TIMEOUT (seconds per guest, default 1500);
# TPE_VM_PREPARE_ONLY=1 only fetches and prepares the kernels (BUILD_DIR need not be built yet); TPE_VM_GUEST=SCRIPT runs another
# guest script (it must write $R/verdicts and $R/done like tests/vm/guest.sh); TPE_VM_RESULTS=DIR
# puts the per-kernel results directories there instead of $TPE_VM_CACHE/results.
set -uo pipefail
BUILD=$(realpath "${1:?usage: matrix.sh BUILD_DIR [METAPACKAGE...]}")
shift
KERNELS=("$@")
[[ ${#KERNELS[@]} -eq 0 ]] && KERNELS=(linux-image-amd64 linux-image-rt-amd64 linux-image-6.12-amd64)
SRC=$(realpath "$(dirname "$0")/../..")
CACHE=${TPE_VM_CACHE:-$HOME/.cache/tpe-vm}
TIMEOUT=${TPE_VM_TIMEOUT:-1500}
POWEROFF_GRACE=30
# One host thread runs both vCPUs in turn (TPE_VM_ACCEL overrides). Under multi-threaded TCG the
# kernel's live code patching (text_poke_bp: static keys flipped when a tracepoint is enabled)
# raced: 6.12 died of "Oops: int3" in __schedule, 6.1 soft-locked up waiting for the other CPU.
ACCEL=${TPE_VM_ACCEL:-tcg,thread=single}
mkdir -p "$CACHE"

skip_or_fail() {
  echo "vm matrix: $1"
  if [[ "${CI:-}" == true || "${TPE_REQUIRE_KERNEL:-}" == 1 ]]; then exit 1; fi
  echo "vm matrix skipped"
  exit 0
}

[[ $(id -u) -eq 0 ]] || skip_or_fail "needs root (apt-get, depmod, the guests' tests run as root)"
[[ -n "${TPE_VM_PREPARE_ONLY:-}" || (-x "$BUILD/tests/kernel/kernel_test" && -x "$BUILD/tracepoint_exporter") ]] ||
  skip_or_fail "$BUILD has no tests/kernel/kernel_test or tracepoint_exporter: build first"

# Host tools, from Debian packages.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[[ -x /bin/busybox ]] && /bin/busybox --list 2>/dev/null | grep -qx switch_root || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
command -v xz >/dev/null || need+=(xz-utils)
command -v curl >/dev/null || need+=(curl)
if [[ ${#need[@]} -gt 0 ]]; then
  echo "vm matrix: installing ${need[*]}"
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"; } \
    >"$CACHE/apt.log" 2>&1 || skip_or_fail "apt-get install ${need[*]} failed (see $CACHE/apt.log)"
fi
command -v qemu-system-x86_64 >/dev/null || skip_or_fail "qemu-system-x86_64 not found"
if ! ldd /bin/busybox >/dev/null 2>&1; then :; else
  skip_or_fail "/bin/busybox is dynamically linked: the initramfs needs busybox-static"
fi

MODULES=(virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache
  9pnet 9pnet_virtio 9p overlay)

# suite_apt SUITE: a private apt configuration whose source is SUITE of the host's Debian mirror (its lists and cache under $CACHE/apt-SUITE; dpkg's status is only read).
# Prints the APT_CONFIG path.
suite_apt() {
  local suite=$1 dir=$CACHE/apt-$1 mirror
  mirror=$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    head -1 | tr -d ' ')
  mirror=${mirror:-http://deb.debian.org/debian}
  mirror=${mirror%/}
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  cat >"$dir/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main
EOF
  cat >"$dir/apt.conf" <<EOF
Dir::State "$dir";
Dir::State::lists "$dir/lists";
Dir::State::status "/var/lib/dpkg/status";
Dir::Cache "$dir/cache";
Dir::Etc::SourceList "$dir/sources.list";
Dir::Etc::SourceParts "/nonexistent";
EOF
  echo "$dir/apt.conf"
}

# prepare_kernel [SUITE/]METAPACKAGE: sets KVER and KDIR (extracted tree with vmlinuz, modules,
# initramfs).
prepare_kernel() {
  local meta=$1 dep deb stamp=$CACHE/apt-updated
  unset APT_CONFIG
  if [[ $meta == */* ]]; then
    APT_CONFIG=$(suite_apt "${meta%%/*}") || return 1
    export APT_CONFIG
    stamp=$CACHE/apt-${meta%%/*}/updated
    meta=${meta#*/}
  fi
  if [[ ! -f "$stamp" || -n $(find "$stamp" -mmin +720) ]]; then
    apt-get update -q >"$CACHE/apt.log" 2>&1 && touch "$stamp"
  fi
  # The metapackage depends on exactly one linux-image-<version>-<flavour> package.
  dep=$(apt-cache depends "$meta" 2>/dev/null | sed -n 's/^  Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -1)
  [[ -n "$dep" ]] || { echo "cannot resolve $meta through apt-cache depends"; return 1; }
  KVER=${dep#linux-image-}
  KVER=${KVER%-unsigned}
  KDIR=$CACHE/$KVER
  if [[ -f "$KDIR/ready" ]]; then
    build_initramfs  # cheap; picks up changes to tests/vm/init
    return
  fi
  rm -rf "$KDIR" && mkdir -p "$KDIR/debs" "$KDIR/root"
  (cd "$KDIR/debs" && apt-get download -q "$dep") >"$KDIR/download.log" 2>&1 ||
    { echo "apt-get download $dep failed"; cat "$KDIR/download.log"; return 1; }
  for deb in "$KDIR"/debs/*.deb; do dpkg-deb -x "$deb" "$KDIR/root" || return 1; done
  depmod -b "$KDIR/root" "$KVER" || return 1
  build_initramfs || return 1
  touch "$KDIR/ready"
}

# build_initramfs: busybox, the 9p/virtio/overlay modules (decompressed; those built in are
# absent) and tests/vm/init, as $KDIR/initrd.
build_initramfs() {
  local ird=$KDIR/initrd.d m f
  rm -rf "$ird" && mkdir -p "$ird"/{bin,dev,proc,sys,lower,rw,newroot,modules}
  cp /bin/busybox "$ird/bin/busybox"
  for m in "${MODULES[@]}"; do
    f=$(find "$KDIR/root/lib/modules/$KVER" -name "$m.ko*" | head -1)
    [[ -z "$f" ]] && continue
    case "$f" in
      *.xz) xz -dc "$f" >"$ird/modules/$m.ko" ;;
      *.zst) zstd -dqc "$f" >"$ird/modules/$m.ko" ;;
      *) cp "$f" "$ird/modules/$m.ko" ;;
    esac
  done
  printf '%s\n' "${MODULES[@]}" >"$ird/modules/order"
  cp "$SRC/tests/vm/init" "$ird/init" && chmod +x "$ird/init" || return 1
  (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1 >"$KDIR/initrd") || return 1
}

# run_guest: boots $KDIR, waits for it, reads $OUT (the writable share).
run_guest() {
  cat >"$OUT/params" <<EOF
TPE_BUILD=$BUILD
TPE_SRC=$SRC
TPE_KVER=$KVER
TPE_KMODULES=$KDIR/root/lib/modules/$KVER
TPE_GUEST=${TPE_VM_GUEST:-$SRC/tests/vm/guest.sh}
EOF
  # TPE_GUEST_* variables reach the guest script as they are (e.g. TPE_GUEST_E2E_N).
  local v
  for v in $(compgen -v TPE_GUEST_); do printf '%s=%q\n' "$v" "${!v}" >>"$OUT/params"; done
  # The guest powers itself off after writing $OUT/done; a kernel that then hangs on the way down
  # (6.1-rt once sat 400 s after its last check until the timeout) is stopped POWEROFF_GRACE
  # seconds after `done`: its results are complete by then, and the slot goes to the next guest.
  timeout "$TIMEOUT" qemu-system-x86_64 -machine q35 -accel "$ACCEL" -cpu max -smp 2 -m 2048 \
    -nographic -no-reboot -monitor none -serial "file:$OUT/console.log" \
    -kernel "$KDIR/root/boot/vmlinuz-$KVER" -initrd "$KDIR/initrd" \
    -append "console=ttyS0 panic=-1 oops=panic loglevel=4 quiet" \
    -fsdev local,id=root,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
    -fsdev local,id=out,path="$OUT",security_model=none \
    -device virtio-9p-pci,fsdev=out,mount_tag=results \
    >"$OUT/qemu.log" 2>&1 &
  local qemu=$! rc i
  while kill -0 "$qemu" 2>/dev/null && [[ ! -f "$OUT/done" ]]; do sleep 2; done
  for ((i = 0; i < POWEROFF_GRACE; i += 2)); do kill -0 "$qemu" 2>/dev/null || break; sleep 2; done
  local stopped=""
  if kill -0 "$qemu" 2>/dev/null; then
    stopped="; the guest wrote done but had not powered off ${POWEROFF_GRACE} s later: stopped"
    kill "$qemu" 2>/dev/null
  fi
  rc=0
  wait "$qemu" || rc=$?
  # After qemu is gone: it writes qemu.log from its own offset, over lines appended meanwhile.
  echo "qemu exit $rc (not used)$stopped" >>"$OUT/qemu.log"
}

summary=()
# run_and_judge META START: boots the guest of $KVER/$KDIR into $OUT, then writes $OUT/summary
# (one line) and $OUT/report (what failed), which the main loop prints in the kernels' order.
run_and_judge() {
  local meta=$1 start=$2 result secs nfail nall failed log
  run_guest
  secs=$(($(date +%s) - start))
  {
    if [[ ! -f "$OUT/done" ]]; then
      result="FAIL: the guest never finished (timeout ${TIMEOUT}s or crash; tail of console.log above)"
      tail -40 "$OUT/console.log"
    elif grep -q '^FAIL' "$OUT/verdicts"; then
      nfail=$(grep -c '^FAIL' "$OUT/verdicts")
      nall=$(wc -l <"$OUT/verdicts")
      failed=$(grep '^FAIL' "$OUT/verdicts" | cut -d' ' -f2- | paste -sd';')
      result="FAIL: $nfail of $nall checks: $failed"
    else
      nall=$(wc -l <"$OUT/verdicts")
      result="PASS: $nall checks"
    fi
    if [[ "$result" != PASS* ]]; then
      echo "-- $meta $KVER:"
      cat "$OUT/verdicts" 2>/dev/null
      # What failed, here in the output (CI keeps no guest logs): each gtest failure with the
      # lines after it, and the failed tests' names, at most 120 lines per log.
      for log in "$OUT/kernel-tier.log" "$OUT/e2e.log" "$OUT/e2e-auto.log"; do
        [[ -f $log ]] || continue
        echo "-- failures in $log:"
        grep -E -A8 ': Failure$|^\[  FAILED  \]|^FAIL|Error|error:' "$log" | head -120
      done
    fi
  } >"$OUT/report" 2>&1
  echo "$meta $KVER: $result in ${secs}s, logs in $OUT" >"$OUT/summary"
}

# Kernels are prepared one after another and booted TPE_VM_JOBS at a time (default 2): a guest
# runs on one host thread (single-threaded TCG), so two guests keep a 2-core host busy without
# sharing a core.
JOBS=${TPE_VM_JOBS:-2}
overall=0
entries=()  # per kernel: "MISSING|PREPARED|message" or "RAN|results dir"
for meta in "${KERNELS[@]}"; do
  KVER="" KDIR=""
  start=$(date +%s)
  if ! prepare_kernel "$meta" >"$CACHE/prepare-${meta//\//_}.log" 2>&1; then
    cat "$CACHE/prepare-${meta//\//_}.log"
    [[ "${CI:-}" == true || "${TPE_REQUIRE_KERNEL:-}" == 1 ]] && overall=1
    entries+=("MISSING|$meta: MISSING (kernel could not be fetched or prepared, see $CACHE/prepare-${meta//\//_}.log)")
    continue
  fi
  if [[ -n "${TPE_VM_PREPARE_ONLY:-}" ]]; then
    entries+=("PREPARED|$meta $KVER: prepared in $KDIR")
    continue
  fi
  OUT=${TPE_VM_RESULTS:-$CACHE/results}/$KVER
  rm -rf "$OUT" && mkdir -p "$OUT"
  while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n; done
  start=$(date +%s)
  echo "== $meta -> $KVER: booting (results in $OUT)"
  run_and_judge "$meta" "$start" &
  entries+=("RAN|$OUT")
done
wait
echo "== kernel matrix"
for e in "${entries[@]}"; do
  kind=${e%%|*} rest=${e#*|}
  if [[ $kind == RAN ]]; then
    cat "$rest/report" 2>/dev/null
    line=$(cat "$rest/summary" 2>/dev/null || echo "${rest##*/}: FAIL: no summary written")
  else
    line=$rest
  fi
  [[ $kind == RAN && "$line" != *": PASS: "* ]] && overall=1
  summary+=("$line")
done
printf '%s\n' "${summary[@]}"
exit $overall
