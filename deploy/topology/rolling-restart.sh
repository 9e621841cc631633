#!/usr/bin/env bash
# The compose topology with real processes and no containers: nats-server (JetStream), an
# OTLP/HTTP receiver, one gateway (`toolyard serve --nats`) and three workers of pool `calc`,
# each started as compose.yaml starts it (same flags, TOOLYARD_* and OTEL_* variables, the
# deploy/config files). Under a steady load of calls through the gateway it
#   1. kills one worker outright (SIGKILL) and starts it again,
#   2. restarts the three workers one by one (SIGTERM, wait for the drain, start again),
# then reports the calls made and failed, and checks that
#   - no call failed outside the window of the SIGKILL (a drained worker fails no call),
#   - the calls that did fail are at most those that could be in flight on the killed worker,
#   - the OTLP receiver got spans from the gateway and from the workers.
#
#   deploy/topology/rolling-restart.sh            # needs a built binary and nats-server
#
# The binary: $TOOLYARD_BIN, else target/debug/toolyard. nats-server: $NATS_SERVER, else the
# one scripts/install-test-deps puts in ${TOOLYARD_CACHE:-~/.cache/toolyard}/venv/bin. Ports
# are picked free. Exit 0 when every check holds; the figures go to stdout either way.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${TOOLYARD_BIN:-$repo/target/debug/toolyard}
cache=${TOOLYARD_CACHE:-$HOME/.cache/toolyard}
nats_server=${NATS_SERVER:-$cache/venv/bin/nats-server}
[ -x "$bin" ] || { echo "rolling-restart: no toolyard binary at $bin (cargo build, or set TOOLYARD_BIN)" >&2; exit 1; }
[ -x "$nats_server" ] || { echo "rolling-restart: no nats-server at $nats_server (run scripts/install-test-deps, or set NATS_SERVER)" >&2; exit 1; }

parallel=${PARALLEL:-4}         # concurrent callers
timeout_ms=${CALL_TIMEOUT_MS:-5000}
drain=${DRAIN_SECONDS:-10}

