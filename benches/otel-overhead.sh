#!/usr/bin/env bash
# The cost of OpenTelemetry: mcpload at c=16 against `toolyard serve` over stdio and over
# Streamable HTTP with telemetry off, metrics only (OTEL_TRACES_EXPORTER=none), and metrics +
# traces sampled at 100%, both exported over OTLP/HTTP to a local receiver (a Python sink that
# answers 200), interleaved in one run. Prints median calls/s per mode, the ratio to "off" per
# round, and the server's CPU per call (user + system: over HTTP from /proc during the run,
# over stdio for the whole process, start-up included). Needs
# ../shared/mcpload. Cores: mcpload and the sink on 0, the server on 1. COMPARE_BIN: another
# build's "metrics" and "full" modes in the same rounds (rows `metrics-prev` and `full-prev`,
# their ratios to this build's "off"). GRPC=1: a `full-grpc` row, exported over OTLP/gRPC.
set -euo pipefail
cd "$(dirname "$0")/.."
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
export CARGO_TARGET_DIR=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && cargo build --release -q)
[ -n "${TOOLYARD_BIN:-}" ] || cargo build --release -q -p toolyard-cli --bins
M=$CARGO_TARGET_DIR/release/mcpload; T=${TOOLYARD_BIN:-$CARGO_TARGET_DIR/release/toolyard}
out=${OUT:-/tmp/toolyard-otel-overhead.jsonl}; : > "$out"
sink_port=$((20000 + RANDOM % 20000))
taskset -c 0 python3 benches/otlp-sink.py "$sink_port" &
sink=$!
trap 'kill $sink 2>/dev/null' EXIT
sleep 1
endpoint=http://127.0.0.1:$sink_port
modes=("off|env|$T" "metrics|env OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_TRACES_EXPORTER=none|$T" "full|env OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_TRACES_SAMPLER=always_on|$T")
# GRPC=1: full tracing exported over OTLP/gRPC too (a build with the `otel-grpc` feature), to
# rotel from the test venv (scripts/install-test-deps) dropping what it receives.
if [ -n "${GRPC:-}" ]; then
  rotel=$(ls "${TOOLYARD_CACHE:-$HOME/.cache/toolyard}"/venv/lib/python3*/site-packages/rotel/rotel-agent)
  grpc_port=$((20000 + RANDOM % 20000))
  taskset -c 0 "$rotel" start --exporter blackhole --otlp-grpc-endpoint "127.0.0.1:$grpc_port" \
    --otlp-http-endpoint "127.0.0.1:$((grpc_port + 1))" >/dev/null 2>&1 &
  collector=$!
  trap 'kill $sink $collector 2>/dev/null' EXIT
  sleep 1
  modes+=("full-grpc|env OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$grpc_port OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_TRACES_SAMPLER=always_on|$T")
fi
[ -z "${COMPARE_BIN:-}" ] || modes+=("metrics-prev|env OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_TRACES_EXPORTER=none|$COMPARE_BIN" "full-prev|env OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_TRACES_SAMPLER=always_on|$COMPARE_BIN")
for rep in $(seq "${REPEATS:-3}"); do
  for m in "${modes[@]}"; do
    IFS='|' read -r label envs bin <<< "$m"
    cpu_file=$(mktemp -u)
    line=$(timeout 60 taskset -c 0 "$M" --json --label "stdio-$label" -c 16 -d "${DURATION:-3}" --warmup 500 \
      stdio -- taskset -c 1 python3 benches/served-cpu.py "$cpu_file" $envs "$bin" serve --stdio --workers 1)
    for _ in $(seq 50); do [ -s "$cpu_file" ] && break; sleep 0.1; done
    python3 -c "import json,sys; r=json.loads(sys.argv[1]); r['server_seconds']=float(open(sys.argv[2]).read()); print(json.dumps(r))" "$line" "$cpu_file" >> "$out"
    rm -f "$cpu_file"
    port=$((20000 + RANDOM % 20000))
    $envs taskset -c 1 "$bin" serve --http "127.0.0.1:$port" --workers 1 2>/dev/null &
    pid=$!
    sleep 0.5
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    line=$(timeout 60 taskset -c 0 "$M" --json --label "http-$label" -c 16 -d "${DURATION:-3}" --warmup 500 \
      http "http://127.0.0.1:$port/mcp")
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill $pid; wait $pid 2>/dev/null || true
    python3 -c "import json,sys; r=json.loads(sys.argv[1]); r['server_ticks']=$after-$before; print(json.dumps(r))" "$line" >> "$out"
  done
done
python3 - "$out" <<'PY'
import json, os, statistics as st, collections, sys
hz = os.sysconf("SC_CLK_TCK")
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[r['label']].append(r)
for t in ("stdio", "http"):
    base = d[f"{t}-off"]
    for m in ("off", "metrics", "full", "full-grpc", "metrics-prev", "full-prev"):
        rs = d.get(f"{t}-{m}")
        if not rs:
            continue
        ratio = st.median(a['calls_per_s'] / b['calls_per_s'] for a, b in zip(rs, base))
        cpu = ""
        if 'server_ticks' in rs[0]:
            cpu = f" server_cpu={st.median(r['server_ticks'] / hz * 1e6 / max(r['ok'] + r['warmup'], 1) for r in rs):.2f}us/call"
        elif 'server_seconds' in rs[0]:
            cpu = f" server_cpu={st.median(r['server_seconds'] * 1e6 / max(r['ok'] + r['warmup'], 1) for r in rs):.2f}us/call"
        print(f"{t:5} {m:12} {st.median(r['calls_per_s'] for r in rs):>8.0f}/s  vs off {ratio:.3f}  "
              f"p50={st.median(r['latency_us']['p50'] for r in rs)}us errors={sum(r['errors'] for r in rs)}{cpu}")
PY
