#!/usr/bin/env bash
# mcpload over stdio: the demo `echo` served directly (`toolyard serve --stdio`) against the
# same tool served by a `toolyard worker` on a NATS bus behind `toolyard serve --stdio --nats`
# (`calc__echo`), interleaved in one run, c = 1, 16, 64. Prints medians, the per-round ratio
# of forwarded to direct calls/s, the added p50 latency, and the worker's CPU per forwarded
# call (from /proc, user + system). Needs ../shared/mcpload and scripts/install-test-deps'
# nats-server. Cores: mcpload and nats-server on 0, the servers on 1.
set -euo pipefail
cd "$(dirname "$0")/.."
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
export CARGO_TARGET_DIR=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && cargo build --release -q)
[ -n "${TOOLYARD_BIN:-}" ] || cargo build --release -q -p toolyard-cli --bins
M=$CARGO_TARGET_DIR/release; T=${TOOLYARD_BIN:-$CARGO_TARGET_DIR/release/toolyard}
NATS=${NATS_SERVER:-${TOOLYARD_CACHE:-$HOME/.cache/toolyard}/venv/bin/nats-server}
out=${OUT:-/tmp/toolyard-nats-load.jsonl}; : > "$out"
work=$(mktemp -d); port=$((20000 + RANDOM % 20000)); url=nats://127.0.0.1:$port
taskset -c 0 "$NATS" -a 127.0.0.1 -p "$port" -js -sd "$work/js" > "$work/nats.log" 2>&1 &
nats_pid=$!
trap 'kill $worker_pid $nats_pid 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
taskset -c 1 "$T" worker --nats "$url" --name calc --workers 1 2> "$work/worker.log" &
worker_pid=$!
sleep 1
cpu() { awk '{print $14 + $15}' "/proc/$worker_pid/stat"; }
for rep in $(seq "${REPEATS:-3}"); do for c in 1 16 64; do
  for s in "direct|$T serve --stdio --workers 1|echo" "nats|$T serve --stdio --workers 1 --nats $url|calc__echo"; do
    IFS='|' read -r label cmd tool <<< "$s"
    before=$(cpu)
    line=$(timeout 60 taskset -c 0 "$M/mcpload" --json --label "$label" -c "$c" -d "${DURATION:-2}" --warmup 500 \
      --protocol-version 2025-06-18 --tool "$tool" stdio -- taskset -c 1 $cmd)
    after=$(cpu)
    python3 -c "import json,sys; r=json.loads(sys.argv[1]); r['worker_ticks']=$after-$before; print(json.dumps(r))" "$line" >> "$out"
  done
done; done
python3 - "$out" <<'PY'
import json, os, statistics as st, collections, sys
hz = os.sysconf("SC_CLK_TCK")
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[(r['label'], r['concurrency'])].append(r)
for (lab, c), rs in sorted(d.items(), key=lambda x: (x[0][1], x[0][0])):

    wcpu = [r['worker_ticks'] / hz * 1e6 / max(r['ok'] + r['warmup'], 1) for r in rs]  # warm-up calls run on the worker too
    print(f"{lab:7} c={c:3} {st.median(r['calls_per_s'] for r in rs):>8.0f}/s "
          f"p50={st.median(r['latency_us']['p50'] for r in rs)}us p99={st.median(r['latency_us']['p99'] for r in rs)}us "
          f"worker_cpu={st.median(wcpu):.1f}us/call errors={sum(r['errors'] for r in rs)}")
for c in (1, 16, 64):
    rat = [a['calls_per_s'] / b['calls_per_s'] for a, b in zip(d[('nats', c)], d[('direct', c)])]
    added = [a['latency_us']['p50'] - b['latency_us']['p50'] for a, b in zip(d[('nats', c)], d[('direct', c)])]
    print(f"nats/direct c={c}: median calls/s ratio {st.median(rat):.2f}, added p50 {st.median(added):.0f} us")
PY
