#!/usr/bin/env bash
# Scaling of the NATS bridge (issue 14): a tool that sleeps 20 ms (the demo `slow`, one step),
# served by 1, 2 and 4 `toolyard worker --concurrency 8` processes sharing one name, called
# through `toolyard serve --stdio --nats` by mcpload at c = 64 (more than 4 x 8, so the
# workers are the limit). The ideal is 8 / 20 ms = 400 calls/s per worker; efficiency(n) is
# calls/s(n) / (n x calls/s(1)), measured in the same run.
#
# Then the fault run: 4 workers at c = 64 for 6 s, one killed (SIGKILL) after 2 s. A call
# in flight on the killed worker is answered with an error (the stream is lost: it may have
# run); every other call must succeed: at most as many errors as the broker's trace shows
# calls in flight on it and possibly started when it died (benches/nats-in-flight.py: its 8
# slots' calls, an answer it had produced but not yet written out, whose slot already ran the
# next call, and a request delivered to it that it had not read yet). A call NATS had
# delivered to it that was waiting for a slot (c = 64 over 4 x 8 slots: ~8 of them) had been
# told `waiting` and never `running` (docs/nats.md), so the gateway sends it again to a
# survivor once it finds the worker gone.
#
# WAITING=N gives the workers `--waiting N` (requests that may wait for a slot; default as
# many as --concurrency, at least 64): with WAITING=0 every call beyond the 8 slots is refused
# as busy (-32015) and the gateway sends it again with a backoff, which shows what shedding
# costs against waiting.
#
# Needs ../shared/mcpload and scripts/install-test-deps' nats-server. Prints one line per
# run and writes the raw mcpload JSON to $OUT (default /tmp/toolyard-nats-scaling.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
export CARGO_TARGET_DIR=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && cargo build --release -q)
[ -n "${TOOLYARD_BIN:-}" ] || cargo build --release -q -p toolyard-cli --bins
M=$CARGO_TARGET_DIR/release; T=${TOOLYARD_BIN:-$CARGO_TARGET_DIR/release/toolyard}
NATS=${NATS_SERVER:-${TOOLYARD_CACHE:-$HOME/.cache/toolyard}/venv/bin/nats-server}
out=${OUT:-/tmp/toolyard-nats-scaling.jsonl}; : > "$out"
work=$(mktemp -d); port=$((20000 + RANDOM % 20000)); url=nats://127.0.0.1:$port
"$NATS" -a 127.0.0.1 -p "$port" -js -sd "$work/js" > "$work/nats.log" 2>&1 &
nats_pid=$!
workers=()
stop_workers() {
  for p in "${workers[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${workers[@]}"; do wait "$p" 2>/dev/null || true; done
  workers=()
}
trap 'stop_workers; kill $nats_pid 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
start_workers() {
  for i in $(seq "$1"); do
    "$T" worker --nats "$url" --name calc --concurrency 8 --workers 1 --drain-seconds 1 \
      ${WAITING:+--waiting "$WAITING"} 2> "$work/worker$i.log" &
    workers+=($!)
  done
  sleep 1.5 # the catalog entry and the queue-group subscriptions
}
load() { # label duration
  timeout 120 "$M/mcpload" --json --label "$1" -c 64 -d "$2" --warmup 64 --no-verify \
    --protocol-version 2025-06-18 --tool calc__slow --args '{"steps":1,"delay_ms":20}' \
    stdio -- "$T" serve --stdio --nats "$url"
}
for rep in $(seq "${REPEATS:-2}"); do
  for n in 1 2 4; do
    start_workers "$n"
    load "workers=$n" "${DURATION:-4}" >> "$out"
    stop_workers
  done
done
# The fault run on a broker of its own that traces every message (-DV), so that the calls in
# flight on the killed worker are counted as the broker saw them (benches/nats-in-flight.py):
# its requests delivered and not answered when it died, running or answered but not yet
# written out.
kill "$nats_pid" 2>/dev/null; wait "$nats_pid" 2>/dev/null || true
"$NATS" -a 127.0.0.1 -p "$port" -js -sd "$work/js-fault" -DV > "$work/nats-fault.log" 2>&1 &
nats_pid=$!
sleep 1
start_workers 4
load "kill-1-of-4" 6 > "$work/fault" &
fault=$!
sleep 3 # 1 s of start-up and warm-up, then 2 s of load
kill -9 "${workers[0]}"
wait "$fault" || true
stop_workers
python3 benches/nats-in-flight.py "$work/nats-fault.log" > "$work/in-flight"
python3 - "$work/fault" "$work/in-flight" >> "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); r['in_flight'] = json.load(open(sys.argv[2])); print(json.dumps(r))
PY
python3 - "$out" <<'PY'
import json, statistics as st, collections, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[r['label']].append(r)
base = st.median(r['calls_per_s'] for r in d['workers=1'])
for n in (1, 2, 4):
    rs = d[f'workers={n}']
    cps = st.median(r['calls_per_s'] for r in rs)
    print(f"workers={n}: {cps:7.0f} calls/s (ideal {400 * n}), p50={st.median(r['latency_us']['p50'] for r in rs)}us "
          f"p99={st.median(r['latency_us']['p99'] for r in rs)}us, efficiency {cps / (n * base):.2f}, "
          f"errors={sum(r['errors'] for r in rs)}")
for r in d['kill-1-of-4']:
    f = r['in_flight']
    started = f['in_flight'] - f['waiting']
    verdict = ("none lost that was not in flight on it and possibly started" if r['errors'] <= started
               else "MORE than were in flight on it and possibly started")
    print(f"kill 1 of 4 mid-run: {r['ok']} ok, {r['errors']} errors; the broker had delivered "
          f"{f['delivered']} calls to it, {f['answered']} answered, {f['in_flight']} in flight "
          f"when it died, {f['waiting']} of them told `waiting` (sent again), {started} possibly "
          f"started: {verdict}")
PY
