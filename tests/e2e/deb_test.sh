#!/usr/bin/env bash
# e2e tier: the .deb (CPack) holds the binary, unit, default config (as a conffile) and man page.
#   deb_test.sh BUILD_DIR
set -uo pipefail
BUILD=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$BUILD" && cpack -G DEB -B "$WORK" >"$WORK/cpack.log" 2>&1) || { cat "$WORK/cpack.log"; echo "0 passed, 1 failed"; exit 1; }
DEB=$(ls "$WORK"/*.deb)
dpkg-deb -c "$DEB" >"$WORK/contents"
fails=0 passes=0
for f in ./usr/bin/tracepoint_exporter ./usr/lib/systemd/system/tracepoint_exporter.service \
         ./etc/tracepoint_exporter/config.json ./usr/share/man/man1/tracepoint_exporter.1; do
  if grep -q " $f$" "$WORK/contents"; then passes=$((passes + 1)); echo "ok: $f"; else fails=$((fails + 1)); echo "FAIL: $f missing"; fi
done
if dpkg-deb -e "$DEB" "$WORK/ctl" && grep -qx /etc/tracepoint_exporter/config.json "$WORK/ctl/conffiles"; then
  passes=$((passes + 1)); echo "ok: config.json is a conffile"
else
  fails=$((fails + 1)); echo "FAIL: config.json is not a conffile"
fi
if dpkg-deb -f "$DEB" Depends | grep -q libprometheus-cpp; then
  passes=$((passes + 1)); echo "ok: Depends: $(dpkg-deb -f "$DEB" Depends)"
else
  fails=$((fails + 1)); echo "FAIL: no shared-library dependencies"
fi
echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
