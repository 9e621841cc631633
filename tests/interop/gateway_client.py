#!/usr/bin/env python3
"""Drive a Toolyard gateway (`toolyard serve --config gateway.toml`) with the official
Python SDK (`mcp` on PyPI), as the downstream client of every source behind it.

    gateway_client.py [options] --url http://HOST:PORT/mcp
    gateway_client.py [options] -- GATEWAY COMMAND...      (spawned; stdio)

Options:
    --protocol legacy|modern  legacy (default): `initialize` at 2025-11-25; modern:
                              2026-07-28 (`server/discover` sent explicitly and adopted,
                              no fallback; upstream questions come back as input_required
                              rounds the SDK answers with its callbacks and retries)
    --separator SEP           between a source's prefix and a tool name (default "__")
    --prefix P                (repeatable) a source whose tools must be listed as P<SEP>*
    --call NAME ARGS EXPECT   (repeatable) call tool NAME with the JSON object ARGS; the
                              result must not be an error and its text must contain EXPECT
    --sampling-tool NAME      a tool that makes its server ask for sampling; the client's
                              sampling callback answers --sample-text, and the tool's
                              result must contain that text
    --sample-text TEXT        what the sampling callback answers
    --deadline S              whole run (default 90); --request-timeout S: one check (default 45)

Prints ONE JSON line on stdout:

    {"ok": bool, "checks": [{"name", "ok", "detail"}], "protocolVersion": str|null,
     "sdk": "python mcp X.Y.Z", "protocol": ..., "transport": "http"|"stdio",
     "tools": {prefix: [names]}, "calls": {name: {"text", "isError", "source"}},
     "samplings": [CreateMessageRequestParams as on the wire]}

`source` is the `_meta["io.toolyard/source"].name` the gateway adds to a forwarded result.
Exit status: 0 every check passed, 1 a check failed, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any

SCRIPT = "gateway_client.py"
MODERN_VERSION = "2026-07-28"

try:
    import anyio
    import mcp_types as t
    from importlib.metadata import version as _pkg_version
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
except ImportError as e:  # pragma: no cover - setup problem, reported as such
    print(
        json.dumps(
            {
                "ok": False,
                "checks": [
                    {
                        "name": "setup",
                        "ok": False,
                        "detail": f"official mcp SDK not importable ({e}): run scripts/install-test-deps and use "
                        "$TOOLYARD_CACHE/venv/bin/python",
                    }
                ],
                "protocolVersion": None,
            }
        ),
        flush=True,
    )
    sys.exit(2)

import warnings  # noqa: E402

warnings.simplefilter("ignore")  # deprecation notices for legacy-era calls are expected here

SDK = f"python mcp {_pkg_version('mcp')}"


def short(v: Any, n: int = 400) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= n else s[:n] + "..."


def wire(model: Any) -> Any:
    """Pydantic model -> the JSON shape seen on the wire (camelCase)."""
    if hasattr(model, "model_dump"):
        return model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return model


def describe(e: BaseException) -> str:
    """Flatten exception groups (anyio task groups wrap transport errors) into one line."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


class CheckFailed(Exception):
    pass


def expect(cond: Any, detail: str) -> None:
    if not cond:
        raise CheckFailed(detail)


class Report:
    def __init__(self, protocol: str, transport: str) -> None:
        self.protocol = protocol
        self.transport = transport
        self.checks: list[dict[str, Any]] = []
        self.protocol_version: str | None = None
        self.tools: dict[str, list[str]] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.samplings: list[dict[str, Any]] = []
        self.current = "connect"
        self._lock = threading.Lock()
        self._emitted = False

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        with self._lock:
            self.checks.append({"name": name, "ok": bool(ok), "detail": detail})
        mark = "ok  " if ok else "FAIL"
        print(f"[{SCRIPT}] {mark} {name}{': ' + detail if detail else ''}", file=sys.stderr, flush=True)

    def ok(self) -> bool:
        return bool(self.checks) and all(c["ok"] for c in self.checks)

    def emit(self) -> int:
        with self._lock:
            if not self._emitted:
                self._emitted = True
                line = json.dumps(
                    {
                        "ok": self.ok(),
                        "checks": list(self.checks),
                        "protocolVersion": self.protocol_version,
                        "sdk": SDK,
                        "protocol": self.protocol,
                        "transport": self.transport,
                        "tools": self.tools,
                        "calls": self.calls,
                        "samplings": self.samplings,
                    }
                )
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
        return 0 if self.ok() else 1


