#!/usr/bin/env bash
# e2e tier: the HTTP server cannot be starved by slow or hostile clients.
#   slow_clients_test.sh BINARY SOURCE_DIR
# With config/default.json on a free loopback port, plain HTTP then TLS:
#  - slowloris: 100 sockets each dripping one header byte a second, never ending the request;
#    meanwhile scrapes (curl --max-time 1) must all succeed, and the server must close every
#    dripping socket itself within ~10 s (a total header deadline, not an idle timeout);
#  - HTTP/1.1: 3 pipelined GETs in one write get 3 responses in order; HEAD, 404 and
#    "Connection: close" in a pipeline;
#  - basic auth (bcrypt cost 12): a wrong password and an unknown user both get 401 and take
#    about as long (no user enumeration); the right password succeeds within 1 s while wrong
#    passwords are being checked in parallel;
#  - pipelined flood: 256 connections from 127.0.0.1-4, 50 pipelined GETs each, reading
#    nothing; scrapes meanwhile must all succeed (one rendered page per 100 ms is shared).
# Every loop is bounded in count and time; every process started here is killed on exit.
set -uo pipefail
BIN=$1 SRC=$2
WORK=$(mktemp -d)
BG=()
cleanup() {
  [[ -n "${DAEMON_PID:-}" ]] && kill "$DAEMON_PID" 2>/dev/null
  for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
source "$SRC/tests/testing/daemon.sh"
if [[ $(id -u) -ne 0 ]]; then
  echo "slow clients e2e skipped: needs root to open tracepoint perf events"
  [[ "${TPE_REQUIRE_KERNEL:-}" == 1 ]] && exit 1
  exit 0
fi

# The clients: python3 standard library only.
cat >"$WORK/clients.py" <<'PY'
import socket, ssl, sys, time, select

def connect(port, cafile, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if cafile:
        ctx = ssl.create_default_context(cafile=cafile)
        s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
    return s

def slowloris(port, n, seconds, tls):
    """n sockets, each sends a request start, then one more header byte every second, never the
    blank line that ends the headers. Reports how many the server closed, and after how long."""
    if tls:  # a TLS record header announcing a 512-byte ClientHello, then its bytes one by one
        start, drip = b"\x16\x03\x01\x02\x00", b"\x01"
    else:
        start, drip = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Slow: 1\r\n"
    socks, opened, refused, lives = {}, 0, 0, []
    t0 = time.monotonic()
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(start)
            s.setblocking(False)
            socks[s] = [time.monotonic(), 0]
            opened += 1
        except OSError:
            refused += 1
    print(f"slowloris: {opened} open, {refused} refused", flush=True)
    deadline = t0 + seconds
    next_drip = time.monotonic() + 1
    while socks and time.monotonic() < deadline:
        r, _, _ = select.select(list(socks), [], [], max(0.0, min(next_drip, deadline) - time.monotonic()))
        closed = []
        for s in r:
            try:
                if s.recv(65536) == b"":
                    closed.append(s)
            except BlockingIOError:
                pass
            except OSError:
                closed.append(s)
        if time.monotonic() >= next_drip:
            next_drip += 1
            for s, st in socks.items():
                if s in closed:
                    continue
                try:
                    s.send(drip[st[1] % len(drip):][:1])
                    st[1] += 1
                except BlockingIOError:
                    pass
                except OSError:
                    closed.append(s)
        for s in set(closed):
            lives.append(time.monotonic() - socks.pop(s)[0])
            s.close()
    print(f"RESULT opened={opened} refused={refused} closed_by_server={len(lives)} "
          f"max_life={max(lives) if lives else 0:.1f} still_open={len(socks)}", flush=True)

def read_responses(data, heads):
    """Parses HTTP/1.1 responses; heads[i] says whether request i was a HEAD (no body)."""
    out = []
    while data and len(out) < len(heads):
        end = data.find(b"\r\n\r\n")
        if end < 0:
            break
        lines = data[:end].decode("latin-1").split("\r\n")
        hdr = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
        length = 0 if heads[len(out)] else int(hdr.get("content-length", "0"))
        out.append((lines[0], hdr.get("content-type", "-"), len(data[end + 4:end + 4 + length])))
        data = data[end + 4 + length:]
    return out

def pipeline(port, cafile, requests):
    """Sends every request in one write; reads until the server closes (<= 30 s)."""
    s = connect(port, cafile)
    s.sendall("".join(requests).encode())
    data, t0 = b"", time.monotonic()
    while time.monotonic() - t0 < 30:  # the server closes after "Connection: close"
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ssl.SSLError, OSError):
            break
        if not chunk:
            print("server closed the connection")
            break
        data += chunk
    for status, ctype, n in read_responses(data, [r.startswith("HEAD") for r in requests]):
        print(f"RESPONSE {status} | {ctype} | {n} body bytes")

def flood(port, conns, gets, seconds):
    """conns connections from 127.0.0.1-4, each sends `gets` pipelined GET /metrics in one write
    and reads nothing for `seconds` (a flood like this, 512 x 50 GETs, rendered the page once per
    request and starved real scrapes)."""
    req = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * gets
    socks, failed = [], 0
    for i in range(conns):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(2)
            s.bind((f"127.0.0.{1 + i % 4}", 0))
            s.connect(("127.0.0.1", port))
            s.setblocking(False)
            try:
                s.send(req)
            except BlockingIOError:
                pass
            socks.append(s)
        except OSError:
            failed += 1
    time.sleep(seconds)
    print(f"RESULT opened={len(socks)} failed={failed}")
    for s in socks:
        s.close()

if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "flood":
        flood(port, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    elif mode == "slowloris":
        slowloris(port, int(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "tls")
    elif mode == "pipeline":
        cafile = sys.argv[3] or None
        get = lambda path, extra="": f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n"
        if sys.argv[4] == "gets":
            pipeline(port, cafile, [get("/metrics"), get("/"), get("/metrics", "Connection: close\r\n")])
        else:
            pipeline(port, cafile, ["HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                                    get("/nope", "Connection: close\r\n"), get("/")])
PY

# slowloris_round NAME URL CAFILE: 100 dripping sockets for 15 s, scrapes meanwhile.
slowloris_round() {
  local name=$1 url=$2 cafile=$3 tls=plain
  local curl_tls=()
  [[ -n "$cafile" ]] && { tls=tls; curl_tls=(--cacert "$cafile"); }
  timeout 30 python3 "$WORK/clients.py" slowloris "$DAEMON_PORT" 100 15 "$tls" >"$WORK/slow.out" 2>&1 &
  local slow=$!
  BG+=("$slow")
  sleep 2  # let all 100 connect and start dripping
  local ok=0 n=0 times=""
  for _ in $(seq 1 8); do  # 8 scrapes over ~10 s
    local t
    t=$(curl -s -o "$WORK/scrape" -w '%{http_code} %{time_total}' --max-time 1 "${curl_tls[@]}" "$url/metrics")
    n=$((n + 1))
    times+=" ${t#* }"
    [[ "${t%% *}" == 200 ]] && grep -q '^context_switches_total ' "$WORK/scrape" && ok=$((ok + 1))
    sleep 1
  done
  check "$name: $ok of $n scrapes answered within 1 s with 100 slow sockets open (seconds:$times)" test "$ok" == "$n"
  wait "$slow"
  cat "$WORK/slow.out"
  local res
  res=$(grep '^RESULT' "$WORK/slow.out")
  local opened closed life
  opened=$(sed -n 's/.*opened=\([0-9]*\).*/\1/p' <<<"$res")
  closed=$(sed -n 's/.*closed_by_server=\([0-9]*\).*/\1/p' <<<"$res")
  life=$(sed -n 's/.*max_life=\([0-9.]*\).*/\1/p' <<<"$res")
  check "$name: all 100 slow sockets accepted (${opened:-?})" test "${opened:-0}" == 100
  check "$name: the server closed every slow socket (${closed:-?} of 100) within 13 s (longest ${life:-?} s)" \
    bash -c "[[ '${closed:-0}' == 100 ]] && awk 'BEGIN { exit !(${life:-99} <= 13) }'"
}

# pipeline_round NAME CAFILE
pipeline_round() {
  local name=$1 cafile=$2
  timeout 10 python3 "$WORK/clients.py" pipeline "$DAEMON_PORT" "$cafile" gets >"$WORK/pipe" 2>&1
  cat "$WORK/pipe"
  local got
  got=$(awk -F' [|] ' '/^RESPONSE/ { sub(/^RESPONSE HTTP\/1.1 /, "", $1); printf "%s %s; ", $1, $2 }' "$WORK/pipe")
  check "$name: 3 pipelined GETs → 3 responses 200, in order (/metrics, /, /metrics)" test "$got" == \
    "200 OK text/plain; version=0.0.4; charset=utf-8; 200 OK text/html; charset=utf-8; 200 OK text/plain; version=0.0.4; charset=utf-8; "
  timeout 10 python3 "$WORK/clients.py" pipeline "$DAEMON_PORT" "$cafile" head >"$WORK/pipe" 2>&1
  cat "$WORK/pipe"
  got=$(awk -F' [|] ' '/^RESPONSE/ { sub(/^RESPONSE HTTP\/1.1 /, "", $1); printf "%s, %s; ", $1, $3 }' "$WORK/pipe")
  check "$name: pipelined HEAD → 200 without a body, /nope with Connection: close → 404, then closed ($got)" \
    bash -c "[[ '$got' == '200 OK, 0 body bytes; 404 Not Found, 10 body bytes; ' ]] && grep -q 'server closed the connection' '$WORK/pipe'"
}

# Plain HTTP, no auth.
start_daemon "$BIN" "$SRC/config/default.json" "$WORK/log"
check "daemon started with config/default.json" test -n "$DAEMON_PORT"
[[ -z "$DAEMON_PORT" ]] && { cat "$WORK/log"; echo "$passes passed, $((fails)) failed"; exit 1; }
slowloris_round "HTTP" "http://127.0.0.1:$DAEMON_PORT" ""
pipeline_round "HTTP" ""

# Pipelined flood: 256 connections from 4 addresses, 50 pipelined GETs each, reading nothing.
# Concurrent scrapes share one rendered page per 100 ms (PageCache), so real scrapes still get
# answers (before: they failed for ~8 s and the daemon burnt 19 s of CPU in 36 s).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$DAEMON_PID/stat"; }
ticks0=$(cpu_ticks)
timeout 40 python3 "$WORK/clients.py" flood "$DAEMON_PORT" 256 50 12 >"$WORK/flood.out" 2>&1 &
flood=$!
BG+=("$flood")
sleep 2
ok=0 n=0 times=""
for _ in $(seq 1 8); do
  t=$(curl -s -o "$WORK/scrape" -w '%{http_code} %{time_total}' --max-time 2 "http://127.0.0.1:$DAEMON_PORT/metrics")
  n=$((n + 1))
  times+=" ${t#* }"
  [[ "${t%% *}" == 200 ]] && grep -q '^context_switches_total ' "$WORK/scrape" && ok=$((ok + 1))
  sleep 1
done
wait "$flood"
cat "$WORK/flood.out"
echo "daemon CPU during the flood: $(( $(cpu_ticks) - ticks0 )) ticks of $(getconf CLK_TCK)/s (information, not a check)"
check "pipelined flood: $ok of $n scrapes answered within 2 s (seconds:$times)" test "$ok" == "$n"
check "pipelined flood: the daemon still serves after the flood" curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$DAEMON_PORT/metrics"
check "HTTP: HEAD /metrics" bash -c "curl -sfI --max-time 2 http://127.0.0.1:$DAEMON_PORT/metrics | grep -qi '^content-type: text/plain'"
kill "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=""

# Basic auth with bcrypt cost 12 (~0.2-0.4 s a check).
HASH=$(python3 -W ignore -c 'import crypt; print(crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=4096)))')
printf 'basic_auth_users:\n  prometheus: %s\n' "'$HASH'" >"$WORK/web.yml"
start_daemon "$BIN" "$SRC/config/default.json" "$WORK/log_auth" --web.config.file="$WORK/web.yml"
check "daemon started with basic auth" test -n "$DAEMON_PORT"
URL="http://127.0.0.1:$DAEMON_PORT/metrics"
# timed USER PASSWORD: prints "CODE SECONDS"
timed() { curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 60 -u "$1:$2" "$URL"; }
known=() unknown=() codes=""
for i in 1 2 3; do  # fresh passwords each time: never answered from a cache
  r=$(timed prometheus "wrong$i$RANDOM"); codes+=" ${r%% *}"; known+=("${r#* }")
  r=$(timed "nobody$i" "wrong$i$RANDOM"); codes+=" ${r%% *}"; unknown+=("${r#* }")
done
check "wrong password and unknown user: all 401 (got$codes)" test "$codes" == " 401 401 401 401 401 401"
med() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
kmed=$(med "${known[@]}") umed=$(med "${unknown[@]}")
check "unknown user takes as long as a wrong password (median ${umed} s vs ${kmed} s; wrong ${known[*]}, unknown ${unknown[*]})" \
  awk "BEGIN { exit !($umed >= 0.5 * $kmed && $umed <= 2 * $kmed) }"
r=$(timed prometheus s3cret)
check "right password: 200 (${r})" test "${r%% *}" == 200
wrongs=()
for i in 1 2 3 4; do
  curl -s -o /dev/null --max-time 20 -u "prometheus:parallel$i$RANDOM" "$URL" &
  wrongs+=($!)
  BG+=($!)
done
sleep 0.1
r=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 1 -u prometheus:s3cret "$URL")
check "right password within 1 s while 4 wrong passwords are checked (${r})" test "${r%% *}" == 200
for p in "${wrongs[@]}"; do wait "$p"; done
kill "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=""

# TLS: the same slowloris (dripping a ClientHello) and pipelining.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext "subjectAltName=IP:127.0.0.1" \
  -keyout "$WORK/server.key" -out "$WORK/server.crt" >/dev/null 2>&1
printf 'tls_server_config:\n  cert_file: %s\n  key_file: %s\n' "$WORK/server.crt" "$WORK/server.key" >"$WORK/web_tls.yml"
start_daemon "$BIN" "$SRC/config/default.json" "$WORK/log_tls" --web.config.file="$WORK/web_tls.yml"
check "daemon started with TLS" test -n "$DAEMON_PORT"
slowloris_round "TLS" "https://127.0.0.1:$DAEMON_PORT" "$WORK/server.crt"
pipeline_round "TLS" "$WORK/server.crt"
kill "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=""

echo "$passes passed, $fails failed"
[[ $fails == 0 ]]
