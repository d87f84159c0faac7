// A 2026-07-28-only MCP server built on the official TypeScript SDK v2
// (`@modelcontextprotocol/server` 2.4, pinned in tests/peers/): it refuses the initialize
// handshake (`legacy: 'reject'`), so everything mcpmux does with it is the new protocol.
//
//   node modern_server.mjs stdio          serveStdio over this process's stdin/stdout
//   node modern_server.mjs http           createMcpHandler on 127.0.0.1, port 0; prints
//                                         `listening <url>` on stdout
//
// `MCP_NODE_MODULES` names the node_modules directory the SDK and zod are in (the tests
// install them under target/).
//
// Tools: echo, add, regional (an `x-mcp-header` parameter), progress (reports each step), slow (waits unless cancelled) and aborted (how
// many were), pid (the serving process), survey (two rounds of form elicitation),
// sample (sampling), roots (roots/list), chat (log messages at the request's level), grow
// (registers one more tool: tools/list_changed), touch (resources/updated for a URI). A prompt
// with argument completion, a resource and a resource template.

import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.MCP_NODE_MODULES;
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { McpServer, completable, createMcpHandler, inputRequired, acceptedContent, inputResponse, fromJsonSchema } =
    await load('@modelcontextprotocol/server/dist/index.mjs');
const { serveStdio } = await load('@modelcontextprotocol/server/dist/stdio.mjs');
const z = await load('zod/index.js');

const mode = process.argv[2] ?? 'stdio';
const extra = [];
let aborted = 0;
let notifier = null;