def texts(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


async def run_checks(args: argparse.Namespace, client: Client, report: Report) -> None:
    async def check(name: str, fn, *a: Any) -> Any:
        report.current = name
        try:
            with anyio.fail_after(args.request_timeout):
                detail = await fn(*a)
        except CheckFailed as e:
            report.add(name, False, str(e))
            return
        except TimeoutError:
            report.add(name, False, f"timed out after {args.request_timeout:g}s")
            return
        except Exception as e:  # noqa: BLE001 - SDK errors (MCPError, validation, transport) fail the check
            report.add(name, False, short(describe(e)))
            return
        report.add(name, True, detail or "")

    async def list_tools() -> str:
        names: list[str] = []
        cursor = None
        for _ in range(100):
            res = await client.list_tools(cursor=cursor)
            names.extend(tl.name for tl in res.tools)
            cursor = res.next_cursor
            if not cursor:
                break
        sep = args.separator
        missing = []
        for p in args.prefix:
            # `everything__x` is not a tool of `everything_t`, nor the other way round.
            mine = sorted(n for n in names if n.startswith(p + sep))
            report.tools[p] = mine
            if not mine:
                missing.append(p)
        others = sorted(n for n in names if not any(n.startswith(p + sep) for p in args.prefix))
        expect(not missing, f"no tools for prefixes {missing}; listed {sorted(names)}")
        expect(not others, f"tools outside every expected prefix: {others}")
        return f"{len(names)} tools: " + ", ".join(f"{p}: {len(report.tools[p])}" for p in args.prefix)

    await check("tools/list", list_tools)

    async def call(name: str, arguments: dict[str, Any], want: str) -> str:
        res = wire(await client.call_tool(name, arguments))
        text = texts(res)
        source = ((res.get("_meta") or {}).get("io.toolyard/source") or {}).get("name")
        report.calls[name] = {"text": text, "isError": bool(res.get("isError")), "source": source}
        expect(not res.get("isError"), f"isError: {short(res)}")
        expect(want in text, f"{want!r} not in the result's text: {short(res)}")
        return f"{short(text, 120)!r} from source {source!r}"

    for name, arguments, want in args.call:
        await check(f"call {name}", call, name, json.loads(arguments), want)

    if args.sampling_tool:

        async def sample() -> str:
            before = len(report.samplings)
            prompt = "say something for the gateway test"
            res = wire(await client.call_tool(args.sampling_tool, {"prompt": prompt, "maxTokens": 32}))
            text = texts(res)
            source = ((res.get("_meta") or {}).get("io.toolyard/source") or {}).get("name")
            report.calls[args.sampling_tool] = {"text": text, "isError": bool(res.get("isError")), "source": source}
            asked = report.samplings[before:]
            expect(not res.get("isError"), f"isError: {short(res)}")
            expect(len(asked) == 1, f"the sampling callback ran {len(asked)} times (want 1); result {short(res)}")
            msgs = json.dumps(asked[0].get("messages"))
            expect(prompt in msgs, f"the sampling request lacks the prompt: {short(asked[0])}")
            expect(args.sample_text in text, f"{args.sample_text!r} not in the result: {short(res)}")
            return f"sampled once; result {short(text, 160)!r}"

        await check(f"sampling through {args.sampling_tool}", sample)


async def amain(args: argparse.Namespace, command: list[str], report: Report) -> None:
    modern = args.protocol == "modern"

    async def on_sample(ctx: Any, params: Any) -> t.CreateMessageResult:
        report.samplings.append(wire(params))
        return t.CreateMessageResult(
            role="assistant",
            content=t.TextContent(type="text", text=args.sample_text),
            model="toolyard-gateway-test-model",
            stop_reason="endTurn",
        )

    if args.url:
        target: Any = streamable_http_client(args.url)
    else:
        target = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    client = Client(
        target,
        mode=MODERN_VERSION if modern else "legacy",
        read_timeout_seconds=args.request_timeout,
        sampling_callback=on_sample,
        client_info=t.Implementation(name="toolyard-gateway-python", version=_pkg_version("mcp")),
    )
    soft = max(args.deadline - 7.0, args.deadline * 0.5)
    connected = False
    with anyio.move_on_after(soft) as scope:
        try:
            async with client:
                if modern:
                    # Pinned mode adopted a synthesized discover result; probe for real (no
                    # silent fallback to initialize) and adopt the answer.
                    try:
                        with anyio.fail_after(args.request_timeout):
                            raw = await client.session.send_discover(MODERN_VERSION)
                        disc = t.DiscoverResult.model_validate(raw)
                    except Exception as e:  # noqa: BLE001
                        report.add("connect", False, f"server/discover: {short(describe(e))}")
                        return
                    if MODERN_VERSION not in disc.supported_versions:
                        report.add("connect", False, f"server/discover lacks {MODERN_VERSION}: {disc.supported_versions}")
                        return
                    client.session.adopt(disc)
                connected = True
                report.protocol_version = client.protocol_version
                info = client.server_info
                who = f"{info.name} {info.version}" if info else "anonymous server"
                over = "stdio" if not args.url else f"http {args.url}"
                report.add("connect", True, f"{client.protocol_version} over {over} with {who}")
                await run_checks(args, client, report)
        except Exception as e:  # noqa: BLE001 - reported, never raised
            report.add("session" if connected else "connect", False, short(describe(e)))
    if scope.cancelled_caught:
        report.add("deadline", False, f"did not finish within {soft:g}s; cut off during {report.current!r}")


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    own, command = argv[:split], argv[split + 1 :]
    ap = argparse.ArgumentParser(prog=SCRIPT)
    ap.add_argument("--protocol", choices=["legacy", "modern"], default="legacy")
    ap.add_argument("--url")
    ap.add_argument("--separator", default="__")
    ap.add_argument("--prefix", action="append", default=[])
    ap.add_argument("--call", nargs=3, action="append", default=[], metavar=("NAME", "ARGS", "EXPECT"))
    ap.add_argument("--sampling-tool")
    ap.add_argument("--sample-text", default="sampled through the gateway")
    ap.add_argument("--deadline", type=float, default=90.0)
    ap.add_argument("--request-timeout", type=float, default=45.0)
    args = ap.parse_args(own)
    if bool(args.url) == bool(command):
        ap.error("give either --url or a gateway command after --")
    report = Report(args.protocol, "http" if args.url else "stdio")

    def hard_deadline() -> None:
        report.add("deadline", False, f"hard deadline {args.deadline:g}s reached during {report.current!r}")
        code = report.emit()
        os._exit(code or 1)

    watchdog = threading.Timer(args.deadline, hard_deadline)
    watchdog.daemon = True
    watchdog.start()
    try:
        anyio.run(amain, args, command, report)
    except BaseException as e:  # noqa: BLE001 - always print the report
        report.add("harness", False, short(describe(e)))
    watchdog.cancel()
    if not report.checks:
        report.add("harness", False, "no check ran")
    return report.emit()


if __name__ == "__main__":
    sys.exit(main())
