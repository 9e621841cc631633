"""Calls a tool of a Toolyard worker with nats-py, a NATS client that is not ours, following
docs/nats.md only: publish a 2026-07-28 `tools/call` with the Mcp-* headers to the worker's
subject with our own inbox as the reply subject, read frames until the terminal one.

Usage: nats_client.py NATS_URL SERVER TOOL ARGUMENTS_JSON
Prints {"frames": [{"frame": ..., "seq": ..., "body": ...}, ...]} as JSON on stdout.
"""

import asyncio
import json
import sys

import nats


async def main():
    url, server, tool, arguments = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    nc = await nats.connect(url)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = {
        "jsonrpc": "2.0",
        "id": "py-1",
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "progressToken": "py-progress",
            },
        },
    }
    headers = {
        "Mcp-Wire": "1",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Timeout-Ms": "20000",
    }
    subject = f"mcp.v1.req._._.{server}.tools.call.{tool}"
    await nc.publish(subject, json.dumps(body).encode(), reply=inbox, headers=headers)
    frames = []
    while True:
        msg = await sub.next_msg(timeout=20)
        frame = (msg.headers or {}).get("Mcp-Frame")
        frames.append({
            "frame": frame,
            "seq": int((msg.headers or {}).get("Mcp-Seq", "-1")),
            "body": json.loads(msg.data) if msg.data else None,
        })
        if frame in ("end", "err"):
            break
    await nc.close()
    print(json.dumps({"frames": frames}))


asyncio.run(main())
