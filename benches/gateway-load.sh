#!/usr/bin/env bash
# mcpload over stdio through the gateway (issue 5): `toolyard serve --stdio --config gw.toml`,
# whose one source is Toolyard's own stdio server (`serve --stdio --workers 1`, singleton,
# `aliases = { echo = "echo" }` so mcpload's `echo` calls pass through), against that same
# server called directly, interleaved in one run (c = 16, REPEATS rounds); then the cost of a
# transient call (a `lifecycle = "transient"` source: a process per call) at c = 1 and 16.
# Pinned like mcpload-stdio.sh: mcpload on core 0, the server side on core 1 (the gateway and
# its upstream share that core). Prints medians (calls/s, p50, p99, server-side CPU per call),
# per-round ratios gateway/direct, and the gateway's own CPU per forwarded call against its
# upstream's in the same run (each process measured apart) and against the direct server's.
# Needs ../shared/mcpload (the workplace's load generator).
#   REPEATS=3 DURATION=3 CONC=16 TRANSIENT_REPEATS=2 TRANSIENT_DURATION=3 OUT=/tmp/x.jsonl
#   TOOLYARD_BIN=path (a built binary) COMPARE_BIN=path (another build's gateway, same rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
MCPLOAD_TARGET=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && CARGO_TARGET_DIR=$MCPLOAD_TARGET cargo build --release -q)
[ -n "${TOOLYARD_BIN:-}" ] || cargo build --release -q -p toolyard-cli --bins
M=$MCPLOAD_TARGET/release/mcpload
T=${TOOLYARD_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/toolyard}
out=${OUT:-/tmp/toolyard-gateway-load.jsonl}
conc=${CONC:-16}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source_of() { # $1 = extra lines
  printf '[[sources]]\nname = "up"\ncommand = "%s"\nargs = ["serve", "--stdio", "--workers", "1"]\naliases = { echo = "echo" }\n%s\n' "$T" "$1"
}
source_of '' > "$dir/gw.toml"
source_of 'lifecycle = "transient"' > "$dir/gw-transient.toml"
# Runs the server command and writes two CPU figures to $1: the seconds of the process it
# started alone (read from /proc once it has exited but before it is reaped, so they are
# final), then those of it and every process under it (the gateway's upstreams, reparented
# to us if the gateway dies first: a child subreaper). For the gateway, the difference is
# its upstream's CPU serving these very calls.
cpu_wrapper='
import ctypes, os, resource, signal, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
child = subprocess.Popen(sys.argv[2:])
def own_cpu():
    fields = open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
def put(own, total):
    open(sys.argv[1] + ".tmp", "w").write(f"{own} {total}\n")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
def tree_cpu(pid):
    # A process and every process under it, read from /proc while they still run: its
    # own time, its reaped children (cutime, cstime) and those not reaped yet.
    total = 0.0
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        for task in os.listdir(f"/proc/{pid}/task"):
            for kid in open(f"/proc/{pid}/task/{task}/children").read().split():
                total += tree_cpu(int(kid))
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return total
def term(*_):
    # mcpload stops the group when the server has not exited 300 ms after EOF (its
    # stdout full, nobody reading); a server that never exits is then killed, so its
    # figure, and that of its upstreams, are taken now (the calls are over).
    own = own_cpu()
    put(own, max(own, tree_cpu(child.pid)))
    child.send_signal(signal.SIGTERM)
signal.signal(signal.SIGTERM, term)
os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
own = own_cpu()
put(own, own)  # in case mcpload kills the group before the stragglers are reaped
child.wait()
signal.alarm(5)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
put(own, ru.ru_utime + ru.ru_stime)
'
run() { # label concurrency duration warmup server-command...
  # Adds the server side's CPU seconds to mcpload's JSON line as server_cpu_s.
  local label=$1 c=$2 d=$3 w=$4 line cpu; shift 4
  rm -f "$dir/cpu"
  line=$(timeout 120 taskset -c 0 "$M" --json --label "$label" -c "$c" -d "$d" --warmup "$w" \
    stdio -- taskset -c 1 python3 -c "$cpu_wrapper" "$dir/cpu" "$@")
  for _ in $(seq 50); do [ -s "$dir/cpu" ] && break; sleep 0.1; done
  read -r own cpu < "$dir/cpu" 2>/dev/null || true
  echo "${line%\}},\"server_cpu_s\":${cpu:-null},\"own_cpu_s\":${own:-null}}" >> "$out"
}
: > "$out"
# Singleton: direct and through the gateway (one thread, like the direct server, and two:
# `gateway-w2`), interleaved.
for rep in $(seq "${REPEATS:-3}"); do
  run direct "$conc" "${DURATION:-3}" 500 "$T" serve --stdio --workers 1
  run gateway "$conc" "${DURATION:-3}" 500 "$T" serve --stdio --workers 1 --config "$dir/gw.toml"
  run gateway-w2 "$conc" "${DURATION:-3}" 500 "$T" serve --stdio --workers 2 --config "$dir/gw.toml"
  # COMPARE_BIN: another build's gateway in front of the same upstream, in the same rounds
  # (before/after a change, without the machine's drift between two runs).
  if [ -n "${COMPARE_BIN:-}" ]; then
    run gateway-prev "$conc" "${DURATION:-3}" 500 "$COMPARE_BIN" serve --stdio --workers 1 --config "$dir/gw.toml"
  fi
