#!/usr/bin/env bash
# The built-in connectors under load (issue 16): read_text_file of a 1 MiB file, list_directory
# of 10,000 entries, and a 10,000-row SQLite query, with mcpload over stdio (legacy wire),
# Toolyard against the official @modelcontextprotocol/server-filesystem (node) and, when it is
# installed, the archived Python SQLite reference server (mcp-server-sqlite); interleaved in
# one run; medians of calls/s and p99, and the peak RSS (VmHWM of the server's process group).
#
# TOOLYARD_BIN: a release toolyard (default: /tmp/mcpload-target/release/toolyard).
# MCPLOAD_BIN: the load generator (default: built from ../shared/mcpload into its target).
# FS_SERVER: the official server's entry point (default: scripts/install-test-deps' copy).
# SQLITE_REF: a command serving mcp-server-sqlite over stdio given `--db-path FILE` (optional).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TOOLYARD_BIN:-/tmp/mcpload-target/release/toolyard}
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
if [ -z "${MCPLOAD_BIN:-}" ]; then
  (cd "$MCPLOAD_DIR" && cargo build --release -q -p mcpload)
  MCPLOAD_BIN=${CARGO_TARGET_DIR:-$MCPLOAD_DIR/target}/release/mcpload
fi
M=$MCPLOAD_BIN
FS_SERVER=${FS_SERVER:-$HOME/.cache/toolyard/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js}
out=${OUT:-/tmp/toolyard-connectors-bench.jsonl}
dir=${BENCH_DIR:-/tmp/toolyard-connectors-bench}

# The fixtures: a 1 MiB text file, 10,000 entries in one directory, 10,000 rows.
rm -rf "$dir"; mkdir -p "$dir/data/many"
python3 - "$dir" <<'PY'
import os, sqlite3, sys
d = sys.argv[1]
line = "the quick brown fox jumps over the lazy dog 0123456789\n"
with open(f"{d}/data/big.txt", "w") as f:
    n = 0
    while n < 1 << 20:
        f.write(line); n += len(line)
for i in range(10_000):
    open(f"{d}/data/many/f{i:05}.txt", "w").close()
db = sqlite3.connect(f"{d}/rows.db")
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL, note TEXT)")
db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
               ((i, f"name {i}", i * 0.5, "some text " * 3) for i in range(10_000)))
db.commit()
PY
cat > "$dir/toolyard.toml" <<EOF
[connectors.filesystem]
roots = ["$dir/data"]
[connectors.sql]
url = "sqlite:$dir/rows.db"
max_rows = 10000
EOF

big="{\"path\":\"$dir/data/big.txt\"}"
many="{\"path\":\"$dir/data/many\"}"
query='{"sql":"SELECT * FROM t","max_rows":10000}'
ty="$T serve --stdio --no-demo --workers 1 --config $dir/toolyard.toml"
official="node $FS_SERVER $dir/data"
runs=(
  "read_text_file 1MiB|toolyard|read_text_file|$big|$ty"
  "read_text_file 1MiB|official|read_text_file|$big|$official"
  "list_directory 10k|toolyard|list_directory|$many|$ty"
  "list_directory 10k|official|list_directory|$many|$official"
  "sqlite query 10k rows|toolyard|query|$query|$ty"
)
if [ -n "${SQLITE_REF:-}" ]; then
  runs+=("sqlite query 10k rows|python-ref|read_query|{\"query\":\"SELECT * FROM t\"}|$SQLITE_REF --db-path $dir/rows.db")
fi

: > "$out"
for rep in $(seq "${REPEATS:-3}"); do for c in ${CONCURRENCY:-1 8}; do
  for r in "${runs[@]}"; do
    IFS='|' read -r case server tool args cmd <<< "$r"
    timeout 120 taskset -c 0 "$M" --json --label "$case|$server" -c "$c" -d "${DURATION:-3}" \
      --warmup 20 --no-verify --tool "$tool" --args "$args" stdio -- taskset -c 1 $cmd >> "$out"
  done
done; done

python3 - "$out" <<'PY'
import json, statistics as st, collections, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[(r['label'], r['concurrency'])].append(r)
print(f"{'case':24} {'server':10} {'c':>3} {'calls/s':>9} {'p99 us':>9} {'peak RSS':>9} errors")
for (lab, c), rs in sorted(d.items(), key=lambda x: (x[0][0].split('|')[0], x[0][1], x[0][0])):
    case, server = lab.split('|')
    print(f"{case:24} {server:10} {c:3} {st.median(r['calls_per_s'] for r in rs):9.0f} "
          f"{st.median(r['latency_us']['p99'] for r in rs):9.0f} "
          f"{max(r['peak_rss_kib'] for r in rs)/1024:7.1f}Mi {sum(r['errors'] for r in rs)}")
PY