dir=$(mktemp -d "${TMPDIR:-/tmp}/toolyard-topology.XXXXXX")
pids=()      # the toolyard processes
infra=()     # nats-server and the OTLP receiver, stopped after them
stop_all() { # signal, seconds to wait, pids...
  local sig=$1 secs=$2; shift 2
  [ $# -gt 0 ] || return 0
  kill "-$sig" "$@" 2>/dev/null || true
  for _ in $(seq $((secs * 10))); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}
cleanup() {
  touch "$dir/stop" 2>/dev/null || true
  stop_all TERM $((drain + 3)) "${pids[@]}"   # toolyard first, while NATS is still up
  stop_all TERM 5 "${infra[@]}"
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

nats_port=$(free_port) http_port=$(free_port) otlp_port=$(free_port)
nats=nats://127.0.0.1:$nats_port

# --- an OTLP/HTTP receiver: keeps every POST body (protobuf) ---------------------------
mkdir -p "$dir/otlp"
python3 - "$otlp_port" "$dir/otlp" <<'PY' &
import http.server, itertools, sys
port, out = int(sys.argv[1]), sys.argv[2]
seq = itertools.count()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = self.path.strip("/").replace("/", "_")
        with open(f"{out}/{next(seq):06d}-{kind}.pb", "wb") as f:
            f.write(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
infra+=($!)

"$nats_server" -js -a 127.0.0.1 -p "$nats_port" -sd "$dir/js" >"$dir/nats.log" 2>&1 &
infra+=($!)

common_env=(
  TOOLYARD_NATS="$nats" TOOLYARD_LOG=info TOOLYARD_DRAIN_SECONDS="$drain"
  TOOLYARD_STATE_SECRET=topology-test
  OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port" OTEL_METRIC_EXPORT_INTERVAL=1000
)
worker_pid=()
start_worker() { # index
  env "${common_env[@]}" TOOLYARD_CONFIG="$repo/deploy/config/worker.toml" \
    OTEL_SERVICE_NAME=toolyard-worker-calc \
    "$bin" worker --nats "$nats" --name calc >>"$dir/worker-$1.log" 2>&1 &
  worker_pid[$1]=$!
  pids+=($!)
}
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$nats_port") 2>/dev/null && break; sleep 0.1; done
for i in 0 1 2; do start_worker "$i"; done
env "${common_env[@]}" TOOLYARD_CONFIG="$repo/deploy/config/gateway.toml" OTEL_SERVICE_NAME=toolyard-gateway \
  "$bin" serve --http "127.0.0.1:$http_port" --nats "$nats" --prometheus >"$dir/gateway.log" 2>&1 &
pids+=($!)
url=http://127.0.0.1:$http_port/mcp
listed() { local out; out=$("$bin" client --url "$url" --timeout-ms 1000 tools 2>/dev/null) || return 1; [[ $out == *'"calc__echo"'* ]]; }
for _ in $(seq 100); do listed && break; sleep 0.1; done
listed || { echo "rolling-restart: the gateway never listed calc__echo" >&2; tail "$dir"/*.log >&2; exit 1; }

# --- load: each caller alternates a quick echo and a 300 ms `slow` call --------------------
caller() { # id
  local n=0 start end rc
  while [ ! -e "$dir/stop" ]; do
    n=$((n + 1))
    start=$(now)
    if (( n % 2 )); then
      "$bin" client --url "$url" --timeout-ms "$timeout_ms" call calc__echo --args "{\"message\":\"$1-$n\"}" >/dev/null 2>"$dir/err-$1-$n" && rc=0 || rc=$?
    else
      "$bin" client --url "$url" --timeout-ms "$timeout_ms" call calc__slow --args '{"steps":3,"delay_ms":100}' >/dev/null 2>"$dir/err-$1-$n" && rc=0 || rc=$?
    fi
    end=$(now)
    echo "$start $end $rc $1-$n" >>"$dir/calls-$1"
    [ "$rc" = 0 ] && rm -f "$dir/err-$1-$n"
  done
}
callers=()
for c in $(seq "$parallel"); do caller "$c" & callers+=($!); done

sleep 3
kill_at=$(now)
kill -KILL "${worker_pid[1]}"
wait "${worker_pid[1]}" 2>/dev/null || true
sleep 1
start_worker 1
sleep 3
restart_from=$(now)
for i in 0 1 2; do
  kill -TERM "${worker_pid[$i]}"
  wait "${worker_pid[$i]}" 2>/dev/null || true
  start_worker "$i"
  sleep 2
done
restart_to=$(now)
sleep 2
touch "$dir/stop"
wait "${callers[@]}" 2>/dev/null || true
sleep 2 # one more metric export interval, and the batch of spans

# --- figures and checks ------------------------------------------------------------------------
cat "$dir"/calls-* >"$dir/calls"
python3 - "$dir" "$kill_at" "$restart_from" "$restart_to" "$timeout_ms" "$parallel" <<'PY'
import glob, os, sys
d, kill_at, r_from, r_to, timeout_ms, parallel = sys.argv[1], *map(float, sys.argv[2:5]), int(sys.argv[5]), int(sys.argv[6])
calls = [(float(s), float(e), rc, n) for s, e, rc, n in (l.split() for l in open(f"{d}/calls"))]
total = len(calls)
failed = [c for c in calls if c[2] != "0"]
# A call could be in flight on the killed worker if it started before the kill and ended after.
window = [(s, e) for s, e, _, _ in failed if s <= kill_at <= e + 0.05]
outside = [f for f in failed if not (f[0] <= kill_at <= f[1] + 0.05)]
during_restart = sum(1 for s, e, _, _ in calls if s < r_to and e > r_from)
spans = b"".join(open(p, "rb").read() for p in glob.glob(f"{d}/otlp/*v1_traces.pb"))
metrics = b"".join(open(p, "rb").read() for p in glob.glob(f"{d}/otlp/*v1_metrics.pb"))
print(f"calls made: {total} by {parallel} callers; {during_restart} during the rolling restart of 3 workers")
print(f"calls failed: {len(failed)} ({len(window)} in flight when a worker was SIGKILLed, {len(outside)} other)")
for s, e, rc, n in failed:
    err = f"{d}/err-{n}"
    msg = open(err).read().strip().splitlines()[-1][:160] if os.path.exists(err) and os.path.getsize(err) else ""
    print(f"  failed {n}: {s - kill_at:+.2f}s..{e - kill_at:+.2f}s from the kill, exit {rc}: {msg}")
services = [s for s in (b"toolyard-gateway", b"toolyard-worker-calc") if s in spans]
print(f"OTLP: {len(glob.glob(f'{d}/otlp/*v1_traces.pb'))} trace exports ({len(spans)} bytes; services {', '.join(s.decode() for s in services) or 'none'}), "
      f"{len(glob.glob(f'{d}/otlp/*v1_metrics.pb'))} metric exports")
ok = True
if total < 50: print("CHECK FAILED: fewer than 50 calls were made"); ok = False
if outside: print("CHECK FAILED: calls failed that were not in flight on the killed worker"); ok = False
if len(window) > parallel: print("CHECK FAILED: more failures than callers in flight at the kill"); ok = False
if len(services) != 2: print("CHECK FAILED: spans from the gateway and from the workers were expected"); ok = False
if b"calc__echo" not in spans and b"echo" not in spans: print("CHECK FAILED: no span names a called tool"); ok = False
sys.exit(0 if ok else 1)
PY
