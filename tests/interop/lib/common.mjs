// Shared harness for the TypeScript interop clients (ts_v1_client.mjs, ts_v2_client.mjs).
//
// Each client script supplies an adapter that hides the SDK's API differences;
// everything else (argument parsing, the checks of each profile, timeouts, the
// one-line JSON report) lives here so both SDKs are held to the same checks.
// The checks mirror python_client.py one for one (same names, same expectations).

import { readFileSync } from 'node:fs';
import { format } from 'node:util';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// stdout carries only the one JSON report line: the SDKs' console chatter goes to stderr.
for (const level of ['log', 'info', 'debug', 'warn', 'error', 'trace']) {
    console[level] = (...args) => process.stderr.write(format(...args) + '\n');
}

export const MODERN_VERSION = '2026-07-28';
export const LOG_LEVEL_META_KEY = 'io.modelcontextprotocol/logLevel';
const ROOT_URI = 'file:///tmp/toolyard-root';
const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

// ---------------------------------------------------------------------------- SDK loading

export function cacheDir() {
    return process.env.TOOLYARD_CACHE || join(homedir(), '.cache', 'toolyard');
}

function pickTarget(target) {
    if (typeof target === 'string') return target;
    if (Array.isArray(target)) {
        for (const t of target) {
            const r = pickTarget(t);
            if (r) return r;
        }
        return null;
    }
    if (target && typeof target === 'object') {
        for (const cond of ['import', 'node', 'default']) {
            if (cond in target) {
                const r = pickTarget(target[cond]);
                if (r) return r;
            }
        }
    }
    return null;
}

/** Import `pkg` (subpath `sub`, e.g. './stdio') as ESM from $TOOLYARD_CACHE/npm/node_modules. */
export async function importFromCache(pkg, sub = '.') {
    const dir = join(cacheDir(), 'npm', 'node_modules', ...pkg.split('/'));
    let pj;
    try {
        pj = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    } catch {
        throw new SetupError(`${pkg} is not installed in ${dir}; run scripts/install-test-deps`);
    }
    let target = null;
    const exp = pj.exports;
    if (exp && typeof exp === 'object' && !Array.isArray(exp)) {
        if (exp[sub] !== undefined) target = pickTarget(exp[sub]);
        else {
            for (const [key, value] of Object.entries(exp)) {
                const star = key.indexOf('*');
                if (star < 0) continue;
                const pre = key.slice(0, star);
                const post = key.slice(star + 1);
                if (sub.startsWith(pre) && sub.endsWith(post) && sub.length >= pre.length + post.length) {
                    const t = pickTarget(value);
                    if (t) {
                        target = t.replace('*', sub.slice(pre.length, sub.length - post.length));
                        break;
                    }
                }
            }
        }
    } else if (sub === '.') {
        target = pj.module || pj.main || 'index.js';
    }
    if (!target) throw new SetupError(`${pkg} has no ESM export for ${sub}`);
    return { module: await import(pathToFileURL(join(dir, target)).href), version: pj.version };
}

export class SetupError extends Error {}

// ---------------------------------------------------------------------------- arguments

export const TRANSPORTS = ['stdio', 'http', 'sse'];

/**
 * The HTTP+SSE (2024-11-05) endpoint of a server whose Streamable HTTP endpoint is `url`:
 * Toolyard serves `GET /sse` (+ `POST /messages?sessionId=...`) next to `/mcp`, so a
 * trailing `/mcp` path segment becomes `/sse`. Any other path is taken as the SSE URL itself.
 */
export function sseUrlFor(url) {
    const u = new URL(url);
    if (u.pathname === '/mcp' || u.pathname.endsWith('/mcp')) u.pathname = u.pathname.slice(0, -'/mcp'.length) + '/sse';
    return u.href;
}

export function parseArgs(script, argv) {
    const usage =
        `usage: ${script} [--profile demo|conformance] [--protocol legacy|modern] [--deadline S] [--request-timeout S]\n` +
        `         [--transport stdio] -- SERVER COMMAND...\n` +
        `       ${script} [options] --transport http|sse --url http://HOST:PORT/mcp`;
    const split = argv.indexOf('--');
    const own = split < 0 ? argv : argv.slice(0, split);
    const command = split < 0 ? [] : argv.slice(split + 1);
    const opts = { profile: 'demo', protocol: 'legacy', transport: 'stdio', url: null, deadline: 30, requestTimeout: 10, command };
    for (let i = 0; i < own.length; i++) {
        let [flag, value] = own[i].split(/=(.*)/s, 2);
        if (value === undefined) value = own[++i];
        switch (flag) {
            case '--profile':
                if (!['demo', 'conformance'].includes(value)) return { error: `bad --profile ${value}\n${usage}` };
                opts.profile = value;
                break;
            case '--protocol':
                if (!['legacy', 'modern'].includes(value)) return { error: `bad --protocol ${value}\n${usage}` };
                opts.protocol = value;
                break;
            case '--transport':
                if (!TRANSPORTS.includes(value)) return { error: `bad --transport ${value}\n${usage}` };
                opts.transport = value;
                break;
            case '--url':
                try {
                    const u = new URL(value);
                    if (!['http:', 'https:'].includes(u.protocol)) throw new Error('not http(s)');
                } catch {
                    return { error: `bad --url ${value}\n${usage}` };
                }
                opts.url = value;
                break;
            case '--deadline':
            case '--request-timeout': {
                const n = Number(value);
                if (!(n > 0)) return { error: `bad ${flag} ${value}\n${usage}` };
                opts[flag === '--deadline' ? 'deadline' : 'requestTimeout'] = n;
                break;
            }
            default:
                return { error: `unknown option ${own[i]}\n${usage}` };
        }
    }
    if (opts.transport === 'stdio') {
        if (opts.command.length === 0) return { error: `no server command after --\n${usage}` };
        if (opts.url) return { error: `--url needs --transport http or sse\n${usage}` };
    } else {
        if (!opts.url) return { error: `--transport ${opts.transport} needs --url\n${usage}` };
        if (opts.command.length > 0) return { error: `--transport ${opts.transport} connects to --url; no server command is run\n${usage}` };
        // The endpoint this run talks to: /mcp for Streamable HTTP, /sse for HTTP+SSE.
        opts.endpoint = opts.transport === 'sse' ? sseUrlFor(opts.url) : opts.url;
    }
    return { opts };
}

