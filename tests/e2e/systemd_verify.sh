#!/usr/bin/env bash
# e2e tier: `systemd-analyze verify` on the shipped unit, with ExecStart pointed at the built
# binary (verify checks that the executable exists).   systemd_verify.sh SOURCE_DIR BINARY
set -uo pipefail
SRC=$1 BIN=$2
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd unit check skipped: systemd-analyze is not installed"
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The unit documents man:tracepoint_exporter(1): verify looks it up; use the built one.
export MANPATH="$(dirname "$BIN")/man:"
sed "s|/usr/bin/tracepoint_exporter|$BIN|" "$SRC/systemd/tracepoint_exporter.service" >"$WORK/tracepoint_exporter.service"
out=$(systemd-analyze verify "$WORK/tracepoint_exporter.service" 2>&1)
rc=$?
# Lines about other units on this machine are not ours.
ours=$(printf '%s\n' "$out" | grep -F tracepoint_exporter.service || true)
if [[ $rc -ne 0 || -n "$ours" ]]; then
  printf '%s\n' "$out"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "systemd-analyze verify: clean"
echo "1 passed, 0 failed"
