#!/usr/bin/env python3
"""Drive an MCP server with the official Python SDK (`mcp` on PyPI).

    python_client.py [--profile demo|conformance] [--protocol legacy|modern]
                     [--deadline SECONDS] [--request-timeout SECONDS] -- SERVER COMMAND...
    python_client.py [same options] --transport http|sse --url http://HOST:PORT/mcp

--transport stdio (default) spawns SERVER COMMAND itself through the SDK's stdio
client transport; http connects to --url with the SDK's Streamable HTTP client
(`streamable_http_client`); sse connects with the deprecated 2024-11-05 HTTP+SSE
client (`sse_client`) to --url with its path /mcp replaced by /sse. It runs the
checks of the profile (see tests/interop/README.md) and prints ONE JSON line on
stdout:

    {"ok": bool, "checks": [{"name", "ok", "detail"}], "protocolVersion": str|null,
     "sdk": "python mcp X.Y.Z", "profile": ..., "protocol": ..., "transport": ...}

Exit status: 0 every check passed, 1 a check failed, 2 usage or setup error,
3 the requested protocol generation is not supported by this SDK (never for
this SDK: it speaks both).

--protocol legacy (default): `initialize` handshake, 2025-11-25.
--protocol modern: 2026-07-28 (stateless: `server/discover`, `_meta` envelope on
every request, input_required retries instead of server->client requests).
The SDK is pinned with `mode="2026-07-28"`, then `server/discover` is sent
explicitly and its result adopted; there is no fallback to `initialize`
(the SDK's `mode="auto"` would fall back silently).

Run it with the venv python from scripts/install-test-deps
($TOOLYARD_CACHE/venv/bin/python); started with another python that lacks
the SDK, it re-executes itself with that one.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
from typing import Any

SCRIPT = "python_client.py"


def _bootstrap() -> None:
    """Re-exec with the cache venv's python when the SDK is not importable here."""
    try:
        import mcp  # noqa: F401
        import mcp_types  # noqa: F401
        from mcp import Client  # noqa: F401

        return
    except ImportError as e:
        err = e
    cache = os.environ.get("TOOLYARD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "toolyard")
    py = os.path.join(cache, "venv", "bin", "python")
    if os.path.exists(py) and not os.environ.get("_TOOLYARD_INTEROP_REEXEC"):
        os.environ["_TOOLYARD_INTEROP_REEXEC"] = "1"
        os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])
    print(
        json.dumps(
            {
                "ok": False,
                "checks": [
                    {
                        "name": "setup",
                        "ok": False,
                        "detail": f"official mcp SDK not importable ({err}); run scripts/install-test-deps "
                        f"and use {py}",
                    }
                ],
                "protocolVersion": None,
            }
        ),
        flush=True,
    )
    sys.exit(2)


_bootstrap()

import warnings  # noqa: E402

import anyio  # noqa: E402
import mcp_types as t  # noqa: E402
from importlib.metadata import version as _pkg_version  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.sse import sse_client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from urllib.parse import urlsplit, urlunsplit  # noqa: E402

warnings.simplefilter("ignore")  # deprecation notices for legacy-era calls are expected here

SDK = f"python mcp {_pkg_version('mcp')}"
MODERN_VERSION = "2026-07-28"
ROOT_URI = "file:///tmp/toolyard-root"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- report


class Report:
    def __init__(self, profile: str, protocol: str, transport: str = "stdio") -> None:
        self.profile = profile
        self.protocol = protocol
        self.transport = transport
        self.checks: list[dict[str, Any]] = []
        self.protocol_version: str | None = None
        self.current = "connect"  # the check in progress, named when a deadline cuts it off
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
        """Print the one JSON line (once) and return the exit status."""
        with self._lock:
            if self._emitted:
                return 0 if self.ok() else 1
            self._emitted = True
            line = json.dumps(
                {
                    "ok": self.ok(),
                    "checks": list(self.checks),
                    "protocolVersion": self.protocol_version,
                    "sdk": SDK,
                    "profile": self.profile,
                    "protocol": self.protocol,
                    "transport": self.transport,
                }
            )
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return 0 if self.ok() else 1


class CheckFailed(Exception):
    pass


def expect(cond: Any, detail: str) -> None:
    if not cond:
        raise CheckFailed(detail)


def short(v: Any, n: int = 300) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= n else s[:n] + "..."


def wire(model: Any) -> Any:
    """Pydantic model -> the JSON shape seen on the wire (camelCase), for SDK-neutral checks."""
    if hasattr(model, "model_dump"):
        return model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return model