// ---------------------------------------------------------------------------- report

export class Report {
    constructor(script, sdk, opts) {
        this.script = script;
        this.sdk = sdk;
        this.opts = opts;
        this.checks = [];
        this.protocolVersion = null;
        this.current = 'connect'; // the check in progress, named when the deadline cuts it off
        this.emitted = false;
    }

    add(name, ok, detail = '') {
        this.checks.push({ name, ok: Boolean(ok), detail });
        process.stderr.write(`[${this.script}] ${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? ': ' + detail : ''}\n`);
    }

    ok() {
        return this.checks.length > 0 && this.checks.every(c => c.ok);
    }

    /** Print the one JSON line (once); returns the exit status for it. */
    emit() {
        if (!this.emitted) {
            this.emitted = true;
            process.stdout.write(
                JSON.stringify({
                    ok: this.ok(),
                    checks: this.checks,
                    protocolVersion: this.protocolVersion,
                    sdk: this.sdk,
                    profile: this.opts?.profile,
                    protocol: this.opts?.protocol,
                    transport: this.opts?.transport
                }) + '\n'
            );
        }
        return this.ok() ? 0 : 1;
    }
}

class CheckFailed extends Error {}

function expect(cond, detail) {
    if (!cond) throw new CheckFailed(typeof detail === 'function' ? detail() : detail);
}

export function short(v, n = 300) {
    let s;
    try {
        s = typeof v === 'string' ? v : JSON.stringify(v);
    } catch {
        s = String(v);
    }
    if (s === undefined) s = String(v);
    return s.length <= n ? s : s.slice(0, n) + '...';
}