function build() {
    const server = new McpServer(
        { name: 'modern-only', version: '2.4.0' },
        {
            capabilities: {
                tools: { listChanged: true },
                prompts: { listChanged: true },
                resources: { listChanged: true, subscribe: true },
                completions: {},
                logging: {},
            },
        },
    );
    server.registerTool('echo', { description: 'Echoes its text.', inputSchema: z.object({ text: z.string() }) },
        async ({ text }) => ({ content: [{ type: 'text', text }] }));
    server.registerTool('add', { description: 'Adds two numbers.', inputSchema: z.object({ a: z.number(), b: z.number() }) },
        async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }] }));
    server.registerTool('progress', { description: 'Reports progress.', inputSchema: z.object({ steps: z.number() }) },
        async ({ steps }, ctx) => {
            const token = ctx.mcpReq._meta?.progressToken;
            for (let i = 1; i <= steps; i++) {
                if (token !== undefined) {
                    await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: steps } });
                }
            }
            return { content: [{ type: 'text', text: `did ${steps} steps` }] };
        });
    server.registerTool('survey', { description: 'Asks two questions, one round each.', inputSchema: z.object({}) },
        async (_args, ctx) => {
            const responses = ctx.mcpReq.inputResponses;
            const state = ctx.mcpReq.requestState();
            if (state === undefined) {
                return inputRequired({
                    inputRequests: { name: inputRequired.elicit({ message: 'Your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } }) },
                    requestState: 'asked-name',
                });
            }
            if (state === 'asked-name') {
                const name = acceptedContent(responses, 'name')?.name;
                if (name === undefined) {
                    return { content: [{ type: 'text', text: 'no name' }], isError: true };
                }
                return inputRequired({
                    inputRequests: { color: inputRequired.elicit({ message: `Favourite colour, ${name}?`, requestedSchema: { type: 'object', properties: { color: { type: 'string' } }, required: ['color'] } }) },
                    requestState: `asked-color:${name}`,
                });
            }
            const name = String(state).slice('asked-color:'.length);
            const color = acceptedContent(responses, 'color')?.color;
            return { content: [{ type: 'text', text: `${name} likes ${color}` }] };
        });
    server.registerTool('sample', { description: 'Asks the host model.', inputSchema: z.object({ prompt: z.string() }) },
        async ({ prompt }, ctx) => {
            const answer = inputResponse(ctx.mcpReq.inputResponses, 'model');
            if (answer.kind !== 'sampling') {
                return inputRequired({
                    inputRequests: { model: inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 50 }) },
                });
            }
            const content = answer.result.content;
            const text = Array.isArray(content) ? content.map((c) => c.text).join('') : content.text;
            return { content: [{ type: 'text', text: `model said: ${text}` }] };
        });
    server.registerTool('roots', { description: 'Lists the host roots.', inputSchema: z.object({}) },
        async (_args, ctx) => {
            const answer = inputResponse(ctx.mcpReq.inputResponses, 'roots');
            if (answer.kind !== 'roots') {
                return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
            }
            return { content: [{ type: 'text', text: answer.roots.map((r) => r.uri).join(',') }] };
        });
    server.registerTool('chat', { description: 'Logs a message.', inputSchema: z.object({ text: z.string() }) },
        async ({ text }, ctx) => {
            await ctx.mcpReq.log('info', text, 'chat');
            return { content: [{ type: 'text', text: 'logged' }] };
        });
    server.registerTool('grow', { description: 'Adds a tool.', inputSchema: z.object({ name: z.string() }) },
        async ({ name }) => {
            extra.push(name);
            grown(server, name);
            notifier?.toolsChanged();
            return { content: [{ type: 'text', text: `added ${name}` }] };
        });
    server.registerTool('slow', { description: 'Waits, unless cancelled.', inputSchema: z.object({ seconds: z.number() }) },
        async ({ seconds }, ctx) => {
            const signal = ctx.mcpReq.signal;
            const done = await new Promise((resolve) => {
                const timer = setTimeout(() => resolve(true), seconds * 1000);
                signal.addEventListener('abort', () => { clearTimeout(timer); aborted += 1; resolve(false); });
            });
            return { content: [{ type: 'text', text: done ? 'waited' : 'cancelled' }] };
        });
    server.registerTool('pid', { description: 'The serving process id.', inputSchema: z.object({}) },
        async () => ({ content: [{ type: 'text', text: String(process.pid) }] }));
    server.registerTool('aborted', { description: 'How many calls were cancelled.', inputSchema: z.object({}) },
        async () => ({ content: [{ type: 'text', text: String(aborted) }] }));
    server.registerTool('regional', {
        description: 'Answers from a region (its region parameter is mirrored into a header).',
        inputSchema: fromJsonSchema({
            type: 'object',
            properties: { region: { type: 'string', 'x-mcp-header': 'Region' }, query: { type: 'string' } },
            required: ['region', 'query'],
        }),
    }, async ({ region, query }, ctx) => {
        const header = ctx.http?.req?.headers?.get('mcp-param-region') ?? null;
        return { content: [{ type: 'text', text: `${query} in ${region} (header ${header})` }] };
    });
    server.registerTool('touch', { description: 'Says a resource changed.', inputSchema: z.object({ uri: z.string() }) },
        async ({ uri }) => {
            notifier?.resourceUpdated(uri);
            return { content: [{ type: 'text', text: `touched ${uri}` }] };
        });
    for (const name of extra) {
        grown(server, name);
    }
    server.registerPrompt('greet', {
        description: 'Greets someone.',
        argsSchema: z.object({ name: completable(z.string(), (value) => ['alice', 'albert', 'bob'].filter((n) => n.startsWith(value))) }),
    }, async ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${name}!` } }] }));
    server.registerResource('info', 'modern://info', { mimeType: 'text/plain' },
        async (uri) => ({ contents: [{ uri: uri.href, text: 'modern-only server' }] }));
    return server;
}

function grown(server, name) {
    server.registerTool(name, { description: `Grown tool ${name}.`, inputSchema: z.object({}) },
        async () => ({ content: [{ type: 'text', text: `${name} ran` }] }));
}

if (mode === 'stdio') {
    // stdio has no bus of its own: the pinned instance sends its change notifications.
    let current = null;
    notifier = {
        toolsChanged: () => current?.sendToolListChanged(),
        resourceUpdated: (uri) => current?.server.sendResourceUpdated({ uri }),
    };
    serveStdio(() => (current = build()), { legacy: 'reject' });
} else {
    const handler = createMcpHandler(() => build(), { legacy: 'reject' });
    notifier = handler.notify;
    const server = http.createServer(async (req, res) => {
        const chunks = [];
        for await (const chunk of req) chunks.push(chunk);
        const body = chunks.length ? Buffer.concat(chunks) : undefined;
        const url = `http://127.0.0.1:${server.address().port}${req.url}`;
        // A client that closes the connection cancels the request (2026-07-28 over HTTP).
        const closed = new AbortController();
        res.on('close', () => closed.abort());
        const request = new Request(url, { method: req.method, headers: req.headers, signal: closed.signal, body: req.method === 'GET' || req.method === 'HEAD' ? undefined : body });
        const response = await handler.fetch(request);
        res.writeHead(response.status, Object.fromEntries(response.headers));
        if (response.body) {
            const reader = response.body.getReader();
            closed.signal.addEventListener('abort', () => reader.cancel().catch(() => {}));
            for (;;) {
                const { done, value } = await reader.read().catch(() => ({ done: true }));
                if (done) break;
                res.write(value);
            }
        }
        res.end();
    });
    server.listen(0, '127.0.0.1', () => {
        console.log(`listening http://127.0.0.1:${server.address().port}/mcp`);
    });
}
