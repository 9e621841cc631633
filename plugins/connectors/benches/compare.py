#!/usr/bin/env python3
"""Connector benchmark: calls/s and peak RSS of Toolyard's filesystem and SQLite connectors
against the official filesystem server, in one run, over stdio with one call in flight.

    cargo build --release && python3 plugins/connectors/benches/compare.py \
        --toolyard target/release/toolyard \
        --reference ~/.cache/toolyard/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js

Operations: read_text_file of a 1 MiB file, list_directory of 10,000 entries, and (Toolyard
only: no SQLite reference server is installed) a 10,000-row SQLite query.
"""

import argparse
import json
import os
import sqlite3
import subprocess
import tempfile
import time


class Server:
    def __init__(self, argv):
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.next = 1
        self.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params):
        rid = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its stdout")
            message = json.loads(line)
            if message.get("id") == rid and "method" not in message:
                return message

    def call(self, name, arguments):
        result = self.request("tools/call", {"name": name, "arguments": arguments})["result"]
        if result.get("isError"):
            raise RuntimeError(f"{name} failed: {result['content'][0]['text'][:200]}")
        return result

    def peak_rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def rate(server, name, arguments, calls):
    server.call(name, arguments)  # warm-up
    started = time.perf_counter()
    for _ in range(calls):
        server.call(name, arguments)
    return calls / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--toolyard", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        many = os.path.join(root, "many")
        os.makedirs(many)
        big = os.path.join(root, "big.txt")
        with open(big, "w") as f:
            line = "x" * 63 + "\n"
            f.write(line * (1024 * 1024 // len(line)))
        for i in range(10_000):
            open(os.path.join(many, f"f{i:05}.txt"), "w").close()
        db = os.path.join(tmp, "bench.db")
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)",
                         [(i, f"name {i}", i * 0.5) for i in range(10_000)])
        conn.commit()
        conn.close()
        config = os.path.join(tmp, "toolyard.toml")
        with open(config, "w") as f:
            f.write(f'[connectors.filesystem]\nroots = ["{root}"]\n\n'
                    f'[connectors.sql]\nurl = "sqlite:{db}"\nmax_rows = 10000\n')
        servers = {
            "toolyard": Server([args.toolyard, "serve", "--stdio", "--no-demo", "--config", config]),
            "reference": Server(["node", args.reference, root]),
        }
        ops = [
            ("read_text_file 1 MiB", "read_text_file", {"path": big}),
            ("list_directory 10,000", "list_directory", {"path": many}),
            ("query 10,000 rows", "query", {"sql": "SELECT * FROM t", "max_rows": 10000}),
        ]
        print(f"{'operation':24} {'server':10} {'calls/s':>9}")
        for label, tool, arguments in ops:
            for name, server in servers.items():
                if tool == "query" and name == "reference":
                    continue
                print(f"{label:24} {name:10} {rate(server, tool, arguments, args.calls):9.1f}")
        for name, server in servers.items():
            print(f"peak RSS {name}: {server.peak_rss_mib():.1f} MiB")
            server.close()


if __name__ == "__main__":
    main()