export function errText(e) {
    if (e instanceof Error) {
        const code = e.code !== undefined ? ` (code ${e.code})` : '';
        return `${e.name}${code}: ${e.message}`;
    }
    return String(e);
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

function withTimeout(promise, ms, what) {
    let timer;
    return Promise.race([
        promise,
        new Promise((_, reject) => {
            timer = setTimeout(() => reject(new CheckFailed(`${what}: timed out after ${ms / 1000}s`)), ms);
        })
    ]).finally(() => clearTimeout(timer));
}

function texts(result) {
    return (result?.content ?? []).filter(c => c.type === 'text').map(c => c.text ?? '');
}

function isSubset(expected, actual) {
    if (expected && typeof expected === 'object' && !Array.isArray(expected)) {
        return (
            actual !== null &&
            typeof actual === 'object' &&
            Object.entries(expected).every(([k, v]) => k in actual && isSubset(v, actual[k]))
        );
    }
    return JSON.stringify(expected) === JSON.stringify(actual);
}

// ---------------------------------------------------------------------------- client-side handlers

/** Answer an elicitation form: schema defaults where given, else a plausible value per type. */
export function fillForm(schema) {
    const content = {};
    for (const [key, prop] of Object.entries(schema?.properties ?? {})) {
        if ('default' in prop) content[key] = prop.default;
        else if (prop.type === 'array') {
            const items = prop.items ?? {};
            const choices = items.enum ?? [...(items.anyOf ?? []), ...(items.oneOf ?? [])].map(o => o.const);
            content[key] = choices.slice(0, 1);
        } else if (prop.enum) content[key] = prop.enum[0];
        else if (prop.oneOf || prop.anyOf) content[key] = (prop.oneOf ?? prop.anyOf)[0].const;
        else if (prop.type === 'integer') content[key] = 7;
        else if (prop.type === 'number') content[key] = 7.5;
        else if (prop.type === 'boolean') content[key] = true;
        else if (key === 'name') content[key] = 'Ada';
        else if (key === 'email' || prop.format === 'email') content[key] = 'ada@example.com';
        else content[key] = 'ada';
    }
    return content;
}

/** What the server asked of / sent to this client, plus the handlers that record it. */
export function makeHandlers() {
    const seen = { elicitations: [], samplings: [], rootsCalls: 0, logs: [] };
    const handlers = {
        elicit: async params => {
            seen.elicitations.push(params);
            return { action: 'accept', content: fillForm(params?.requestedSchema) };
        },
        sample: async params => {
            seen.samplings.push(params);
            return { role: 'assistant', content: { type: 'text', text: 'short' }, model: 'toolyard-interop-fake' };
        },
        roots: async () => {
            seen.rootsCalls += 1;
            return { roots: [{ uri: ROOT_URI, name: 'toolyard-root' }] };
        },
        log: params => {
            seen.logs.push(params);
        }
    };
    return { seen, handlers };
}

/**
 * Observe every message the transport delivers to the client (the SDK's own
 * handler still runs). Used for the negotiated version where an SDK hides it.
 */
export function tapTransport(transport, onIncoming) {
    let inner;
    Object.defineProperty(transport, 'onmessage', {
        configurable: true,
        enumerable: true,
        get() {
            return inner
                ? (message, extra) => {
                      try {
                          onIncoming(message);
                      } catch {
                          /* observation only */
                      }
                      return inner(message, extra);
                  }
                : undefined;
        },
        set(fn) {
            inner = fn;
        }
    });
}

// ---------------------------------------------------------------------------- the checks

const SEP1330_PROPERTIES = {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
        type: 'string',
        oneOf: [
            { const: 'value1', title: 'First Option' },
            { const: 'value2', title: 'Second Option' },
            { const: 'value3', title: 'Third Option' }
        ]
    },
    legacyEnum: { type: 'string', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
    untitledMulti: { type: 'array', minItems: 1, maxItems: 3, items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: {
        type: 'array',
        minItems: 1,
        maxItems: 3,
        items: {
            anyOf: [
                { const: 'value1', title: 'First Choice' },
                { const: 'value2', title: 'Second Choice' },
                { const: 'value3', title: 'Third Choice' }
            ]
        }
    }
};

const JSON_SCHEMA_2020_12 = {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
    properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
    additionalProperties: false
};

// 2026-07-28 multi-round-trip fixtures the SDK can drive by itself (called when listed, modern only).
const MRTR_TOOLS = [
    'test_input_required_result_elicitation',
    'test_input_required_result_sampling',
    'test_input_required_result_list_roots',
    'test_input_required_result_request_state',
    'test_input_required_result_multiple_inputs',
    'test_input_required_result_multi_round'
];

/**
 * `api` is the adapter's connected-client facade:
 *   callTool(name, args|undefined, {onprogress, signal, meta}) -> CallToolResult
 *   listTools() listResources() listResourceTemplates() listPrompts()
 *   readResource(uri) getPrompt(name, args|undefined) complete(ref, argument)
 *   ping() setLoggingLevel(level) subscribe(uri) unsubscribe(uri)
 */
export class Runner {
    constructor(report, api, seen, opts) {
        this.r = report;
        this.api = api;
        this.seen = seen;
        this.modern = opts.protocol === 'modern';
        this.timeoutMs = opts.requestTimeout * 1000;
        this.tools = {};
    }

    async check(name, fn, ...args) {
        this.r.current = name;
        try {
            const detail = await withTimeout(Promise.resolve().then(() => fn(...args)), this.timeoutMs, name);
            this.r.add(name, true, detail ?? '');
            return true;
        } catch (e) {
            this.r.add(name, false, e instanceof CheckFailed ? e.message : short(errText(e)));
            return false;
        }
    }

    async waitFor(cond, ms) {
        const end = Date.now() + ms;
        while (!cond() && Date.now() < end) await sleep(20);
    }

    logMeta(level) {
        // 2026-07-28: log delivery is a per-request opt-in carried in _meta.
        return this.modern ? { [LOG_LEVEL_META_KEY]: level } : undefined;
    }

    async listTools(expected) {
        const res = await this.api.listTools();
        this.tools = Object.fromEntries((res.tools ?? []).map(t => [t.name, t]));
        const names = Object.keys(this.tools).sort();
        const missing = expected.filter(n => !(n in this.tools));
        expect(missing.length === 0, () => `missing tools ${short(missing)}; listed ${short(names)}`);
        const bad = names.filter(n => typeof this.tools[n].inputSchema !== 'object' || this.tools[n].inputSchema === null);
        expect(bad.length === 0, () => `tools without an inputSchema object: ${short(bad)}`);
        return `${names.length} tools: ${names.join(', ')}`;
    }

    async ping() {
        await this.api.ping();
        return 'ping answered';
    }

    async setLevel(level) {
        await this.api.setLoggingLevel(level);
        return `logging/setLevel ${level} accepted`;
    }

    // ------------------------------------------------------------------ demo profile

    async demo() {
        const { api, seen } = this;
        await this.check('tools/list', () =>
            this.listTools(['echo', 'add', 'slow', 'ask_name', 'summarize', 'list_roots', 'fail'])
        );
        if (!this.modern) await this.check('ping', () => this.ping());

        const echo = async msg => {
            const res = await api.callTool('echo', { message: msg });
            const content = res.content ?? [];
            expect(!res.isError, () => `isError set: ${short(res)}`);
            expect(
                content.length === 1 && content[0].type === 'text' && content[0].text === msg,
                () => `expected one text item ${JSON.stringify(msg)}, got ${short(content)}`
            );
            return `echoed ${JSON.stringify(msg)}`;
        };
        await this.check('tool echo', echo, `hello from ${this.r.script}`);

        await this.check('tool add', async () => {
            const res = await api.callTool('add', { a: 2.5, b: 4 });
            expect(!res.isError, () => `isError set: ${short(res)}`);
            const sc = res.structuredContent;
            expect(sc && typeof sc === 'object' && sc.sum === 6.5, () => `structuredContent ${short(sc)} != {"sum":6.5}`);
            expect(texts(res).length > 0, () => `no text item in content ${short(res.content)}`);
            return `structuredContent ${short(sc)}, text ${JSON.stringify(texts(res)[0])}`;
        });

        await this.check('tool fail', async () => {
            const res = await api.callTool('fail', {});
            expect(res.isError === true, () => `isError is not true: ${short(res)}`);
            return `isError true, content ${short(res.content, 120)}`;
        });

        await this.check('tool ask_name (elicitation)', async () => {
            const n0 = seen.elicitations.length;
            const res = await api.callTool('ask_name', {});
            expect(seen.elicitations.length > n0, 'elicitation callback was never invoked');
            const schema = seen.elicitations.at(-1)?.requestedSchema ?? {};
            expect('name' in (schema.properties ?? {}), () => `requestedSchema lacks property 'name': ${short(schema)}`);
            expect(
                JSON.stringify(texts(res)) === JSON.stringify(['Hello, Ada!']),
                () => `expected text 'Hello, Ada!', got ${short(res.content)}`
            );
            return "elicited {name: Ada} -> 'Hello, Ada!'";
        });

        await this.check('tool summarize (sampling)', async () => {
            const n0 = seen.samplings.length;
            const res = await api.callTool('summarize', { text: 'A long text about the Toolyard MCP runtime. '.repeat(5) });
            expect(seen.samplings.length > n0, 'sampling callback was never invoked');
            expect(
                JSON.stringify(texts(res)) === JSON.stringify(['Summary: short']),
                () => `expected text 'Summary: short', got ${short(res.content)}`
            );
            return "sampled 'short' -> 'Summary: short'";
        });

        await this.check('tool list_roots (roots)', async () => {
            const n0 = seen.rootsCalls;
            const res = await api.callTool('list_roots', {});
            expect(seen.rootsCalls > n0, 'roots/list callback was never invoked');
            const lines = texts(res).join('\n').split(/\r?\n/).filter(l => l !== '');
            expect(
                lines.length === 1 && lines[0] === ROOT_URI,
                () => `expected text ${JSON.stringify(ROOT_URI)}, got ${short(res.content)}`
            );
            return `roots -> ${ROOT_URI}`;
        });

        if (!this.modern) await this.check('logging/setLevel info', () => this.setLevel('info'));

        await this.check('tool slow (progress + logging)', async () => {
            const progress = [];
            const logs0 = seen.logs.length;
            const res = await api.callTool(
                'slow',
                { steps: 3, delay_ms: 50 },
                { onprogress: p => progress.push(p.progress), meta: this.logMeta('info') }
            );
            await this.waitFor(() => seen.logs.length > logs0, 1000); // logs may trail the result slightly
            expect(!res.isError, () => `isError set: ${short(res)}`);
            expect(progress.length >= 3, () => `expected >= 3 progress notifications, got ${progress.length}: ${short(progress)}`);
            expect(
                progress.every((v, i) => i === 0 || v > progress[i - 1]),
                () => `progress not increasing: ${short(progress)}`
            );
            const newLogs = seen.logs.slice(logs0);
            expect(newLogs.length > 0, 'no notifications/message log arrived');
            return `${progress.length} progress ${short(progress)}, ${newLogs.length} log(s), first ${short(newLogs[0], 120)}`;
        });

        await this.check('tool slow (cancel)', async () => {
            const ac = new AbortController();
            const t0 = Date.now();
            const timer = setTimeout(() => ac.abort(new Error('toolyard-interop: cancelled after 300 ms')), 300);
            let res;
            try {
                res = await api.callTool('slow', { steps: 100, delay_ms: 100 }, { signal: ac.signal, meta: this.logMeta('info') });
            } catch (e) {
                clearTimeout(timer);
                if (!ac.signal.aborted) throw e;
                const took = (Date.now() - t0) / 1000;
                const logs0 = seen.logs.length;
                await sleep(600);
                return `aborted after ${took.toFixed(2)}s (${short(errText(e), 80)}); logs in the 0.6 s after: ${seen.logs.length - logs0}`;
            }
            clearTimeout(timer);
            throw new CheckFailed(`slow(100 x 100 ms) finished in ${((Date.now() - t0) / 1000).toFixed(2)}s, before the cancel: ${short(res)}`);
        });
        await this.check('tool echo after cancel', echo, 'still alive');

        // resources
        await this.check('resources/list', async () => {
            const res = await api.listResources();
            const uris = (res.resources ?? []).map(r => r.uri);
            const missing = ['demo://readme', 'demo://logo'].filter(u => !uris.includes(u));
            expect(missing.length === 0, () => `missing ${short(missing)}; listed ${short(uris)}`);
            return `listed ${short(uris)}`;
        });

        await this.check('resources/read demo://readme', async () => {
            const res = await api.readResource('demo://readme');
            const item = (res.contents ?? [])[0];
            expect(item, 'no contents');
            expect(item.mimeType === 'text/markdown', () => `mimeType ${JSON.stringify(item.mimeType)} != "text/markdown"`);
            expect(typeof item.text === 'string' && item.text.length > 0, () => `no text: ${short(item)}`);
            return `${item.text.length} chars of markdown`;
        });

        await this.check('resources/read demo://logo', async () => {
            const res = await api.readResource('demo://logo');
            const item = (res.contents ?? [])[0];
            expect(item, 'no contents');
            expect(item.mimeType === 'image/png', () => `mimeType ${JSON.stringify(item.mimeType)} != "image/png"`);
            expect(typeof item.blob === 'string', () => `no blob: ${short(item)}`);
            expect(/^[A-Za-z0-9+/]*={0,2}$/.test(item.blob), 'blob is not base64');
            const data = Buffer.from(item.blob, 'base64');
            expect(data.subarray(0, 8).equals(PNG_MAGIC), () => `blob is not a PNG (starts ${data.subarray(0, 8).toString('hex')})`);
            return `${data.length} bytes of PNG`;
        });

        await this.check('resources/templates/list', async () => {
            const res = await api.listResourceTemplates();
            const tpls = (res.resourceTemplates ?? []).map(t => t.uriTemplate);
            expect(tpls.includes('demo://users/{id}'), () => `demo://users/{id} not in ${short(tpls)}`);
            return `listed ${short(tpls)}`;
        });

        await this.check('resources/read demo://users/42', async () => {
            const res = await api.readResource('demo://users/42');
            const item = (res.contents ?? [])[0];
            expect(item && typeof item.text === 'string', () => `no text contents: ${short(res)}`);
            try {
                JSON.parse(item.text);
            } catch {
                throw new CheckFailed(`text is not JSON: ${short(item.text)}`);
            }
            expect(item.text.includes('42'), () => `id 42 not in ${short(item.text)}`);
            return `uri ${item.uri}, text ${short(item.text, 120)}`;
        });

        // prompts
        await this.check('prompts/list', async () => {
            const res = await api.listPrompts();
            const names = (res.prompts ?? []).map(p => p.name);
            const missing = ['greet', 'code_review'].filter(n => !names.includes(n));
            expect(missing.length === 0, () => `missing ${short(missing)}; listed ${short(names)}`);
            return `listed ${short(names)}`;
        });

        const msgText = m => (m?.content?.type === 'text' ? (m.content.text ?? '') : '');

        await this.check('prompts/get greet', async () => {
            const res = await api.getPrompt('greet', { name: 'Ada' });
            const msgs = res.messages ?? [];
            expect(msgs.length === 1, () => `expected one message, got ${msgs.length}: ${short(msgs)}`);
            expect(msgs[0].role === 'user', () => `role ${JSON.stringify(msgs[0].role)} != "user"`);
            expect(msgText(msgs[0]).includes('Ada'), () => `'Ada' not in message ${short(msgs[0])}`);
            return short(msgText(msgs[0]), 120);
        });

        const codeReview = async args => {
            const res = await api.getPrompt('code_review', args);
            const msgs = res.messages ?? [];
            expect(msgs.length > 0, 'no messages');
            expect(msgs.some(m => msgText(m).includes(args.code)), () => `code not in messages ${short(msgs)}`);
            return `${msgs.length} message(s)`;
        };
        await this.check('prompts/get code_review', codeReview, { code: 'fn main() {}', language: 'rust' });
        await this.check('prompts/get code_review (no language)', codeReview, { code: 'print(1)' });

        await this.check("completion/complete code_review.language 'py'", async () => {
            const res = await api.complete({ type: 'ref/prompt', name: 'code_review' }, { name: 'language', value: 'py' });
            const values = res.completion?.values ?? [];
            expect(values.includes('python'), () => `'python' not in ${short(values)}`);
            expect(values.every(v => v.startsWith('py')), () => `values not all starting with 'py': ${short(values)}`);
            return `values ${short(values)}`;
        });
    }

    // ------------------------------------------------------------------ conformance profile

    async conformance() {
        const { api, seen } = this;
        await this.check('tools/list', () =>
            this.listTools([
                'test_simple_text',
                'test_image_content',
                'test_audio_content',
                'test_embedded_resource',
                'test_multiple_content_types',
                'test_tool_with_logging',
                'test_tool_with_progress',
                'test_error_handling',
                'test_sampling',
                'test_elicitation',
                'test_elicitation_sep1034_defaults',
                'test_elicitation_sep1330_enums',
                'json_schema_2020_12_tool'
            ])
        );

        await this.check('tools/list descriptions', async () => {
            const names = Object.keys(this.tools);
            expect(names.length > 0, 'no tools listed');
            const bad = names.filter(n => !this.tools[n].description);
            expect(bad.length === 0, () => `tools without a description: ${short(bad)}`);
            return 'every tool has name, description, inputSchema';
        });

        if (!this.modern) {
            await this.check('ping', () => this.ping());
            await this.check('logging/setLevel info', () => this.setLevel('info'));
        }

        const types = res => (res.content ?? []).map(c => c.type);

        await this.check('tool test_simple_text (no arguments)', async () => {
            const res = await api.callTool('test_simple_text', undefined); // no `arguments` field at all
            expect(texts(res)[0], () => `no non-empty text: ${short(res)}`);
            return short(texts(res)[0], 120);
        });

        const media = async (tool, kind, mime) => {
            const res = await api.callTool(tool, {});
            const items = (res.content ?? []).filter(c => c.type === kind);
            expect(items.length > 0, () => `no ${kind} item in ${short(types(res))}`);
            expect(items[0].data && items[0].mimeType, () => `${kind} item lacks data/mimeType`);
            expect(items[0].mimeType === mime, () => `mimeType ${JSON.stringify(items[0].mimeType)} != ${JSON.stringify(mime)}`);
            expect(/^[A-Za-z0-9+/]*={0,2}$/.test(items[0].data), 'data is not base64');
            return `${kind} ${items[0].mimeType}, ${items[0].data.length} base64 chars`;
        };
        await this.check('tool test_image_content', media, 'test_image_content', 'image', 'image/png');
        await this.check('tool test_audio_content', media, 'test_audio_content', 'audio', 'audio/wav');

        await this.check('tool test_embedded_resource', async () => {
            const res = await api.callTool('test_embedded_resource', {});
            const items = (res.content ?? []).filter(c => c.type === 'resource');
            expect(items.length > 0, () => `no resource item in ${short(types(res))}`);
            const r = items[0].resource ?? {};
            expect(r.uri && r.mimeType && ('text' in r || 'blob' in r), () => `bad resource ${short(r)}`);
            return `resource ${r.uri} (${r.mimeType})`;
        });

        await this.check('tool test_multiple_content_types', async () => {
            const res = await api.callTool('test_multiple_content_types', {});
            const kinds = types(res);
            expect(
                kinds.length >= 2 && ['text', 'image', 'resource'].every(k => kinds.includes(k)),
                () => `content types ${short(kinds)}`
            );
            return `content types ${short(kinds)}`;
        });

        if (!this.modern) await this.check('logging/setLevel debug', () => this.setLevel('debug'));

        await this.check('tool test_tool_with_logging', async () => {
            const logs0 = seen.logs.length;
            const res = await api.callTool('test_tool_with_logging', {}, { meta: this.logMeta('debug') });
            await this.waitFor(() => seen.logs.length - logs0 >= 3, 500);
            const got = seen.logs.slice(logs0);
            expect(!res.isError, () => `isError set: ${short(res)}`);
            expect(got.length >= 3, () => `expected >= 3 log notifications, got ${got.length}: ${short(got)}`);
            return `${got.length} logs: ${short(got.map(g => g.data))}`;
        });

        await this.check('tool test_tool_with_progress', async () => {
            const progress = [];
            const res = await api.callTool('test_tool_with_progress', {}, { onprogress: p => progress.push(p.progress) });
            const atResult = progress.length;
            expect(!res.isError, () => `isError set: ${short(res)}`);
            expect(atResult >= 3, () => `expected >= 3 progress notifications before the result, got ${short(progress)}`);
            expect(progress.every((v, i) => i === 0 || v >= progress[i - 1]), () => `progress decreases: ${short(progress)}`);
            return `progress ${short(progress)}`;
        });

        await this.check('tool test_error_handling', async () => {
            const res = await api.callTool('test_error_handling', {});
            expect(res.isError === true, () => `isError is not true: ${short(res)}`);
            expect(texts(res)[0], 'content[0] has no non-empty text');
            return short(texts(res)[0], 120);
        });

        await this.check('tool test_sampling', async () => {
            const n0 = seen.samplings.length;
            const res = await api.callTool('test_sampling', { prompt: 'Say something short' });
            expect(seen.samplings.length > n0, 'sampling callback was never invoked');
            const req = seen.samplings.at(-1);
            const first = req?.messages?.[0]?.content ?? {};
            expect(first.text === 'Say something short', () => `sampling message is not the prompt: ${short(req)}`);
            expect(texts(res)[0], () => `no non-empty text: ${short(res)}`);
            return short(texts(res)[0], 120);
        });

        const elicit = async (tool, args, wantSchema) => {
            const n0 = seen.elicitations.length;
            const res = await api.callTool(tool, args);
            expect(seen.elicitations.length > n0, 'elicitation callback was never invoked');
            const schema = seen.elicitations.at(-1)?.requestedSchema ?? {};
            expect(isSubset(wantSchema, schema), () => `requestedSchema ${short(schema, 600)} lacks ${short(wantSchema, 600)}`);
            expect(texts(res)[0], () => `no non-empty text: ${short(res)}`);
            return short(texts(res)[0], 160);
        };
        await this.check('tool test_elicitation', elicit, 'test_elicitation', { message: 'Please provide your details' }, {
            properties: { username: { type: 'string' }, email: { type: 'string' } }
        });
        await this.check('tool test_elicitation_sep1034_defaults', elicit, 'test_elicitation_sep1034_defaults', {}, {
            properties: {
                name: { type: 'string', default: 'John Doe' },
                age: { type: 'integer', default: 30 },
                score: { type: 'number', default: 95.5 },
                status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
                verified: { type: 'boolean', default: true }
            }
        });
        await this.check('tool test_elicitation_sep1330_enums', elicit, 'test_elicitation_sep1330_enums', {}, {
            properties: SEP1330_PROPERTIES
        });

        await this.check('tool json_schema_2020_12_tool', async () => {
            const tool = this.tools.json_schema_2020_12_tool;
            expect(tool, 'json_schema_2020_12_tool not listed');
            expect(isSubset(JSON_SCHEMA_2020_12, tool.inputSchema), () => `inputSchema not preserved: ${short(tool.inputSchema, 600)}`);
            const res = await api.callTool('json_schema_2020_12_tool', { name: 'Ada', address: { street: '1 Main', city: 'X' }, contactMethod: 'email', email: 'ada@example.com' });
            expect(!res.isError, () => `call returned isError: ${short(res)}`);
            return 'inputSchema keeps $schema/$defs/additionalProperties; call ok';
        });

        const optionalTool = async name => {
            if (!(name in this.tools)) return `skipped: ${name} not listed`;
            const res = await api.callTool(name, {});
            expect(!res.isError && (res.content ?? []).length > 0, () => `no non-error content: ${short(res)}`);
            return `content types ${short(types(res))}`;
        };
        await this.check('tool test_reconnection (if listed)', optionalTool, 'test_reconnection');
        if (this.modern) {
            for (const name of MRTR_TOOLS) {
                if (name in this.tools) await this.check(`tool ${name} (input_required)`, optionalTool, name);
            }
        }

        // resources
        await this.check('resources/list', async () => {
            const res = await api.listResources();
            const items = res.resources ?? [];
            const uris = items.map(r => r.uri);
            const want = ['test://static-text', 'test://static-binary', ...(this.modern ? [] : ['test://watched-resource'])];
            const missing = want.filter(u => !uris.includes(u));
            expect(missing.length === 0, () => `missing ${short(missing)}; listed ${short(uris)}`);
            expect(items.every(r => r.name), 'a resource has no name');
            return `listed ${short(uris)}`;
        });

        await this.check('resources/read test://static-text', async () => {
            const item = ((await api.readResource('test://static-text')).contents ?? [])[0] ?? {};
            expect(item.uri && item.mimeType && item.text, () => `bad contents ${short(item)}`);
            return short(item.text, 120);
        });

        await this.check('resources/read test://static-binary', async () => {
            const item = ((await api.readResource('test://static-binary')).contents ?? [])[0] ?? {};
            expect(item.uri && item.mimeType && item.blob, () => `bad contents ${short(item)}`);
            return `${item.mimeType}, ${item.blob.length} base64 chars`;
        });

        await this.check('resources/templates/list', async () => {
            const tpls = ((await api.listResourceTemplates()).resourceTemplates ?? []).map(t => t.uriTemplate);
            expect(tpls.includes('test://template/{id}/data'), () => `test://template/{id}/data not in ${short(tpls)}`);
            return `listed ${short(tpls)}`;
        });

        await this.check('resources/read test://template/123/data', async () => {
            const item = ((await api.readResource('test://template/123/data')).contents ?? [])[0] ?? {};
            expect(item.uri && (item.text ?? '').includes('123'), () => `bad contents ${short(item)}`);
            return short(item.text, 120);
        });

        if (!this.modern) {
            await this.check('resources/subscribe + unsubscribe test://watched-resource', async () => {
                await api.subscribe('test://watched-resource');
                await api.unsubscribe('test://watched-resource');
                return 'subscribe + unsubscribe answered';
            });
        }

        // prompts
        await this.check('prompts/list', async () => {
            const prompts = (await api.listPrompts()).prompts ?? [];
            const names = prompts.map(p => p.name);
            const want = ['test_simple_prompt', 'test_prompt_with_arguments', 'test_prompt_with_embedded_resource', 'test_prompt_with_image'];
            const missing = want.filter(n => !names.includes(n));
            expect(missing.length === 0, () => `missing ${short(missing)}; listed ${short(names)}`);
            expect(prompts.every(p => p.description), 'a prompt has no description');
            return `listed ${short(names)}`;
        });

        const getPrompt = async (name, args, judge) => {
            const msgs = (await api.getPrompt(name, args)).messages ?? [];
            expect(msgs.length > 0, 'no messages');
            expect(msgs.every(m => m.role && m.content), () => `message without role/content: ${short(msgs)}`);
            return judge(msgs);
        };
        await this.check('prompts/get test_simple_prompt', getPrompt, 'test_simple_prompt', undefined, m => `${m.length} message(s)`);
        await this.check(
            'prompts/get test_prompt_with_arguments',
            getPrompt,
            'test_prompt_with_arguments',
            { arg1: 'testValue1', arg2: 'testValue2' },
            msgs => {
                const blob = JSON.stringify(msgs);
                expect(blob.includes('testValue1') && blob.includes('testValue2'), () => `argument values missing: ${short(msgs)}`);
                return 'both argument values present';
            }
        );
        await this.check(
            'prompts/get test_prompt_with_embedded_resource',
            getPrompt,
            'test_prompt_with_embedded_resource',
            { resourceUri: 'test://example-resource' },
            msgs => {
                expect(msgs.some(m => m.content.type === 'resource'), () => `no resource content: ${short(msgs)}`);
                return 'has a resource content';
            }
        );
        await this.check('prompts/get test_prompt_with_image', getPrompt, 'test_prompt_with_image', undefined, msgs => {
            const imgs = msgs.map(m => m.content).filter(c => c.type === 'image');
            expect(imgs.length > 0 && imgs[0].data && imgs[0].mimeType, () => `no image content: ${short(msgs)}`);
            return `image ${imgs[0].mimeType}`;
        });

        await this.check('completion/complete test_prompt_with_arguments.arg1', async () => {
            const res = await api.complete({ type: 'ref/prompt', name: 'test_prompt_with_arguments' }, { name: 'arg1', value: 'test' });
            const values = res.completion?.values;
            expect(Array.isArray(values), () => `completion.values is not an array: ${short(res)}`);
            return `values ${short(values)}`;
        });
    }
}

// ---------------------------------------------------------------------------- main

/**
 * Shared entry point. `adapter`:
 *   name                       script file name (for messages)
 *   load() -> {sdk}            import the SDK from the cache; returns its display name
 *   supportsModern             false: --protocol modern reports one failed check, exit 3
 *   connect(opts, handlers, onTransport) -> {api, protocolVersion, serverInfo, close}
 *                              opts.transport is stdio (spawn opts.command), http (Streamable
 *                              HTTP at opts.endpoint) or sse (HTTP+SSE at opts.endpoint);
 *                              onTransport(transport) hands over the transport (stdio: for its pid)
 */
export async function main(adapter) {
    const parsed = parseArgs(adapter.name, process.argv.slice(2));
    if (parsed.error) {
        process.stderr.write(parsed.error + '\n');
        process.exit(2);
    }
    const opts = parsed.opts;
    const report = new Report(adapter.name, null, opts);

    let sdk;
    try {
        sdk = await adapter.load();
    } catch (e) {
        report.add('setup', false, e instanceof SetupError ? e.message : errText(e));
        process.exit(Math.max(report.emit(), 2));
    }
    report.sdk = sdk.sdk;

    if (opts.protocol === 'modern' && !adapter.supportsModern) {
        report.add(
            'protocol modern',
            false,
            `unsupported by this SDK: ${sdk.sdk} speaks only the initialize-handshake generation (up to 2025-11-25), not ${MODERN_VERSION}`
        );
        report.emit();
        process.exit(3);
    }

    let connection = null;
    const serverPids = new Set(); // every server process the session's transport started
    const killServer = () => {
        for (const pid of serverPids) {
            try {
                process.kill(pid, 'SIGKILL');
            } catch {
                /* already gone */
            }
        }
    };
    const hard = setTimeout(() => {
        report.add(
            'deadline',
            false,
            `hard deadline ${opts.deadline}s reached during ${JSON.stringify(report.current)} (server hung?)${opts.transport === 'stdio' ? '; killed the server' : ''}`
        );
        killServer();
        const code = report.emit();
        process.exit(code || 1);
    }, opts.deadline * 1000);
    hard.unref();

    const { seen, handlers } = makeHandlers();
    try {
        try {
            let httpTransport = null;
            const connecting = adapter.connect(opts, handlers, transport => {
                if (opts.transport !== 'stdio') {
                    httpTransport = transport;
                    return;
                }
                // Remember the pid at spawn: the SDK forgets it once it starts closing.
                const start = transport.start.bind(transport);
                transport.start = async (...a) => {
                    try {
                        return await start(...a);
                    } finally {
                        if (transport.pid) serverPids.add(transport.pid);
                    }
                };
            });
            if (opts.transport === 'stdio') connection = await connecting;
            else {
                // The SSE transport waits for the `endpoint` event without a timeout of its
                // own: bound the whole handshake by --request-timeout on HTTP.
                try {
                    connection = await withTimeout(connecting, opts.requestTimeout * 1000, `connect over ${opts.transport}`);
                } catch (e) {
                    httpTransport?.close?.().catch?.(() => {});
                    throw e;
                }
            }
        } catch (e) {
            report.add('connect', false, e instanceof CheckFailed ? e.message : short(errText(e), 600));
            return finish();
        }
        report.protocolVersion = connection.protocolVersion ?? null;
        const who = connection.serverInfo ? `${connection.serverInfo.name} ${connection.serverInfo.version ?? ''}`.trim() : 'anonymous server';
        const how = opts.protocol === 'modern' ? 'server/discover' : 'initialize';
        if (opts.protocol === 'modern' && connection.protocolVersion !== MODERN_VERSION) {
            report.add('connect', false, `expected ${MODERN_VERSION}, negotiated ${connection.protocolVersion}`);
            return finish();
        }
        const over = opts.transport === 'stdio' ? 'stdio' : `${opts.transport} ${opts.endpoint}`;
        report.add('connect', true, `${how} over ${over}: ${connection.protocolVersion} with ${who}`);
        const runner = new Runner(report, connection.api, seen, opts);
        if (opts.profile === 'demo') await runner.demo();
        else await runner.conformance();
    } catch (e) {
        report.add('harness', false, short(errText(e), 600));
    }
    return finish();

    async function finish() {
        if (connection) {
            const closing = connection.close().catch(() => {});
            await Promise.race([closing, sleep(3000)]);
        }
        killServer();
        clearTimeout(hard);
        const code = report.emit();
        // Exit explicitly: a stuck child pipe or timer must not keep the process alive.
        process.exit(code);
    }
}