def texts(result: dict[str, Any]) -> list[str]:
    return [c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"]


def is_subset(expected: Any, actual: Any) -> bool:
    """Every key/value of `expected` appears in `actual` (recursively; lists compare exactly)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and is_subset(v, actual[k]) for k, v in expected.items())
    return expected == actual


# ----------------------------------------------------------------------------- client callbacks


def fill_form(schema: dict[str, Any]) -> dict[str, Any]:
    """Answer an elicitation form: schema defaults where given, else a plausible value per type."""
    content: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        if "default" in prop:
            content[key] = prop["default"]
        elif prop.get("type") == "array":
            items = prop.get("items") or {}
            choices = items.get("enum") or [o.get("const") for o in items.get("anyOf", []) + items.get("oneOf", [])]
            content[key] = choices[:1] if choices else []
        elif "enum" in prop:
            content[key] = prop["enum"][0]
        elif "oneOf" in prop or "anyOf" in prop:
            content[key] = (prop.get("oneOf") or prop.get("anyOf"))[0].get("const")
        elif prop.get("type") == "integer":
            content[key] = 7
        elif prop.get("type") == "number":
            content[key] = 7.5
        elif prop.get("type") == "boolean":
            content[key] = True
        elif key == "name":
            content[key] = "Ada"
        elif key == "email" or prop.get("format") == "email":
            content[key] = "ada@example.com"
        else:
            content[key] = "ada"
    return content


class Seen:
    """What the server asked of / sent to this client."""

    def __init__(self) -> None:
        self.elicitations: list[dict[str, Any]] = []
        self.samplings: list[dict[str, Any]] = []
        self.roots_calls = 0
        self.logs: list[dict[str, Any]] = []


def make_callbacks(seen: Seen):
    async def on_elicit(ctx: Any, params: Any) -> t.ElicitResult:
        p = wire(params)
        seen.elicitations.append(p)
        return t.ElicitResult(action="accept", content=fill_form(p.get("requestedSchema") or {}))

    async def on_sample(ctx: Any, params: Any) -> t.CreateMessageResult:
        seen.samplings.append(wire(params))
        return t.CreateMessageResult(
            role="assistant", content=t.TextContent(type="text", text="short"), model="toolyard-interop-fake"
        )

    async def on_roots(ctx: Any) -> t.ListRootsResult:
        seen.roots_calls += 1
        return t.ListRootsResult(roots=[t.Root(uri=ROOT_URI, name="toolyard-root")])

    async def on_log(params: Any) -> None:
        seen.logs.append(wire(params))

    return on_elicit, on_sample, on_roots, on_log


# ----------------------------------------------------------------------------- runner


class Runner:
    def __init__(self, report: Report, client: Client, seen: Seen, modern: bool, timeout: float) -> None:
        self.r = report
        self.c = client
        self.seen = seen
        self.modern = modern
        self.timeout = timeout
        self.tools: dict[str, dict[str, Any]] = {}

    async def check(self, name: str, fn, *args: Any) -> Any:
        """Run one check with a timeout; record ok with the returned detail, or the failure."""
        self.r.current = name
        try:
            with anyio.fail_after(self.timeout):
                out = await fn(*args)
        except CheckFailed as e:
            self.r.add(name, False, str(e))
            return None
        except TimeoutError:
            self.r.add(name, False, f"timed out after {self.timeout:g}s")
            return None
        except Exception as e:  # SDK errors (MCPError, validation, transport) are check failures
            self.r.add(name, False, f"{type(e).__name__}: {short(str(e))}")
            return None
        detail, value = out if isinstance(out, tuple) else (out, None)
        self.r.add(name, True, detail or "")
        return value

    async def call(self, name: str, args: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return wire(await self.c.call_tool(name, args, **kw))

    async def wait_for(self, cond, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not cond() and time.monotonic() < end:
            await anyio.sleep(0.02)

    # --- shared

    async def list_tools(self, expected: list[str]) -> Any:
        res = wire(await self.c.list_tools())
        self.tools = {tl["name"]: tl for tl in res.get("tools", [])}
        missing = [n for n in expected if n not in self.tools]
        expect(not missing, f"missing tools {missing}; listed {sorted(self.tools)}")
        bad = [n for n, tl in self.tools.items() if not isinstance(tl.get("inputSchema"), dict)]
        expect(not bad, f"tools without an inputSchema object: {bad}")
        return f"{len(self.tools)} tools: {', '.join(sorted(self.tools))}"

    async def ping(self) -> str:
        await self.c.send_ping()
        return "ping answered"

    async def set_level(self, level: str) -> str:
        await self.c.set_logging_level(level)
        return f"logging/setLevel {level} accepted"

    # --- demo profile

    async def demo(self) -> None:
        c, seen = self.c, self.seen
        await self.check(
            "tools/list",
            self.list_tools,
            ["echo", "add", "slow", "ask_name", "summarize", "list_roots", "fail"],
        )
        if not self.modern:
            await self.check("ping", self.ping)

        async def echo(msg: str) -> str:
            res = await self.call("echo", {"message": msg})
            content = res.get("content", [])
            expect(not res.get("isError"), f"isError set: {short(res)}")
            expect(
                len(content) == 1 and content[0].get("type") == "text" and content[0].get("text") == msg,
                f"expected one text item {msg!r}, got {short(content)}",
            )
            return f"echoed {msg!r}"

        await self.check("tool echo", echo, "hello from python")

        async def add() -> str:
            res = await self.call("add", {"a": 2.5, "b": 4})
            expect(not res.get("isError"), f"isError set: {short(res)}")
            sc = res.get("structuredContent")
            expect(isinstance(sc, dict) and sc.get("sum") == 6.5, f"structuredContent {short(sc)} != {{'sum': 6.5}}")
            expect(texts(res), f"no text item in content {short(res.get('content'))}")
            return f"structuredContent {short(sc)}, text {texts(res)[0]!r}"

        await self.check("tool add", add)

        async def fail() -> str:
            res = await self.call("fail", {})
            expect(res.get("isError") is True, f"isError is not true: {short(res)}")
            return f"isError true, content {short(res.get('content'), 120)}"

        await self.check("tool fail", fail)

        async def ask_name() -> str:
            n0 = len(seen.elicitations)
            res = await self.call("ask_name", {})
            expect(len(seen.elicitations) > n0, "elicitation callback was never invoked")
            schema = seen.elicitations[-1].get("requestedSchema") or {}
            expect("name" in (schema.get("properties") or {}), f"requestedSchema lacks property 'name': {short(schema)}")
            expect(texts(res) == ["Hello, Ada!"], f"expected text 'Hello, Ada!', got {short(res.get('content'))}")
            return "elicited {name: Ada} -> 'Hello, Ada!'"

        await self.check("tool ask_name (elicitation)", ask_name)

        async def summarize() -> str:
            n0 = len(seen.samplings)
            res = await self.call("summarize", {"text": "A long text about the Toolyard MCP runtime. " * 5})
            expect(len(seen.samplings) > n0, "sampling callback was never invoked")
            expect(texts(res) == ["Summary: short"], f"expected text 'Summary: short', got {short(res.get('content'))}")
            return "sampled 'short' -> 'Summary: short'"

        await self.check("tool summarize (sampling)", summarize)

        async def list_roots() -> str:
            n0 = seen.roots_calls
            res = await self.call("list_roots", {})
            expect(seen.roots_calls > n0, "roots/list callback was never invoked")
            lines = "\n".join(texts(res)).splitlines()
            expect(lines == [ROOT_URI], f"expected text {ROOT_URI!r}, got {short(res.get('content'))}")
            return f"roots -> {ROOT_URI}"

        await self.check("tool list_roots (roots)", list_roots)

        if not self.modern:
            await self.check("logging/setLevel info", self.set_level, "info")

        async def slow_progress() -> str:
            progress: list[tuple[float, float | None, str | None]] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append((p, total, message))

            logs0 = len(seen.logs)
            res = await self.call("slow", {"steps": 3, "delay_ms": 50}, progress_callback=on_progress)
            await self.wait_for(lambda: len(seen.logs) > logs0, 1.0)  # logs may trail the result slightly
            expect(not res.get("isError"), f"isError set: {short(res)}")
            values = [p for p, _, _ in progress]
            expect(len(values) >= 3, f"expected >= 3 progress notifications, got {len(values)}: {values}")
            expect(all(b > a for a, b in zip(values, values[1:])), f"progress not increasing: {values}")
            new_logs = seen.logs[logs0:]
            expect(new_logs, "no notifications/message log arrived")
            return f"{len(values)} progress {values}, {len(new_logs)} log(s), first {short(new_logs[0], 120)}"

        await self.check("tool slow (progress + logging)", slow_progress)

        async def slow_cancel() -> str:
            t0 = time.monotonic()
            res: Any = None
            with anyio.move_on_after(0.3) as scope:  # leaving the scope abandons the request: notifications/cancelled
                res = await self.call("slow", {"steps": 100, "delay_ms": 100})
            took = time.monotonic() - t0
            if not scope.cancelled_caught:
                raise CheckFailed(f"slow(100 x 100 ms) finished in {took:.2f}s, before the cancel: {short(res)}")
            logs0 = len(seen.logs)
            await anyio.sleep(0.6)
            return f"cancelled after {took:.2f}s; logs in the 0.6 s after: {len(seen.logs) - logs0}"

        await self.check("tool slow (cancel)", slow_cancel)
        await self.check("tool echo after cancel", echo, "still alive")

        # resources
        async def list_resources() -> str:
            res = wire(await c.list_resources())
            uris = [x.get("uri") for x in res.get("resources", [])]
            missing = [u for u in ("demo://readme", "demo://logo") if u not in uris]
            expect(not missing, f"missing {missing}; listed {uris}")
            return f"listed {uris}"

        await self.check("resources/list", list_resources)

        async def read_readme() -> str:
            res = wire(await c.read_resource("demo://readme"))
            contents = res.get("contents", [])
            expect(contents, "no contents")
            item = contents[0]
            expect(item.get("mimeType") == "text/markdown", f"mimeType {item.get('mimeType')!r} != 'text/markdown'")
            expect(isinstance(item.get("text"), str) and item["text"], f"no text: {short(item)}")
            return f"{len(item['text'])} chars of markdown"

        await self.check("resources/read demo://readme", read_readme)

        async def read_logo() -> str:
            res = wire(await c.read_resource("demo://logo"))
            contents = res.get("contents", [])
            expect(contents, "no contents")
            item = contents[0]
            expect(item.get("mimeType") == "image/png", f"mimeType {item.get('mimeType')!r} != 'image/png'")
            expect(isinstance(item.get("blob"), str), f"no blob: {short(item)}")
            data = base64.b64decode(item["blob"], validate=True)
            expect(data.startswith(PNG_MAGIC), f"blob is not a PNG (starts {data[:8]!r})")
            return f"{len(data)} bytes of PNG"

        await self.check("resources/read demo://logo", read_logo)

        async def list_templates() -> str:
            res = wire(await c.list_resource_templates())
            tpls = [x.get("uriTemplate") for x in res.get("resourceTemplates", [])]
            expect("demo://users/{id}" in tpls, f"demo://users/{{id}} not in {tpls}")
            return f"listed {tpls}"

        await self.check("resources/templates/list", list_templates)

        async def read_user() -> str:
            res = wire(await c.read_resource("demo://users/42"))
            contents = res.get("contents", [])
            expect(contents and isinstance(contents[0].get("text"), str), f"no text contents: {short(res)}")
            text = contents[0]["text"]
            try:
                json.loads(text)
            except ValueError:
                raise CheckFailed(f"text is not JSON: {short(text)}")
            expect("42" in text, f"id 42 not in {short(text)}")
            return f"uri {contents[0].get('uri')}, text {short(text, 120)}"

        await self.check("resources/read demo://users/42", read_user)

        # prompts
        async def list_prompts() -> str:
            res = wire(await c.list_prompts())
            names = [p.get("name") for p in res.get("prompts", [])]
            missing = [n for n in ("greet", "code_review") if n not in names]
            expect(not missing, f"missing {missing}; listed {names}")
            return f"listed {names}"

        await self.check("prompts/list", list_prompts)

        def msg_text(m: dict[str, Any]) -> str:
            cont = m.get("content") or {}
            return cont.get("text", "") if cont.get("type") == "text" else ""

        async def greet() -> str:
            res = wire(await c.get_prompt("greet", {"name": "Ada"}))
            msgs = res.get("messages", [])
            expect(len(msgs) == 1, f"expected one message, got {len(msgs)}: {short(msgs)}")
            expect(msgs[0].get("role") == "user", f"role {msgs[0].get('role')!r} != 'user'")
            expect("Ada" in msg_text(msgs[0]), f"'Ada' not in message {short(msgs[0])}")
            return short(msg_text(msgs[0]), 120)

        await self.check("prompts/get greet", greet)

        async def code_review(args: dict[str, str]) -> str:
            res = wire(await c.get_prompt("code_review", args))
            msgs = res.get("messages", [])
            expect(msgs, "no messages")
            expect(any(args["code"] in msg_text(m) for m in msgs), f"code not in messages {short(msgs)}")
            return f"{len(msgs)} message(s)"

        await self.check("prompts/get code_review", code_review, {"code": "fn main() {}", "language": "rust"})
        await self.check("prompts/get code_review (no language)", code_review, {"code": "print(1)"})

        async def complete() -> str:
            res = wire(
                await c.complete(
                    t.PromptReference(type="ref/prompt", name="code_review"), {"name": "language", "value": "py"}
                )
            )
            values = (res.get("completion") or {}).get("values", [])
            expect("python" in values, f"'python' not in {values}")
            expect(all(v.startswith("py") for v in values), f"values not all starting with 'py': {values}")
            return f"values {values}"

        await self.check("completion/complete code_review.language 'py'", complete)

    # --- conformance profile

    async def conformance(self) -> None:
        c, seen = self.c, self.seen
        expected_tools = [
            "test_simple_text",
            "test_image_content",
            "test_audio_content",
            "test_embedded_resource",
            "test_multiple_content_types",
            "test_tool_with_logging",
            "test_tool_with_progress",
            "test_error_handling",
            "test_sampling",
            "test_elicitation",
            "test_elicitation_sep1034_defaults",
            "test_elicitation_sep1330_enums",
            "json_schema_2020_12_tool",
        ]
        await self.check("tools/list", self.list_tools, expected_tools)

        async def descriptions() -> str:
            bad = [n for n, tl in self.tools.items() if not tl.get("description")]
            expect(self.tools, "no tools listed")
            expect(not bad, f"tools without a description: {bad}")
            return "every tool has name, description, inputSchema"

        await self.check("tools/list descriptions", descriptions)

        if not self.modern:
            await self.check("ping", self.ping)
            await self.check("logging/setLevel info", self.set_level, "info")

        def content_types(res: dict[str, Any]) -> list[str]:
            return [x.get("type") for x in res.get("content", [])]

        async def simple_text() -> str:
            res = await self.call("test_simple_text")  # no `arguments` field at all
            expect(texts(res) and texts(res)[0], f"no non-empty text: {short(res)}")
            return short(texts(res)[0], 120)

        await self.check("tool test_simple_text (no arguments)", simple_text)

        async def media(tool: str, kind: str, mime: str | None) -> str:
            res = await self.call(tool, {})
            items = [x for x in res.get("content", []) if x.get("type") == kind]
            expect(items, f"no {kind} item in {content_types(res)}")
            expect(items[0].get("data") and items[0].get("mimeType"), f"{kind} item lacks data/mimeType")
            if mime:
                expect(items[0]["mimeType"] == mime, f"mimeType {items[0]['mimeType']!r} != {mime!r}")
            base64.b64decode(items[0]["data"], validate=True)
            return f"{kind} {items[0]['mimeType']}, {len(items[0]['data'])} base64 chars"

        await self.check("tool test_image_content", media, "test_image_content", "image", "image/png")
        await self.check("tool test_audio_content", media, "test_audio_content", "audio", "audio/wav")

        async def embedded() -> str:
            res = await self.call("test_embedded_resource", {})
            items = [x for x in res.get("content", []) if x.get("type") == "resource"]
            expect(items, f"no resource item in {content_types(res)}")
            r = items[0].get("resource") or {}
            expect(r.get("uri") and r.get("mimeType") and ("text" in r or "blob" in r), f"bad resource {short(r)}")
            return f"resource {r['uri']} ({r['mimeType']})"

        await self.check("tool test_embedded_resource", embedded)

        async def mixed() -> str:
            res = await self.call("test_multiple_content_types", {})
            kinds = content_types(res)
            expect(len(kinds) >= 2 and {"text", "image", "resource"} <= set(kinds), f"content types {kinds}")
            return f"content types {kinds}"

        await self.check("tool test_multiple_content_types", mixed)

        if not self.modern:
            await self.check("logging/setLevel debug", self.set_level, "debug")

        async def with_logging() -> str:
            logs0 = len(seen.logs)
            meta = {t.LOG_LEVEL_META_KEY: "debug"} if self.modern else None
            res = await self.call("test_tool_with_logging", {}, meta=meta)
            await self.wait_for(lambda: len(seen.logs) - logs0 >= 3, 0.5)
            got = seen.logs[logs0:]
            expect(not res.get("isError"), f"isError set: {short(res)}")
            expect(len(got) >= 3, f"expected >= 3 log notifications, got {len(got)}: {short(got)}")
            return f"{len(got)} logs: {[g.get('data') for g in got]}"

        await self.check("tool test_tool_with_logging", with_logging)

        async def with_progress() -> str:
            progress: list[float] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append(p)

            res = await self.call("test_tool_with_progress", {}, progress_callback=on_progress)
            n_at_result = len(progress)
            expect(not res.get("isError"), f"isError set: {short(res)}")
            expect(n_at_result >= 3, f"expected >= 3 progress notifications before the result, got {progress}")
            expect(all(b >= a for a, b in zip(progress, progress[1:])), f"progress decreases: {progress}")
            return f"progress {progress}"

        await self.check("tool test_tool_with_progress", with_progress)

        async def error_handling() -> str:
            res = await self.call("test_error_handling", {})
            expect(res.get("isError") is True, f"isError is not true: {short(res)}")
            expect(texts(res) and texts(res)[0], "content[0] has no non-empty text")
            return short(texts(res)[0], 120)

        await self.check("tool test_error_handling", error_handling)

        async def sampling() -> str:
            n0 = len(seen.samplings)
            res = await self.call("test_sampling", {"prompt": "Say something short"})
            expect(len(seen.samplings) > n0, "sampling callback was never invoked")
            req = seen.samplings[-1]
            first = (req.get("messages") or [{}])[0].get("content") or {}
            expect(first.get("text") == "Say something short", f"sampling message is not the prompt: {short(req)}")
            expect(texts(res) and texts(res)[0], f"no non-empty text: {short(res)}")
            return short(texts(res)[0], 120)

        await self.check("tool test_sampling", sampling)

        async def elicit(tool: str, args: dict[str, Any], want_schema: dict[str, Any]) -> str:
            n0 = len(seen.elicitations)
            res = await self.call(tool, args)
            expect(len(seen.elicitations) > n0, "elicitation callback was never invoked")
            schema = seen.elicitations[-1].get("requestedSchema") or {}
            expect(is_subset(want_schema, schema), f"requestedSchema {short(schema, 600)} lacks {short(want_schema, 600)}")
            expect(texts(res) and texts(res)[0], f"no non-empty text: {short(res)}")
            return short(texts(res)[0], 160)

        await self.check(
            "tool test_elicitation",
            elicit,
            "test_elicitation",
            {"message": "Please provide your details"},
            {"properties": {"username": {"type": "string"}, "email": {"type": "string"}}},
        )
        await self.check(
            "tool test_elicitation_sep1034_defaults",
            elicit,
            "test_elicitation_sep1034_defaults",
            {},
            {
                "properties": {
                    "name": {"type": "string", "default": "John Doe"},
                    "age": {"type": "integer", "default": 30},
                    "score": {"type": "number", "default": 95.5},
                    "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "default": True},
                }
            },
        )
        await self.check(
            "tool test_elicitation_sep1330_enums",
            elicit,
            "test_elicitation_sep1330_enums",
            {},
            {"properties": SEP1330_PROPERTIES},
        )

        async def schema_2020() -> str:
            tool = self.tools.get("json_schema_2020_12_tool")
            expect(tool, "json_schema_2020_12_tool not listed")
            schema = tool.get("inputSchema") or {}
            expect(is_subset(JSON_SCHEMA_2020_12, schema), f"inputSchema not preserved: {short(schema, 600)}")
            res = await self.call("json_schema_2020_12_tool", {"name": "Ada", "address": {"street": "1 Main", "city": "X"}, "contactMethod": "email", "email": "ada@example.com"})
            expect(not res.get("isError"), f"call returned isError: {short(res)}")
            return "inputSchema keeps $schema/$defs/additionalProperties; call ok"

        await self.check("tool json_schema_2020_12_tool", schema_2020)

        async def optional_tool(name: str) -> str:
            if name not in self.tools:
                return f"skipped: {name} not listed"
            res = await self.call(name, {})
            expect(not res.get("isError") and res.get("content"), f"no non-error content: {short(res)}")
            return f"content types {content_types(res)}"

        await self.check("tool test_reconnection (if listed)", optional_tool, "test_reconnection")

        if self.modern:
            for name in MRTR_TOOLS:
                if name in self.tools:
                    await self.check(f"tool {name} (input_required)", optional_tool, name)

        # resources
        async def list_resources() -> str:
            res = wire(await c.list_resources())
            items = res.get("resources", [])
            uris = [x.get("uri") for x in items]
            want = ["test://static-text", "test://static-binary"] + ([] if self.modern else ["test://watched-resource"])
            missing = [u for u in want if u not in uris]
            expect(not missing, f"missing {missing}; listed {uris}")
            expect(all(x.get("name") for x in items), "a resource has no name")
            return f"listed {uris}"

        await self.check("resources/list", list_resources)

        async def read_text() -> str:
            res = wire(await c.read_resource("test://static-text"))
            item = (res.get("contents") or [{}])[0]
            expect(item.get("uri") and item.get("mimeType") and item.get("text"), f"bad contents {short(item)}")
            return short(item["text"], 120)

        await self.check("resources/read test://static-text", read_text)

        async def read_binary() -> str:
            res = wire(await c.read_resource("test://static-binary"))
            item = (res.get("contents") or [{}])[0]
            expect(item.get("uri") and item.get("mimeType") and item.get("blob"), f"bad contents {short(item)}")
            return f"{item['mimeType']}, {len(item['blob'])} base64 chars"

        await self.check("resources/read test://static-binary", read_binary)

        async def templates() -> str:
            res = wire(await c.list_resource_templates())
            tpls = [x.get("uriTemplate") for x in res.get("resourceTemplates", [])]
            expect("test://template/{id}/data" in tpls, f"test://template/{{id}}/data not in {tpls}")
            return f"listed {tpls}"

        await self.check("resources/templates/list", templates)

        async def read_template() -> str:
            res = wire(await c.read_resource("test://template/123/data"))
            item = (res.get("contents") or [{}])[0]
            expect(item.get("uri") and "123" in (item.get("text") or ""), f"bad contents {short(item)}")
            return short(item["text"], 120)

        await self.check("resources/read test://template/123/data", read_template)

        if not self.modern:

            async def subscribe() -> str:
                await c.subscribe_resource("test://watched-resource")
                await c.unsubscribe_resource("test://watched-resource")
                return "subscribe + unsubscribe answered"

            await self.check("resources/subscribe + unsubscribe test://watched-resource", subscribe)

        # prompts
        async def list_prompts() -> str:
            res = wire(await c.list_prompts())
            prompts = res.get("prompts", [])
            names = [p.get("name") for p in prompts]
            want = [
                "test_simple_prompt",
                "test_prompt_with_arguments",
                "test_prompt_with_embedded_resource",
                "test_prompt_with_image",
            ]
            missing = [n for n in want if n not in names]
            expect(not missing, f"missing {missing}; listed {names}")
            expect(all(p.get("description") for p in prompts), "a prompt has no description")
            return f"listed {names}"

        await self.check("prompts/list", list_prompts)

        async def get_prompt(name: str, args: dict[str, str] | None, want) -> str:
            res = wire(await c.get_prompt(name, args))
            msgs = res.get("messages", [])
            expect(msgs, "no messages")
            expect(all(m.get("role") and m.get("content") for m in msgs), f"message without role/content: {short(msgs)}")
            return want(msgs)

        def simple(msgs: list[dict[str, Any]]) -> str:
            return f"{len(msgs)} message(s)"

        def with_args(msgs: list[dict[str, Any]]) -> str:
            blob = json.dumps(msgs)
            expect("testValue1" in blob and "testValue2" in blob, f"argument values missing: {short(msgs)}")
            return "both argument values present"

        def with_resource(msgs: list[dict[str, Any]]) -> str:
            expect(any(m["content"].get("type") == "resource" for m in msgs), f"no resource content: {short(msgs)}")
            return "has a resource content"

        def with_image(msgs: list[dict[str, Any]]) -> str:
            imgs = [m["content"] for m in msgs if m["content"].get("type") == "image"]
            expect(imgs and imgs[0].get("data") and imgs[0].get("mimeType"), f"no image content: {short(msgs)}")
            return f"image {imgs[0]['mimeType']}"

        await self.check("prompts/get test_simple_prompt", get_prompt, "test_simple_prompt", None, simple)
        await self.check(
            "prompts/get test_prompt_with_arguments",
            get_prompt,
            "test_prompt_with_arguments",
            {"arg1": "testValue1", "arg2": "testValue2"},
            with_args,
        )
        await self.check(
            "prompts/get test_prompt_with_embedded_resource",
            get_prompt,
            "test_prompt_with_embedded_resource",
            {"resourceUri": "test://example-resource"},
            with_resource,
        )
        await self.check("prompts/get test_prompt_with_image", get_prompt, "test_prompt_with_image", None, with_image)

        async def complete() -> str:
            res = wire(
                await c.complete(
                    t.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
                    {"name": "arg1", "value": "test"},
                )
            )
            values = (res.get("completion") or {}).get("values")
            expect(isinstance(values, list), f"completion.values is not an array: {short(res)}")
            return f"values {values}"

        await self.check("completion/complete test_prompt_with_arguments.arg1", complete)


SEP1330_PROPERTIES = {
    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {
        "type": "string",
        "oneOf": [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"},
        ],
    },
    "legacyEnum": {
        "type": "string",
        "enum": ["opt1", "opt2", "opt3"],
        "enumNames": ["Option One", "Option Two", "Option Three"],
    },
    "untitledMulti": {
        "type": "array",
        "minItems": 1,
        "maxItems": 3,
        "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
    },
    "titledMulti": {
        "type": "array",
        "minItems": 1,
        "maxItems": 3,
        "items": {
            "anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"},
            ]
        },
    },
}

JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}

# 2026-07-28 multi-round-trip fixtures the SDK can drive by itself (called when listed, modern only).
MRTR_TOOLS = [
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
]


# ----------------------------------------------------------------------------- main


def kill_children() -> None:
    """Last resort at the hard deadline: SIGKILL our own child processes (and their process groups)."""
    me = os.getpid()
    for pid_s in os.listdir("/proc"):
        if not pid_s.isdigit():
            continue
        try:
            with open(f"/proc/{pid_s}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, pgid = int(fields[1]), int(fields[2])
        except (OSError, IndexError, ValueError):
            continue
        if ppid != me:
            continue
        pid = int(pid_s)
        try:
            if pgid == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def sse_url_for(url: str) -> str:
    """The HTTP+SSE (2024-11-05) endpoint next to the Streamable HTTP endpoint `url`.

    Toolyard serves `GET /sse` (+ `POST /messages?sessionId=...`) on the same host and
    port as `/mcp`: a trailing `/mcp` path segment becomes `/sse`; any other path is
    taken as the SSE URL itself.
    """
    parts = urlsplit(url)
    path = parts.path
    if path.endswith("/mcp"):
        path = path[: -len("/mcp")] + "/sse"
    return urlunsplit(parts._replace(path=path))


def server_target(args: argparse.Namespace, command: list[str]) -> Any:
    """What `Client(...)` connects to: a stdio command, or an SDK HTTP client transport."""
    if args.transport == "http":
        return streamable_http_client(args.endpoint)
    if args.transport == "sse":
        return sse_client(args.endpoint, timeout=args.request_timeout)
    return StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))


async def amain(args: argparse.Namespace, command: list[str], report: Report) -> None:
    modern = args.protocol == "modern"
    seen = Seen()
    on_elicit, on_sample, on_roots, on_log = make_callbacks(seen)
    client = Client(
        server_target(args, command),
        mode=MODERN_VERSION if modern else "legacy",
        read_timeout_seconds=args.request_timeout,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        list_roots_callback=on_roots,
        logging_callback=on_log,
        log_level="info" if modern else None,  # 2026-07-28: per-request logging opt-in
        client_info=t.Implementation(name="toolyard-interop-python", version=_pkg_version("mcp")),
    )
    # Leave time for the SDK's bounded shutdown of the server process (close stdin, TERM, KILL).
    soft = max(args.deadline - 7.0, args.deadline * 0.5)
    connected = False
    with anyio.move_on_after(soft) as deadline_scope:
        try:
            # The handshake is bounded by read_timeout_seconds (the SDK raises MCPError on it).
            async with client:
                if modern:
                    # Pinned mode adopted a synthesized discover result; now probe for real
                    # (no silent fallback to initialize as mode="auto" would do) and adopt it.
                    try:
                        with anyio.fail_after(args.request_timeout):
                            raw = await client.session.send_discover(MODERN_VERSION)
                        disc = t.DiscoverResult.model_validate(raw)
                    except TimeoutError:
                        report.add("connect", False, f"server/discover: no answer within {args.request_timeout:g}s")
                        return
                    except Exception as e:  # noqa: BLE001
                        report.add("connect", False, f"server/discover: {short(describe(e))}")
                        return
                    if MODERN_VERSION not in disc.supported_versions:
                        report.add("connect", False, f"server/discover supportedVersions {disc.supported_versions} "
                                   f"lacks {MODERN_VERSION}")
                        return
                    client.session.adopt(disc)
                connected = True
                report.protocol_version = client.protocol_version
                info = client.server_info
                who = f"{info.name} {info.version}" if info else "anonymous server"
                how = "server/discover" if modern else "initialize"
                over = "stdio" if args.transport == "stdio" else f"{args.transport} {args.endpoint}"
                report.add("connect", True, f"{how} over {over}: {client.protocol_version} with {who}")
                runner = Runner(report, client, seen, modern, args.request_timeout)
                if args.profile == "demo":
                    await runner.demo()
                else:
                    await runner.conformance()
        except Exception as e:  # noqa: BLE001 - reported, never raised
            name = "session" if connected else "connect"
            report.add(name, False, short(describe(e)))
    if deadline_scope.cancelled_caught:
        report.add("deadline", False, f"checks did not finish within {soft:g}s (server hung?); "
                   f"cut off during {report.current!r}")


def describe(e: BaseException) -> str:
    """Flatten exception groups (anyio task groups wrap transport errors) into one line."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


USAGE = (
    f"{SCRIPT} [--profile demo|conformance] [--protocol legacy|modern] [--deadline S] [--request-timeout S]\n"
    f"         [--transport stdio] -- SERVER COMMAND...\n"
    f"       {SCRIPT} [options] --transport http|sse --url http://HOST:PORT/mcp"
)


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    own, command = argv[:split], argv[split + 1 :]
    ap = argparse.ArgumentParser(prog=SCRIPT, usage=USAGE)
    ap.add_argument("--profile", choices=["demo", "conformance"], default="demo")
    ap.add_argument("--protocol", choices=["legacy", "modern"], default="legacy")
    ap.add_argument("--transport", choices=["stdio", "http", "sse"], default="stdio",
                    help="stdio: spawn the command after --; http: Streamable HTTP at --url; "
                    "sse: HTTP+SSE (2024-11-05) at --url with /mcp replaced by /sse")
    ap.add_argument("--url", help="the server's Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
    ap.add_argument("--deadline", type=float, default=30.0, help="whole run, seconds (default 30)")
    ap.add_argument("--request-timeout", type=float, default=10.0, help="one check, seconds (default 10)")
    args = ap.parse_args(own)
    if args.transport == "stdio":
        if not command:
            ap.error("no server command after --")
        if args.url:
            ap.error("--url needs --transport http or sse")
    else:
        if not args.url:
            ap.error(f"--transport {args.transport} needs --url")
        if command:
            ap.error(f"--transport {args.transport} connects to --url; no server command is run")
        if urlsplit(args.url).scheme not in ("http", "https"):
            ap.error(f"bad --url {args.url}")
        args.endpoint = args.url if args.transport == "http" else sse_url_for(args.url)

    report = Report(args.profile, args.protocol, args.transport)

    def hard_deadline() -> None:
        killed = "; killed the server" if args.transport == "stdio" else ""
        report.add("deadline", False, f"hard deadline {args.deadline:g}s reached during {report.current!r}{killed}")
        kill_children()
        code = report.emit()
        os._exit(code or 1)

    watchdog = threading.Timer(args.deadline, hard_deadline)
    watchdog.daemon = True
    watchdog.start()
    try:
        anyio.run(amain, args, command, report)
    except BaseException as e:  # noqa: BLE001 - always print the report
        if isinstance(e, KeyboardInterrupt):
            report.add("interrupted", False, "KeyboardInterrupt")
        else:
            report.add("harness", False, f"{type(e).__name__}: {short(str(e))}")
    watchdog.cancel()
    if not report.checks:
        report.add("harness", False, "no check ran")
    return report.emit()


if __name__ == "__main__":
    sys.exit(main())
