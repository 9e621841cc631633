#!/usr/bin/env bash
# Our MCP client's overhead: examples/client_load (toolyard::client::Client) and mcpload drive
# the same servers the same way (2025-06-18, 500 warm-up calls, echo of 64 x "x", DURATION s,
# driver on CPU 0, server on CPU 1), side by side: toolyard serve and the rmcp baseline, over
# stdio (rmcp: stdio_pipes) and Streamable HTTP (server --workers 1). REPEATS interleaved rounds
# at c=16 (each pair back to back, which driver goes first alternating by round), then one
# round at c=1. Prints medians and client_load/mcpload per round (the median of those ratios
# is the figure to quote: < 1 means our client, not the server, limits the rate). With
# perf installed, each driver runs under `perf stat --no-inherit -e task-clock`: CPU us per
# call of the driver's own thread, which other load on the machine barely moves (its
# client_load/mcpload ratio is the client's cost per call, whatever the server). Before each
# pair it waits (at most QUIET s, default 30) for a second in which the machine is < 25 % busy.
#   benches/client-load.sh                      # REPEATS=3 DURATION=5
#   MODERN=1 benches/client-load.sh             # + toolyard on 2026-07-28 (both drivers)
#   PERF=0 QUIET=0 benches/client-load.sh       # no perf stat, no waiting
# Needs ../shared/mcpload (the load generator and its baseline servers).
set -euo pipefail
cd "$(dirname "$0")/.."
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
MT=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && CARGO_TARGET_DIR=$MT cargo build --release -q)
cargo build --release -q -p toolyard-cli --bins --example client_load
R=${CARGO_TARGET_DIR:-$PWD/target}/release
M=$MT/release/mcpload; B=$MT/release/rmcp-echo; T=$R/toolyard; C=$R/examples/client_load
out=${OUT:-/tmp/toolyard-client-load.jsonl}; D=${DURATION:-5}
: > "$out"

# label | transport | server command ({A} = 127.0.0.1:PORT) | protocol
SERVERS=("toolyard|stdio|$T serve --stdio --workers 1|2025-06-18"
         "rmcp|stdio|$B --stdio-pipes|2025-06-18"
         "toolyard|http|$T serve --http {A} --workers 1|2025-06-18"
         "rmcp|http|$B --http {A}|2025-06-18")
if [ "${MODERN:-0}" = 1 ]; then
  SERVERS+=("toolyard|stdio|$T serve --stdio --workers 1|2026-07-28"
            "toolyard|http|$T serve --http {A} --workers 1|2026-07-28")
fi

PERF=${PERF:-$(command -v perf >/dev/null && echo 1 || echo 0)}
perf_tmp=$(mktemp); port=19800
trap 'rm -f "$perf_tmp"' EXIT
quiet() { # wait until a 1 s sample of /proc/stat is < 25 % busy, for at most QUIET s
  local end=$((SECONDS + ${QUIET:-30})) a b
  while [ $SECONDS -lt $end ]; do
    read -r _ a < /proc/stat; sleep 1; read -r _ b < /proc/stat
    python3 -c 'import sys; a, b = ([int(x) for x in s.split()] for s in sys.argv[1:]); d = [y - x for x, y in zip(a, b)]; t = sum(d[:8]); sys.exit(0 if t and (t - d[3] - d[4]) / t < 0.25 else 1)' "$a" "$b" && return
  done
  return 0
}
drive() { # the driver command, under perf stat (task-clock of its own thread) when PERF=1
  if [ "$PERF" = 1 ]; then timeout 90 perf stat --no-inherit -x, -e task-clock -o "$perf_tmp" -- "$@"
  else timeout 90 "$@"; fi
}
next_port() { # a free loopback port
  port=$((port + 1))
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
}

