# Sourced by nats-load.sh and nats-syscalls.sh (not run alone): builds what they run and
# starts their bus in the same layout — nats-server on core 0 (beside mcpload), a `toolyard
# worker` of `calc` and async-nats' bare responder (plugins/nats/examples/bare_request_reply.rs)
# on core 1 (beside the server under test) — with a trap that stops them and removes `work`.
# Sets M (the release directory), T (the toolyard binary: TOOLYARD_BIN or cargo's release
# build), BARE, work, url and worker_pid.
MCPLOAD_DIR=${MCPLOAD_DIR:-../shared/mcpload}
export CARGO_TARGET_DIR=${MCPLOAD_TARGET:-/tmp/mcpload-target}
(cd "$MCPLOAD_DIR" && cargo build --release -q)
[ -n "${TOOLYARD_BIN:-}" ] || cargo build --release -q -p toolyard-cli --bins
# The floor: async-nats request/reply with nothing of ours on either side.
cargo build --release -q -p toolyard-nats --example bare_request_reply
M=$CARGO_TARGET_DIR/release; T=${TOOLYARD_BIN:-$M/toolyard}; BARE=$M/examples/bare_request_reply
NATS=${NATS_SERVER:-${TOOLYARD_CACHE:-$HOME/.cache/toolyard}/venv/bin/nats-server}
work=$(mktemp -d); port=$((20000 + RANDOM % 20000)); url=nats://127.0.0.1:$port
taskset -c 0 "$NATS" -a 127.0.0.1 -p "$port" -js -sd "$work/js" > "$work/nats.log" 2>&1 &
nats_pid=$!
trap 'kill $worker_pid $bare_pid $nats_pid 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
taskset -c 1 "$T" worker --nats "$url" --name calc --workers 1 2> "$work/worker.log" &
worker_pid=$!
taskset -c 1 "$BARE" respond "$url" bare.echo &
bare_pid=$!
sleep 1
