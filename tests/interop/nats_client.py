"""Calls a tool of a Toolyard worker with nats-py, a NATS client that is not ours, following
docs/nats.md only: publish a 2026-07-28 `tools/call` with the Mcp-* headers to the worker's
subject with our own inbox as the reply subject, read frames until the terminal one.

With --claims the call goes through claims both ways (docs/nats.md, "Claims"): the request's
body is put in the TY_CLAIMS object store and named by Mcp-Body-Claim (the message's body is
empty), Mcp-Accept-Claim: 1 lets the worker answer through a claim too, which is read and
deleted here; the request's claim is deleted once the call has ended.

With --tenant T the request carries tenant T in its subject (docs/nats.md, "Scoped pools"),
so a pool of that tenant takes it.

With --principal P the request is made for principal P (docs/nats.md, "The caller's
principal"): Mcp-Principal carries P, and the subject's user token is P's token, computed
here from the docs' rule alone (p + the first 16 bytes of SHA-256(P) in lowercase hex),
unless --user U puts another user token there.

Usage: nats_client.py NATS_URL SERVER TOOL ARGUMENTS_JSON [--claims] [--tenant T]
       [--principal P] [--user U]
Prints {"frames": [{"frame": ..., "seq": ..., "claimed": ..., "body": ...}, ...]} as JSON on
stdout.
"""

import asyncio
import hashlib
import json
import sys
import uuid

import nats
from nats.js import api
from nats.js.errors import NotFoundError

CLAIMS = "TY_CLAIMS"


async def claims_store(nc):
    js = nc.jetstream()
    try:
        return await js.object_store(CLAIMS)
    except NotFoundError:
        return await js.create_object_store(CLAIMS, config=api.ObjectStoreConfig(ttl=300))


async def main():
    url, server, tool, arguments = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    flags = sys.argv[5:]
    claims = "--claims" in flags
    tenant = flags[flags.index("--tenant") + 1] if "--tenant" in flags else "_"
    principal = flags[flags.index("--principal") + 1] if "--principal" in flags else None
    user = "_"
    if principal is not None:
        user = "p" + hashlib.sha256(principal.encode()).hexdigest()[:32]
    if "--user" in flags:
        user = flags[flags.index("--user") + 1]
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
    if principal is not None:
        headers["Mcp-Principal"] = principal
    payload = json.dumps(body).encode()
    store = None
    request_claim = None
    if claims:
        store = await claims_store(nc)
        request_claim = uuid.uuid4().hex
        # Chunks well under the bus's max_payload.
        meta = api.ObjectMeta(
            name=request_claim,
            options=api.ObjectMetaOptions(max_chunk_size=nc.max_payload // 2),
        )
        await store.put(request_claim, payload, meta=meta)
        headers["Mcp-Body-Claim"] = request_claim
        headers["Mcp-Accept-Claim"] = "1"
        payload = b""
    subject = f"mcp.v1.req.{tenant}.{user}.{server}.tools.call.{tool}"
    await nc.publish(subject, payload, reply=inbox, headers=headers)
    frames = []
    while True:
        msg = await sub.next_msg(timeout=20)
        frame = (msg.headers or {}).get("Mcp-Frame")
        claim = (msg.headers or {}).get("Mcp-Claim")
        data = msg.data
        if claim:
            data = (await store.get(claim)).data
            await store.delete(claim)
        frames.append({
            "frame": frame,
            "seq": int((msg.headers or {}).get("Mcp-Seq", "-1")),
            "claimed": bool(claim),
            "body": json.loads(data) if data else None,
        })
        if frame in ("end", "err"):
            break
    if request_claim:
        await store.delete(request_claim)
    await nc.close()
    print(json.dumps({"frames": frames}))


asyncio.run(main())
