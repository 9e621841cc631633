#!/usr/bin/env node
// Drive an MCP server with the official TypeScript SDK v1 (`@modelcontextprotocol/sdk`:
// Client + StdioClientTransport / StreamableHTTPClientTransport / SSEClientTransport).
//
//   node ts_v1_client.mjs [--profile demo|conformance] [--protocol legacy|modern]
//                         [--deadline S] [--request-timeout S] -- SERVER COMMAND...
//   node ts_v1_client.mjs [same options] --transport http|sse --url http://HOST:PORT/mcp
//
// --transport stdio (default) spawns SERVER COMMAND; http connects to --url with
// Streamable HTTP; sse connects with the deprecated 2024-11-05 HTTP+SSE transport to
// --url with its path /mcp replaced by /sse.
//
// Prints ONE JSON line on stdout ({"ok", "checks", "protocolVersion", ...}); exit
// 0 all checks passed, 1 a check failed, 2 usage/setup error, 3 --protocol modern
// (SDK v1 speaks only the initialize-handshake generation, up to 2025-11-25).
// The SDK is loaded from $TOOLYARD_CACHE/npm (scripts/install-test-deps).
// Checks: lib/common.mjs (shared with ts_v2_client.mjs), see README.md.

import { importFromCache, main, tapTransport } from './lib/common.mjs';

const PKG = '@modelcontextprotocol/sdk';
let sdk;

await main({
    name: 'ts_v1_client.mjs',
    supportsModern: false,

    async load() {
        const client = await importFromCache(PKG, './client/index.js');
        const stdio = await importFromCache(PKG, './client/stdio.js');
        const http = await importFromCache(PKG, './client/streamableHttp.js');
        const sse = await importFromCache(PKG, './client/sse.js');
        const types = await importFromCache(PKG, './types.js');
        sdk = {
            Client: client.module.Client,
            Stdio: stdio.module.StdioClientTransport,
            Http: http.module.StreamableHTTPClientTransport,
            Sse: sse.module.SSEClientTransport,
            types: types.module
        };
        return { sdk: `typescript ${PKG} ${client.version}` };
    },

    async connect(opts, handlers, onTransport) {
        const { Client, Stdio, Http, Sse, types } = sdk;
        const timeout = opts.requestTimeout * 1000;
        const client = new Client(
            { name: 'toolyard-interop-ts-v1', version: '0.0.0' },
            { capabilities: { elicitation: { form: {} }, sampling: {}, roots: { listChanged: true } } }
        );
        client.setRequestHandler(types.ElicitRequestSchema, req => handlers.elicit(req.params));
        client.setRequestHandler(types.CreateMessageRequestSchema, req => handlers.sample(req.params));
        client.setRequestHandler(types.ListRootsRequestSchema, () => handlers.roots());
        client.setNotificationHandler(types.LoggingMessageNotificationSchema, n => handlers.log(n.params));
        client.onerror = e => process.stderr.write(`[ts_v1_client.mjs] sdk error: ${e?.message ?? e}\n`);

        let transport;
        if (opts.transport === 'http') transport = new Http(new URL(opts.endpoint));
        else if (opts.transport === 'sse') transport = new Sse(new URL(opts.endpoint));
        else {
            const [command, ...args] = opts.command;
            transport = new Stdio({ command, args, env: { ...process.env }, stderr: 'inherit' });
        }
        onTransport(transport);
        // SDK v1 keeps the negotiated version to itself: read it off the initialize response.
        let negotiated = null;
        tapTransport(transport, m => {
            if (negotiated === null && m && 'result' in m && m.result && typeof m.result.protocolVersion === 'string') {
                negotiated = m.result.protocolVersion;
            }
        });
        await client.connect(transport, { timeout });

        const o = extra => ({ timeout, ...extra });
        const api = {
            callTool: (name, args, { onprogress, signal, meta } = {}) => {
                const params = { name };
                if (args !== undefined) params.arguments = args;
                if (meta) params._meta = meta;
                return client.callTool(params, undefined, o({ onprogress, signal }));
            },
            listTools: () => client.listTools(undefined, o()),
            listResources: () => client.listResources(undefined, o()),
            listResourceTemplates: () => client.listResourceTemplates(undefined, o()),
            listPrompts: () => client.listPrompts(undefined, o()),
            readResource: uri => client.readResource({ uri }, o()),
            getPrompt: (name, args) => client.getPrompt(args === undefined ? { name } : { name, arguments: args }, o()),
            complete: (ref, argument) => client.complete({ ref, argument }, o()),
            ping: () => client.ping(o()),
            setLoggingLevel: level => client.setLoggingLevel(level, o()),
            subscribe: uri => client.subscribeResource({ uri }, o()),
            unsubscribe: uri => client.unsubscribeResource({ uri }, o())
        };
        return {
            api,
            protocolVersion: negotiated,
            serverInfo: client.getServerVersion(),
            close: () => client.close()
        };
    }
});
