#!/usr/bin/env bash
# The added p50 latency of a forwarded call at c = 1 (issue 14's < 200 µs goal) under two
# placements of the processes on a 2-core machine, interleaved in one run, REPEATS rounds:
#
#   spread   nats-load.sh's layout: mcpload and nats-server on core 0, the gateway (or the
#            direct server) and the worker on core 1, so every hop of a forwarded call
#            (mcpload -> gateway -> broker -> worker -> broker -> gateway -> mcpload) crosses
#            cores, against two crossings for the direct server;
#   paired   mcpload and the gateway on core 0, nats-server and the worker on core 1: two
#            crossings (gateway <-> broker), as with the direct server on core 1.
#
# On a VM a wake-up on the other core costs ~20 µs more than one on the same core (the
# direct server answers in 9 µs at p50 beside mcpload, 46 µs across), so the placement moves
# the added latency by more than anything the gateway does. Prints, per layout, the median
# of the rounds' p50s through the bus, the direct server's, and the difference.
set -euo pipefail
cd "$(dirname "$0")/.."
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
export CARGO_TARGET_DIR=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && cargo build --release -q)
[ -n "${TOOLYARD_BIN:-}" ] || cargo build --release -q -p toolyard-cli --bins
M=$CARGO_TARGET_DIR/release/mcpload; T=${TOOLYARD_BIN:-$CARGO_TARGET_DIR/release/toolyard}
NATS=${NATS_SERVER:-${TOOLYARD_CACHE:-$HOME/.cache/toolyard}/venv/bin/nats-server}
work=$(mktemp -d); out=$work/rounds.jsonl
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
p50() { # label load_core server_core server_command...
  local label=$1 load=$2 server=$3; shift 3
  taskset -c "$load" "$M" --json --label "$label" -c 1 -d "${DURATION:-3}" --warmup 500 \
    --protocol-version 2025-06-18 --tool "$TOOL" stdio -- taskset -c "$server" "$@" >> "$out"
}
for layout in spread paired; do
  if [ $layout = spread ]; then broker=0; worker=1; gateway=1; else broker=1; worker=1; gateway=0; fi
  port=$((20000 + RANDOM % 20000)); url=nats://127.0.0.1:$port
  taskset -c $broker "$NATS" -a 127.0.0.1 -p "$port" -js -sd "$work/js-$layout" > "$work/nats-$layout.log" 2>&1 &
  pids+=($!)
  sleep 0.5
  taskset -c $worker "$T" worker --nats "$url" --name calc --workers 1 2> "$work/worker-$layout.log" &
  pids+=($!)
  sleep 1.5
  echo "$url" > "$work/url-$layout"
done
for rep in $(seq "${REPEATS:-3}"); do
  TOOL=echo p50 direct 0 1 "$T" serve --stdio --workers 1
  TOOL=calc__echo p50 spread 0 1 "$T" serve --stdio --workers 1 --nats "$(cat "$work/url-spread")"
  TOOL=calc__echo p50 paired 0 0 "$T" serve --stdio --workers 1 --nats "$(cat "$work/url-paired")"
done
python3 - "$out" <<'PY'
import json, statistics as st, collections, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[r['label']].append(r['latency_us']['p50'])
direct = st.median(d['direct'])
print(f"direct (mcpload on core 0, server on 1): p50 {direct:.0f} us (rounds {' '.join(f'{x:.0f}' for x in d['direct'])})")
for layout in ('spread', 'paired'):
    through = st.median(d[layout])
    print(f"{layout}: p50 through the bus {through:.0f} us (rounds {' '.join(f'{x:.0f}' for x in d[layout])}), "
          f"added {through - direct:.0f} us")
PY
