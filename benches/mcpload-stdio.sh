#!/usr/bin/env bash
# mcpload over stdio: toolyard (legacy and 2026-07-28) against rmcp's stdio_pipes baseline,
# interleaved in one run, c = 1, 16, 64; prints medians and per-round ratios.
# Needs ../shared/mcpload (the workplace's load generator and baselines).
set -euo pipefail
cd "$(dirname "$0")/.."
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
export CARGO_TARGET_DIR=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && cargo build --release -q)
cargo build --release -q -p toolyard-cli --bins
M=$CARGO_TARGET_DIR/release; T=$CARGO_TARGET_DIR/release/toolyard; out=${OUT:-/tmp/toolyard-mcpload.jsonl}
: > "$out"
for rep in $(seq "${REPEATS:-3}"); do for c in 1 16 64; do
  for s in "rmcp-pipes|$M/rmcp-echo --stdio-pipes|2025-06-18" "toolyard-legacy|$T serve --stdio --workers 1|2025-06-18" \
           "toolyard-modern|$T serve --stdio --workers 1|2026-07-28" "rmcp-pipes-modern|$M/rmcp-echo --stdio-pipes|2026-07-28"; do
    IFS='|' read -r label cmd pv <<< "$s"
    timeout 60 taskset -c 0 "$M/mcpload" --json --label "$label" -c "$c" -d "${DURATION:-2}" --warmup 500 \
      --protocol-version "$pv" stdio -- taskset -c 1 $cmd >> "$out"
  done
done; done
python3 - "$out" <<'PY'
import json, statistics as st, collections, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[(r['label'], r['concurrency'])].append(r)
for (lab, c), rs in sorted(d.items(), key=lambda x: (x[0][1], x[0][0])):
    print(f"{lab:18} c={c:3} {st.median(r['calls_per_s'] for r in rs):>9.0f}/s "
          f"p99={st.median(r['latency_us']['p99'] for r in rs)}us idle={st.median(r['idle_rss_kib'] for r in rs)/1024:.1f}MiB "
          f"peak={max(r['peak_rss_kib'] for r in rs)/1024:.1f}MiB errors={sum(r['errors'] for r in rs)}")
for c in (1, 16, 64):
    for lab, base in (("toolyard-legacy", "rmcp-pipes"), ("toolyard-modern", "rmcp-pipes-modern")):
        rat = [a['calls_per_s'] / b['calls_per_s'] for a, b in zip(d[(lab, c)], d[(base, c)])]
        print(f"{lab}/{base} c={c}: median ratio {st.median(rat):.2f}")
PY
