#!/usr/bin/env bash
# Instructions per call, counted by valgrind's callgrind: the figure that stays put on a
# shared, noisy machine (the same binary and inputs give the same count, whatever else the
# machine is doing), so a change's cost or gain is read here and its calls/s in the load
# benches. One process runs under callgrind twice, serving mcpload's N1 then N2 echo calls
# (c=4, after the same warm-up); the difference of the two totals over N2 - N1 is the cost
# of one call, start-up and shutdown cancelled out. Per thread too (`--separate-threads`):
# the request's thread and, under full tracing, the exporter's batch thread.
#
#   benches/callgrind.sh SCENARIO [N1 N2]
#
# SCENARIO is what runs under callgrind:
#   stdio-off | stdio-metrics | stdio-full   `serve --stdio --workers 1`, telemetry off /
#       metrics only / metrics + traces at 100%, exported over OTLP/HTTP to a local sink
#   http-off | http-metrics | http-full      the same over Streamable HTTP (`serve --http`,
#       legacy sessions: mcpload's default revision)
#   gateway        `serve --stdio` whose one stdio source is `serve --stdio` (gateway-load.sh)
#   nats-gateway   `serve --stdio --nats` forwarding to one worker (nats-load.sh)
#   nats-worker    that worker
#   span-floor     not a server: the OpenTelemetry SDK alone making N1 then N2 spans like the
#       server's per-call span, handed to a processor that drops each as it ends
#       (plugins/otel/examples/sdk_span_floor.rs): the floor under full tracing's cost
# TOOLYARD_BIN: the build to count (default: cargo's release build). CONCURRENCY: mcpload's
# calls in flight (default 4). PROTOCOL: the revision
# mcpload speaks (default 2025-06-18; 2026-07-28 for the stateless one). ANNOTATE=1 keeps the
# callgrind files and prints where they are, for callgrind_annotate. Needs valgrind,
# ../shared/mcpload, and for the NATS scenarios scripts/install-test-deps' nats-server.
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:?usage: benches/callgrind.sh SCENARIO [N1 N2]}
n1=${2:-2000}; n2=${3:-8000}
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
export CARGO_TARGET_DIR=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && cargo build --release -q)
[ -n "${TOOLYARD_BIN:-}" ] || cargo build --release -q -p toolyard-cli --bins
[ "$scenario" != span-floor ] || cargo build --release -q -p toolyard-otel --example sdk_span_floor
M=$CARGO_TARGET_DIR/release/mcpload; T=${TOOLYARD_BIN:-$CARGO_TARGET_DIR/release/toolyard}
NATS=${NATS_SERVER:-${TOOLYARD_CACHE:-$HOME/.cache/toolyard}/venv/bin/nats-server}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "${ANNOTATE:-}" ]; then echo "callgrind files kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
CG=(valgrind --tool=callgrind --separate-threads=yes --dump-line=no)
tool=echo
env_of=()
case $scenario in
  stdio-off | stdio-metrics | stdio-full | http-off | http-metrics | http-full) ;;
  gateway | nats-gateway | nats-worker) ;;
  span-floor) ;;
  *) echo "unknown scenario: $scenario" >&2; exit 2 ;;
esac
if [[ $scenario == *-metrics || $scenario == *-full ]]; then
  # The OTLP/HTTP receiver: answers 200 to whatever it is sent.
  sink_port=$((20000 + RANDOM % 20000))
  python3 benches/otlp-sink.py "$sink_port" &
  pids+=($!)
  env_of=(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$sink_port)
  [[ $scenario == *-metrics ]] && env_of+=(OTEL_TRACES_EXPORTER=none)
  [[ $scenario == *-full ]] && env_of+=(OTEL_TRACES_SAMPLER=always_on)
fi
served=("$T" serve --stdio --workers 1)
[[ $scenario == http-* ]] && served=("$T" serve --workers 1)
if [ "$scenario" = gateway ]; then
  printf '[[sources]]\nname = "up"\ncommand = "%s"\nargs = ["serve", "--stdio", "--workers", "1"]\naliases = { echo = "echo" }\n' "$T" > "$work/gw.toml"
  served=("$T" serve --stdio --workers 1 --config "$work/gw.toml")
