#!/usr/bin/env bash
# mcpload over stdio: the demo `echo` served directly (`toolyard serve --stdio`) against the
# same tool served by a `toolyard worker` on a NATS bus behind `toolyard serve --stdio --nats`
# (`calc__echo`), interleaved in one run, c = 1, 16, 64. Prints medians, the per-round ratio
# of forwarded to direct calls/s, the added p50 latency, the worker's CPU per forwarded call,
# and the CPU per call of the process mcpload serves through (the direct server, or the
# gateway), all from /proc (user + system; the served process's for its whole life, start-up
# included, read as it exits). Needs ../shared/mcpload and scripts/install-test-deps'
# nats-server. Cores: mcpload and nats-server on 0, the servers on 1. Each round also runs
# async-nats request/reply alone (plugins/nats/examples/bare_request_reply.rs) at the same
# concurrency: the client library's own CPU per request, the floor under the gateway's; the
# gateway does the direct server's work besides, so its ratio to the direct server cannot go
# under 1 + that, which is printed too.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/nats-bus.sh
out=${OUT:-/tmp/toolyard-nats-load.jsonl}; : > "$out"
cpu() { awk '{print $14 + $15}' "/proc/$worker_pid/stat"; }
# The server's CPU is read as it exits (benches/served-cpu.py). Nothing runs beside the calls
# while they run: sampling the server's ticks every 20 ms with pgrep and awk (as this script
# did up to stop 39) started ~150 processes a second on the cores under test, which put a
# ~3 ms tail on 1% of the calls at c=1 (p99 3.2 ms against 0.23-0.30 ms without it) and took
# CPU from the servers.
for rep in $(seq "${REPEATS:-3}"); do for c in 1 16 64; do
  # COMPARE_BIN: another build's gateway against the same worker, in the same rounds.
  configs=("direct|$T serve --stdio --workers 1|echo" "nats|$T serve --stdio --workers 1 --nats $url|calc__echo")
  [ -z "${COMPARE_BIN:-}" ] || configs+=("nats-prev|$COMPARE_BIN serve --stdio --workers 1 --nats $url|calc__echo")
  for s in "${configs[@]}"; do
    IFS='|' read -r label cmd tool <<< "$s"
    before=$(cpu)
    rm -f "$work/served"
    timeout 60 taskset -c 0 "$M/mcpload" --json --label "$label" -c "$c" -d "${DURATION:-2}" --warmup 500 \
      --protocol-version 2025-06-18 --tool "$tool" stdio -- taskset -c 1 python3 benches/served-cpu.py "$work/served" $cmd > "$work/line"
    for _ in $(seq 50); do [ -s "$work/served" ] && break; sleep 0.1; done
    line=$(cat "$work/line")
    after=$(cpu)
    python3 -c "import json,os,sys; r=json.loads(sys.argv[1]); r['worker_ticks']=$after-$before; r['served_ticks']=round(float(sys.argv[2]) * os.sysconf('SC_CLK_TCK')); print(json.dumps(r))" "$line" "$(cat "$work/served")" >> "$out"
  done
  # The same concurrency through async-nats alone, requester where the gateway runs.
  timeout 60 taskset -c 1 "$BARE" request "$url" bare.echo "$c" "${DURATION:-2}" >> "$out"
done; done
python3 - "$out" <<'PY'
import json, os, statistics as st, collections, sys
hz = os.sysconf("SC_CLK_TCK")
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[(r['label'], r['concurrency'])].append(r)
for (lab, c), rs in sorted(d.items(), key=lambda x: (x[0][1], x[0][0])):
    if lab == 'bare':
        continue

    calls = [max(r['ok'] + r['warmup'], 1) for r in rs]  # warm-up calls run on the servers too
    wcpu = [r['worker_ticks'] / hz * 1e6 / n for r, n in zip(rs, calls)]
    scpu = [r['served_ticks'] / hz * 1e6 / n for r, n in zip(rs, calls)]
    print(f"{lab:7} c={c:3} {st.median(r['calls_per_s'] for r in rs):>8.0f}/s "
          f"p50={st.median(r['latency_us']['p50'] for r in rs)}us p99={st.median(r['latency_us']['p99'] for r in rs)}us "
          f"served_cpu={st.median(scpu):.1f}us/call"
          + (f" worker_cpu={st.median(wcpu):.1f}us/call" if lab.startswith('nats') else '')
          + f" errors={sum(r['errors'] for r in rs)}")
for lab, c in sorted(k for k in d if k[0] == 'nats-prev'):
    cpu = [(a['served_ticks'] / max(a['ok'] + a['warmup'], 1)) / max(b['served_ticks'] / max(b['ok'] + b['warmup'], 1), 1e-9)
           for a, b in zip(d[('nats', c)], d[('nats-prev', c)])]
    print(f"nats/nats-prev c={c}: gateway CPU per call, this build / the compared one: median {st.median(cpu):.2f}")
for c in (1, 16, 64):
    rat = [a['calls_per_s'] / b['calls_per_s'] for a, b in zip(d[('nats', c)], d[('direct', c)])]
    added = [a['latency_us']['p50'] - b['latency_us']['p50'] for a, b in zip(d[('nats', c)], d[('direct', c)])]
    cpu = [(a['served_ticks'] / max(a['ok'] + a['warmup'], 1)) / max(b['served_ticks'] / max(b['ok'] + b['warmup'], 1), 1e-9)
           for a, b in zip(d[('nats', c)], d[('direct', c)])]
    print(f"nats/direct c={c}: median calls/s ratio {st.median(rat):.2f}, added p50 {st.median(added):.0f} us, "
          f"gateway CPU per call / direct server's {st.median(cpu):.2f}")
per_call = lambda r: r['served_ticks'] / hz * 1e6 / max(r['ok'] + r['warmup'], 1)
for c in (1, 16, 64):
    bare = d.get(('bare', c))
    if not bare:
        continue
    bcpu = [r['cpu_ticks'] / hz * 1e6 / max(r['ok'], 1) for r in bare]
    floor = [b / max(per_call(a), 1e-9) for b, a in zip(bcpu, d[('direct', c)])]
    above = [per_call(a) / max(b, 1e-9) for a, b in zip(d[('nats', c)], bcpu)]
    print(f"bare async-nats c={c}: {st.median(r['ok'] / r['seconds'] for r in bare):.0f}/s, "
          f"p50={st.median(r['latency_us']['p50'] for r in bare)}us p99={st.median(r['latency_us']['p99'] for r in bare)}us, requester CPU "
          f"{st.median(bcpu):.1f} us/request = {st.median(floor):.2f}x the direct server's CPU per call; "
          f"the gateway's CPU per forwarded call = {st.median(above):.2f}x the bare requester's")
    # The floor under the goal's ratio: the gateway does the direct server's work on its
    # stdio side (read, parse, dispatch, write the answer) and then a request on the bus.
    gw = [per_call(a) / max(per_call(b), 1e-9) for a, b in zip(d[('nats', c)], d[('direct', c)])]
    print(f"  floor for gateway CPU / direct server's c={c}: 1 + bare/direct = {st.median(1 + f for f in floor):.2f}; "
          f"the gateway is at {st.median(g / (1 + f) for g, f in zip(gw, floor)):.2f}x that floor")
PY