# measure DRIVER LABEL TRANSPORT CMD PROTOCOL C: one measurement, one JSON line on stdout.
measure() {
  local driver=$1 label=$2 tr=$3 cmd=$4 pv=$5 c=$6 A url
  if [ "$tr" = http ]; then next_port; A=127.0.0.1:$port; cmd=${cmd//\{A\}/$A}; url=http://$A/mcp; fi
  if [ "$driver" = mcpload ]; then
    local common=(--json --label "$label" -c "$c" -d "$D" --warmup 500 --protocol-version "$pv")
    if [ "$tr" = stdio ]; then
      # shellcheck disable=SC2086
      drive taskset -c 0 "$M" "${common[@]}" stdio -- taskset -c 1 $cmd
    else
      drive taskset -c 0 "$M" "${common[@]}" http "$url" --spawn "taskset -c 1 $cmd"
    fi
  else
    local common=(--label "$label" --concurrency "$c" --seconds "$D" --warmup 500 --protocol "$pv")
    if [ "$tr" = stdio ]; then
      drive taskset -c 0 "$C" "${common[@]}" --stdio "taskset -c 1 $cmd"
    else
      # The server is ours to start and stop (measure runs in a subshell: server_pid is its
      # own, and the trap stops the server if the run is interrupted).
      # shellcheck disable=SC2086
      taskset -c 1 $cmd >/dev/null 2>&1 & server_pid=$!
      trap 'kill "$server_pid" 2>/dev/null' EXIT
      for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
      local rc=0
      drive taskset -c 0 "$C" "${common[@]}" --url "$url" || rc=$?
      kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true
      return $rc
    fi
  fi
}
run() { # one measurement, appended to $out with the driver's CPU time (ms) when measured
  local line
  : > "$perf_tmp"
  if line=$(measure "$@"); then
    local cpu; cpu=$(awk -F, '/task-clock/ {print $1}' "$perf_tmp")
    python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r["driver_cpu_ms"] = float(sys.argv[2]) if sys.argv[2] else None; print(json.dumps(r))' "$line" "$cpu" >> "$out"
  else echo "failed: $1 $2 c=$6" >&2; fi
}

round() { # round REP C
  local rep=$1 c=$2 s label tr cmd pv first second
  if [ $((rep % 2)) = 1 ]; then first=mcpload; second=client_load; else first=client_load; second=mcpload; fi
  for s in "${SERVERS[@]}"; do
    IFS='|' read -r label tr cmd pv <<< "$s"
    quiet
    for driver in $first $second; do run "$driver" "$driver|$label|$tr|$pv|$rep" "$tr" "$cmd" "$pv" "$c"; done
  done
}

echo "client-load: ${REPEATS:-3} rounds at c=16 + 1 at c=1, ${D}s each, -> $out" >&2
for rep in $(seq "${REPEATS:-3}"); do round "$rep" 16; done
round 1 1

python3 - "$out" <<'PY'
import json, statistics as st, collections, sys
runs = collections.defaultdict(dict)  # (server, transport, protocol, c) -> {driver: {round: row}}
for line in open(sys.argv[1]):
    r = json.loads(line)
    driver, server, tr, pv, rep = r['label'].split('|')
    if driver == 'mcpload':
        row = dict(cps=r['calls_per_s'], p50=r['latency_us']['p50'], p99=r['latency_us']['p99'], err=r['errors'])
    else:
        row = dict(cps=r['calls_per_sec'], p50=r['p50_us'], p99=r['p99_us'], err=r['errors'])
    cpu = r.get('driver_cpu_ms')
    row['cpu'] = cpu * 1000 / r['issued'] if cpu and r.get('issued') else None  # us per call
    runs[(server, tr, pv, r['concurrency'])].setdefault(driver, {})[rep] = row
k = lambda x: f"{x / 1000:.1f}k"
def med(rs, f, fmt):
    v = [r[f] for r in rs.values() if r[f] is not None]
    return fmt(st.median(v)) if v else "-"
def ratio(m, cl, f):
    v = sorted(cl[rep][f] / m[rep][f] for rep in m if rep in cl and m[rep][f] and cl[rep][f] is not None)
    return (f"**{st.median(v):.2f}** [{v[0]:.2f}-{v[-1]:.2f}]" if v else "-"), len(v)
print("| server | transport | protocol | c | mcpload calls/s | client_load calls/s | client/mcpload calls/s | "
      "p50/p99 us mcpload | p50/p99 us client_load | driver CPU us/call mcpload / client_load | CPU ratio | errors | pairs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (server, tr, pv, c), d in sorted(runs.items(), key=lambda x: (-x[0][3], x[0][1], x[0][2], x[0][0])):
    m, cl = d.get('mcpload', {}), d.get('client_load', {})
    def cell(rs):
        v = [r['cps'] for r in rs.values()]
        return f"**{k(st.median(v))}** [{k(min(v))}-{k(max(v))}]" if v else "-"
    lat = lambda rs: f"{med(rs, 'p50', '{:.0f}'.format)} / {med(rs, 'p99', '{:.0f}'.format)}"
    r_cps, n = ratio(m, cl, 'cps')
    r_cpu, _ = ratio(m, cl, 'cpu')
    errs = sum(r['err'] for rs in (m, cl) for r in rs.values())
    print(f"| {server} | {tr} | {pv} | {c} | {cell(m)} | {cell(cl)} | {r_cps} | {lat(m)} | {lat(cl)} | "
          f"{med(m, 'cpu', '{:.2f}'.format)} / {med(cl, 'cpu', '{:.2f}'.format)} | {r_cpu} | {errs} | {n} |")
PY