fi
if [[ $scenario == nats-* ]]; then
  port=$((20000 + RANDOM % 20000)); url=nats://127.0.0.1:$port
  "$NATS" -a 127.0.0.1 -p "$port" -js -sd "$work/js" > "$work/nats.log" 2>&1 &
  pids+=($!)
  sleep 1
  served=("$T" serve --stdio --workers 1 --nats "$url")
  tool=calc__echo
fi
# Starts the worker (under callgrind when it is the one counted) for one run; its catalog
# entry is up once a gateway lists its tool.
start_worker() { # $1 = callgrind output file or ""
  local cmd=("$T" worker --nats "$url" --name calc --workers 1)
  [ -z "$1" ] || cmd=("${CG[@]}" --callgrind-out-file="$1" "${cmd[@]}")
  "${cmd[@]}" 2> "$work/worker.log" &
  worker=$!
  for _ in $(seq 100); do
    grep -q "serving on" "$work/worker.log" && return 0
    sleep 0.2
  done
  echo "the worker did not start:" >&2; cat "$work/worker.log" >&2; exit 1
}
run() { # $1 = calls, $2 = output file prefix
  if [ "$scenario" = span-floor ]; then
    "${CG[@]}" --callgrind-out-file="$2.%p" "$CARGO_TARGET_DIR/release/examples/sdk_span_floor" "$1" \
      > "$work/floor.$1" 2>&1 || { cat "$work/floor.$1" >&2; exit 1; }
    return
  fi
  local cmd=("${served[@]}")
  if [ "$scenario" = nats-worker ]; then
    start_worker "$2.%p"
  else
    cmd=(env "${env_of[@]}" "${CG[@]}" --callgrind-out-file="$2.%p" "${cmd[@]}")
    [[ $scenario == nats-* ]] && start_worker ""
  fi
  local transport=(stdio -- "${cmd[@]}")
  if [[ $scenario == http-* ]]; then
    # mcpload starts the server, and stops it with SIGTERM: it drains and exits.
    local port=$((20000 + RANDOM % 20000))
    transport=(http "http://127.0.0.1:$port/mcp" --spawn "${cmd[*]} --http 127.0.0.1:$port")
  fi
  "$M" -c "${CONCURRENCY:-4}" -n "$1" --warmup 500 --timeout 120 --startup-timeout 120 \
    --protocol-version "${PROTOCOL:-2025-06-18}" --tool "$tool" "${transport[@]}" > "$work/mcpload.$1" 2>&1 \
    || { cat "$work/mcpload.$1" >&2; exit 1; }
  if [[ $scenario == nats-* ]]; then
    kill -TERM "$worker"
    wait "$worker" || true
  fi
  # callgrind writes its files as the process exits; mcpload may return first.
  for _ in $(seq 300); do
    ls "$2".* > /dev/null 2>&1 && ! pgrep -f "callgrind-out-file=$2" > /dev/null && break
    sleep 0.2
  done
}
run "$n1" "$work/a"
run "$n2" "$work/b"
python3 - "$work" "$n1" "$n2" "$scenario" <<'PY'
import glob, os, re, sys
work, n1, n2, scenario = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def threads(prefix):
    out = {}
    for f in glob.glob(f"{work}/{prefix}.*"):
        if os.path.getsize(f) == 0:  # the name without a thread suffix, left empty
            continue
        m = re.search(r"-(\d+)$", f)
        total = next(int(l.split()[1]) for l in open(f) if l.startswith(("summary:", "totals:")))
        out[int(m.group(1)) if m else 1] = total
    return out
a, b = threads("a"), threads("b")
per = {t: (b.get(t, 0) - a.get(t, 0)) / (n2 - n1) for t in sorted(set(a) | set(b))}
print(f"{scenario}: {sum(per.values()):.0f} instructions per call ({n1} and {n2} calls)")
for t, v in per.items():
    if abs(v) >= 50:
        print(f"  thread {t}: {v:.0f}")
PY
