#!/usr/bin/env python3
"""Calls in flight on a killed NATS worker, as the broker saw them.

Reads a nats-server log written with `-DV` (debug and trace) during nats-scaling.sh's fault
run. The killed worker is the first `ty-worker-*` calls' connection the broker saw close. A call
was in flight on it when the broker had delivered its request to that connection (an HMSG
on a `*.req.*` subject, whose reply subject names the call) and had not received the
call's terminal frame from it (an HPUB to that reply subject whose headers say
`Mcp-Frame: end` or `err`). Its answer may have been produced and not yet written out when
the process died: it is in flight all the same, since the caller never got it.

Of those, the ones whose last frame was a keepalive saying `Mcp-State: waiting` had not
started (the worker says `running`, and the broker confirms it, before a waiting call's tool
starts): the gateway sends them again, so only the rest may fail.

Prints one JSON line: {"killed_cid", "delivered", "answered", "in_flight", "waiting"}.
"""
import json
import re
import sys

LINE = re.compile(r'cid:(\d+) - "[^"]*" - (<<-|->>) (.*)$')
# The worker's calls' connection (`ty-worker-NAME`), not its change events' or task jobs'
# ones (`ty-worker-NAME-events`, `-jobs`), which a killed worker loses at the same moment.
CLOSED = re.compile(r'cid:(\d+) - "[^"]*ty-worker-(?![^"]*-(?:events|jobs)")[^"]*" - Client connection closed')

delivered = {}  # cid -> reply subjects of requests delivered to it
answered = {}  # cid -> reply subjects it sent a terminal frame to
waiting = {}  # cid -> reply subjects whose last frame from it said `waiting`
last_pub = {}  # cid -> the subject of its last HPUB, whose payload line follows
killed = None
for line in open(sys.argv[1], errors="replace"):
    if killed is None:
        m = CLOSED.search(line)
        if m:
            killed = m.group(1)
            continue
    m = LINE.search(line)
    if not m:
        continue
    cid, direction, rest = m.groups()
    if direction == "->>" and rest.startswith("[HMSG ") and ".req." in rest.split()[1]:
        parts = rest.strip("[]").split()
        # HMSG subject sid [reply] hdr_len total_len
        if len(parts) == 6:
            delivered.setdefault(cid, set()).add(parts[3])
    elif direction == "<<-" and rest.startswith("[HPUB "):
        last_pub[cid] = rest.strip("[]").split()[1]
    elif direction == "<<-" and rest.startswith("MSG_PAYLOAD:") and cid in last_pub:
        head = rest.split("\\r\\n\\r\\n", 1)[0]
        reply = last_pub.pop(cid)
        if "Mcp-Frame: end" in head or "Mcp-Frame: err" in head:
            answered.setdefault(cid, set()).add(reply)
        if "Mcp-State: waiting" in head:
            waiting.setdefault(cid, set()).add(reply)
        else:
            waiting.get(cid, set()).discard(reply)

if killed is None:
    sys.exit("no worker connection closed in the log")
got = delivered.get(killed, set())
done = answered.get(killed, set())
print(json.dumps({
    "killed_cid": int(killed),
    "delivered": len(got),
    "answered": len(got & done),
    "in_flight": len(got - done),
    "waiting": len((got - done) & waiting.get(killed, set())),
}))
