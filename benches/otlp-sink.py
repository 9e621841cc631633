"""An OTLP/HTTP receiver for the benches: answers 200 to every POST and keeps nothing, so
what an exporter costs is measured without a collector's own work. Usage: otlp-sink.py PORT

Why raw sockets rather than http.server: the sink shares mcpload's core in
otel-overhead.sh, and http.server's per-request parsing and `rfile.read` of each ~200 KB
batch took ~10% of that core under full tracing (0.37 s of CPU in a 3.5 s stdio run), which
the traced server's calls/s paid for. Here a request costs a header scan and a
`recv_into` of its body into one reused buffer.
"""
import socket
import sys
import threading

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def serve(conn):
    scratch = bytearray(1 << 20)
    view = memoryview(scratch)
    pending = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in pending:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                pending += chunk
            head, _, pending = pending.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            # What came with the head counts towards the body; the rest is read and dropped.
            taken = min(length, len(pending))
            pending = pending[taken:]
            left = length - taken
            while left > 0:
                n = conn.recv_into(view, min(left, len(scratch)))
                if n == 0:
                    return
                left -= n
            conn.sendall(RESPONSE)


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen(64)
while True:
    connection, _ = listener.accept()
    threading.Thread(target=serve, args=(connection,), daemon=True).start()
