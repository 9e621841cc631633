#!/usr/bin/env python3
"""RSS of a Streamable HTTP server holding N idle legacy sessions.

Usage: benches/idle-sessions.py N -- SERVER-COMMAND-WITH-{ADDR}
Starts the server on a free port, reads its RSS, opens N sessions (initialize +
notifications/initialized, then nothing), reads the RSS again, and prints one JSON line.
"""
import http.client, json, os, socket, subprocess, sys, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def main():
    n = int(sys.argv[1]); cmd = sys.argv[sys.argv.index("--") + 1:]
    port = free_port(); addr = f"127.0.0.1:{port}"
    proc = subprocess.Popen([c.replace("{ADDR}", addr) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn = None
        for _ in range(500):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5); conn.connect(); break
            except OSError:
                time.sleep(0.01)
        init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "idle", "version": "0"}}})
        initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        hdr = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        # one request first so lazily initialized parts are counted in the baseline
        conn.request("POST", "/mcp", init, hdr); r = conn.getresponse(); r.read()
        time.sleep(0.2); before = rss_kib(proc.pid)
        t0 = time.time()
        for _ in range(n):
            conn.request("POST", "/mcp", init, hdr); r = conn.getresponse(); r.read()
            sid = r.getheader("mcp-session-id")
            h = dict(hdr); h["mcp-session-id"] = sid; h["mcp-protocol-version"] = "2025-06-18"
            conn.request("POST", "/mcp", initialized, h); r = conn.getresponse(); r.read()
        took = time.time() - t0
        time.sleep(0.5); after = rss_kib(proc.pid)
        print(json.dumps({"server": " ".join(cmd), "sessions": n, "rss_before_kib": before,
                          "rss_after_kib": after, "kib_per_session": round((after - before) / max(n, 1), 2),
                          "open_seconds": round(took, 1)}))
    finally:
        proc.kill(); proc.wait()

main()
