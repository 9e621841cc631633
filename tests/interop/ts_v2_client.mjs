#!/usr/bin/env node
// Drive an MCP server with the official TypeScript SDK v2 client (`@modelcontextprotocol/client`:
// Client + StdioClientTransport / StreamableHTTPClientTransport / SSEClientTransport).
//
//   node ts_v2_client.mjs [--profile demo|conformance] [--protocol legacy|modern]
//                         [--deadline S] [--request-timeout S] -- SERVER COMMAND...
//   node ts_v2_client.mjs [same options] --transport http|sse --url http://HOST:PORT/mcp
//
// --transport stdio (default) spawns SERVER COMMAND; http connects to --url with
// Streamable HTTP; sse connects with the deprecated 2024-11-05 HTTP+SSE transport to
// --url with its path /mcp replaced by /sse.
//
// Prints ONE JSON line on stdout ({"ok", "checks", "protocolVersion", ...}); exit
// 0 all checks passed, 1 a check failed, 2 usage/setup error.
//
// --protocol legacy (default): versionNegotiation mode 'legacy', the plain
//   initialize handshake (2025-11-25).
// --protocol modern: versionNegotiation {mode: {pin: '2026-07-28'}}: connect()
//   sends server/discover and requires 2026-07-28, with no fallback. On the SDK's
//   stdio transport that probe runs on a short-lived sibling server process
//   spawned from the same command; the session then starts its own process.
//   Every request then carries the _meta envelope; input_required results are
//   fulfilled through the same elicitation/sampling/roots handlers and retried.
// The SDK is loaded from $TOOLYARD_CACHE/npm (scripts/install-test-deps).
// Checks: lib/common.mjs (shared with ts_v1_client.mjs), see README.md.

import { importFromCache, main, MODERN_VERSION } from './lib/common.mjs';

const PKG = '@modelcontextprotocol/client';
let sdk;

await main({
    name: 'ts_v2_client.mjs',
    supportsModern: true,

    async load() {
        const client = await importFromCache(PKG, '.');
        const stdio = await importFromCache(PKG, './stdio');
        sdk = {
            Client: client.module.Client,
            Stdio: stdio.module.StdioClientTransport,
            Http: client.module.StreamableHTTPClientTransport,
            Sse: client.module.SSEClientTransport
        };
        return { sdk: `typescript ${PKG} ${client.version}` };
    },

    async connect(opts, handlers, onTransport) {
        const { Client, Stdio, Http, Sse } = sdk;
        const timeout = opts.requestTimeout * 1000;
        const modern = opts.protocol === 'modern';
        const client = new Client(
            { name: 'toolyard-interop-ts-v2', version: '0.0.0' },
            {
                capabilities: { elicitation: { form: {} }, sampling: {}, roots: { listChanged: true } },
                versionNegotiation: modern
                    ? { mode: { pin: MODERN_VERSION }, probe: { timeoutMs: timeout } }
                    : { mode: 'legacy' }
            }
        );
        client.setRequestHandler('elicitation/create', req => handlers.elicit(req.params));
        client.setRequestHandler('sampling/createMessage', req => handlers.sample(req.params));
        client.setRequestHandler('roots/list', () => handlers.roots());
        client.setNotificationHandler('notifications/message', n => handlers.log(n.params));
        client.onerror = e => process.stderr.write(`[ts_v2_client.mjs] sdk error: ${e?.message ?? e}\n`);

        let transport;
        if (opts.transport === 'http') transport = new Http(new URL(opts.endpoint));
        else if (opts.transport === 'sse') transport = new Sse(new URL(opts.endpoint));
        else {
            const [command, ...args] = opts.command;
            transport = new Stdio({ command, args, env: { ...process.env }, stderr: 'inherit' });
        }
        onTransport(transport);
        await client.connect(transport, { timeout });

        const o = extra => ({ timeout, ...extra });
        const api = {
            callTool: (name, args, { onprogress, signal, meta } = {}) => {
                const params = { name };
                if (args !== undefined) params.arguments = args;
                if (meta) params._meta = meta;
                return client.callTool(params, o({ onprogress, signal }));
            },
            listTools: () => client.listTools(undefined, o({ cacheMode: 'bypass' })),
            listResources: () => client.listResources(undefined, o({ cacheMode: 'bypass' })),
            listResourceTemplates: () => client.listResourceTemplates(undefined, o({ cacheMode: 'bypass' })),
            listPrompts: () => client.listPrompts(undefined, o({ cacheMode: 'bypass' })),
            readResource: uri => client.readResource({ uri }, o({ cacheMode: 'bypass' })),
            getPrompt: (name, args) => client.getPrompt(args === undefined ? { name } : { name, arguments: args }, o()),
            complete: (ref, argument) => client.complete({ ref, argument }, o()),
            ping: () => client.ping(o()),
            setLoggingLevel: level => client.setLoggingLevel(level, o()),
            subscribe: uri => client.subscribeResource({ uri }, o()),
            unsubscribe: uri => client.unsubscribeResource({ uri }, o())
        };
        return {
            api,
            protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
            serverInfo: client.getServerVersion(),
            close: () => client.close()
        };
    }
});