done
# Transient: a process per call; direct at c = 1 for the per-call cost.
for rep in $(seq "${TRANSIENT_REPEATS:-2}"); do
  run direct 1 "${TRANSIENT_DURATION:-3}" 200 "$T" serve --stdio --workers 1
  run transient 1 "${TRANSIENT_DURATION:-3}" 20 "$T" serve --stdio --workers 1 --config "$dir/gw-transient.toml"
  run transient "$conc" "${TRANSIENT_DURATION:-3}" 20 "$T" serve --stdio --workers 1 --config "$dir/gw-transient.toml"
done
python3 - "$out" "$conc" <<'PY'
import json, statistics as st, collections, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[(r['label'], r['concurrency'])].append(r)
conc = int(sys.argv[2])
# A round whose CPU figure is missing (nan) is left out of the medians, not allowed to poison them.
fin = lambda xs: [x for x in xs if x == x] or [float('nan')]
med = lambda rs, f: st.median(fin([f(r) for r in rs]))
cpu = lambda r: r['server_cpu_s'] * 1e6 / r['issued'] if r.get('server_cpu_s') else float('nan')
print(f"{'label':11} {'c':>3} {'calls/s':>9} {'p50':>8} {'p99':>8} {'cpu/call':>9} {'errors':>6}  calls/s per round")
for (lab, c), rs in sorted(d.items(), key=lambda x: (x[0][1], x[0][0])):
    print(f"{lab:11} {c:3} {med(rs, lambda r: r['calls_per_s']):9.0f} "
          f"{med(rs, lambda r: r['latency_us']['p50']):6.0f}us {med(rs, lambda r: r['latency_us']['p99']):6.0f}us "
          f"{med(rs, cpu):7.1f}us {sum(r['errors'] for r in rs):6}  "
          + " ".join(f"{r['calls_per_s']:.0f}" for r in rs))
own = lambda r: r['own_cpu_s'] * 1e6 / r['issued'] if r.get('own_cpu_s') is not None else float('nan')
# Without the upstream's share (the server killed before its children were reaped) it is unknown.
rest = lambda r: (cpu(r) - own(r)) if cpu(r) - own(r) > 0 else float('nan')
for lab in ("gateway", "gateway-prev"):
    pairs = list(zip(d[(lab, conc)], d[("direct", conc)]))
    if not pairs:
        continue
    # Measured apart in the same run: the gateway process's own CPU against its upstream's
    # (everything under the gateway), both serving these very calls.
    apart = [own(a) / rest(a) for a, _ in pairs]
    print(f"{lab} c={conc}: gateway CPU per forwarded call / its upstream's in the same run: median "
          f"{st.median(fin(apart)):.2f} (rounds {' '.join(f'{x:.2f}' for x in apart)}; gateway "
          f"{st.median(fin([own(a) for a, _ in pairs])):.1f}us, upstream {st.median(fin([rest(a) for a, _ in pairs])):.1f}us; goal <= 1.5)")
    # The earlier estimate: the server side's CPU less the direct server's (the upstream
    # called directly, at its own batching), over the direct server's.
    est = [(cpu(a) - cpu(b)) / cpu(b) for a, b in pairs]
    print(f"{lab} c={conc}: (server side - direct server) / direct server: median "
          f"{st.median(fin(est)):.2f} (rounds {' '.join(f'{x:.2f}' for x in est)})")
for lab in ("gateway", "gateway-w2", "gateway-prev"):
    pairs = list(zip(d[(lab, conc)], d[("direct", conc)]))
    if not pairs:
        continue
    thr = [a['calls_per_s'] / b['calls_per_s'] for a, b in pairs]
    p99 = [a['latency_us']['p99'] / b['latency_us']['p99'] for a, b in pairs]
    print(f"{lab}/direct c={conc}: throughput ratio median {st.median(thr):.2f} "
          f"(rounds {' '.join(f'{x:.2f}' for x in thr)}), p99 ratio median {st.median(p99):.2f} "
          f"-> {'meets' if st.median(thr) >= 0.8 else 'misses'} the 80% goal")
t1, d1 = d.get(("transient", 1)), d.get(("direct", 1))
if t1 and d1:
    extra = med(t1, lambda r: r['latency_us']['p50']) - med(d1, lambda r: r['latency_us']['p50'])
    print(f"transient call cost at c=1: +{extra/1000:.1f} ms per call over a direct call (p50)")
PY
