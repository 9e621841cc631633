#!/usr/bin/env bash
# System calls per call, counted by the kernel's tracepoints (`perf stat`, Debian's
# linux-perf; tracepoints work where hardware counters do not, as in a VM): the direct
# `serve --stdio` server, the gateway `serve --stdio --nats` in front of one worker, and
# async-nats' bare requester (plugins/nats/examples/bare_request_reply.rs), each under load
# at concurrency C (default 64) in nats-load.sh's layout (mcpload and nats-server on core 0,
# the servers on core 1). perf counts 3 s in the middle of a 6 s run; the calls in that
# window are the run's rate times 3 s. What it tells: whether a process's extra CPU per call
# is in the kernel (more reads, writes and wake-ups per call) or in its own instructions
# (benches/callgrind.sh).
#
#   benches/nats-syscalls.sh [C]
#
# TOOLYARD_BIN: the build to count (default: cargo's release build). Needs perf,
# ../shared/mcpload and scripts/install-test-deps' nats-server (benches/nats-bus.sh starts them).
set -euo pipefail
cd "$(dirname "$0")/.."
c=${1:-64}
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 1; }
. benches/nats-bus.sh
events=raw_syscalls:sys_enter,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,context-switches,task-clock
# Counts 3 s of the newest process matching $2, from 1.5 s into the run, into $work/perf.$1.
count() {
  sleep 1.5
  perf stat -x, -e "$events" -p "$(pgrep -n -f "$2")" -- sleep 3 2> "$work/perf.$1"
}
report() { # label calls/s
  python3 - "$work/perf.$1" "$2" "$1" <<'PY'
import sys
path, rate, label = sys.argv[1], float(sys.argv[2]), sys.argv[3]
calls = rate * 3
cells = []
for line in open(path):
    f = line.strip().split(',')
    if len(f) > 3 and f[0][:1].isdigit():
        name = f[2].replace('raw_syscalls:sys_enter', 'syscalls').replace('syscalls:sys_enter_', '')
        v = float(f[0])
        cells.append(f"cpu {v * 1000 / calls:.2f}us" if name == 'task-clock' else f"{name} {v / calls:.3f}")
print(f"{label:7} {int(rate):>7} calls/s, per call: " + ", ".join(cells))
PY
}
for s in "direct|echo|" "nats|calc__echo|--nats $url"; do
  IFS='|' read -r label tool extra <<< "$s"
  count "$label" "serve --stdio --workers 1${extra:+ --nats}" &
  counting=$!
  taskset -c 0 "$M/mcpload" --json --label "$label" -c "$c" -d 6 --warmup 500 \
    --protocol-version 2025-06-18 --tool "$tool" stdio -- taskset -c 1 $T serve --stdio --workers 1 $extra > "$work/line.$label"
  wait $counting
  report "$label" "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['calls_per_s'])" "$work/line.$label")"
done
count bare "bare_request_reply request" &
counting=$!
taskset -c 1 "$BARE" request "$url" bare.echo "$c" 6 > "$work/line.bare"
wait $counting
report bare "$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['ok'] / r['seconds'])" "$work/line.bare")"
