// An MCP server publishing agent skills with the official TypeScript SDK v2's Skills extension
// (`@modelcontextprotocol/server` 2.4, `@modelcontextprotocol/server/ext/skills`, pinned in
// tests/peers/), serving both protocol eras:
//
//   node skills_server.mjs stdio  NAME SKILLS PAGE    over this process's stdin/stdout
//   node skills_server.mjs http   NAME SKILLS PAGE    createMcpHandler on 127.0.0.1, port 0;
//                                                     prints `listening <url>` on stdout
//
// NAME tells its skills apart; SKILLS is a comma-separated list of skill names; PAGE is the page
// size of its listings. Over stdio it serves a `SkillCatalog` (which declares `directoryRead`);
// over HTTP a skills source of its own without `readDirectory` (so no `directoryRead`). Each skill
// has a `SKILL.md` (frontmatter naming it), `references/GUIDE.md` and a binary `assets/logo.bin`.
// Its tool `add_skill` {name} publishes one more skill (the catalog is loaded again, and the
// server says its resources changed).
//
// `MCP_NODE_MODULES` names the node_modules directory the SDK and zod are in.

import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.MCP_NODE_MODULES;
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { McpServer, createMcpHandler } = await load('@modelcontextprotocol/server/dist/index.mjs');
const { serveStdio } = await load('@modelcontextprotocol/server/dist/stdio.mjs');
const { SkillsExtension, memorySkillFiles, skillEntry } = await load(
    '@modelcontextprotocol/server/dist/ext/skills/index.mjs',
);
const z = await load('zod/index.js');

const [mode = 'stdio', name = 'skills', listed = 'alpha', page = '2'] = process.argv.slice(2);
const pageSize = Number(page);

/// One skill's files, under its directory.
function filesOf(skill) {
    return {
        [`${skill}/SKILL.md`]: `---\nname: ${skill}\ndescription: The ${skill} skill of ${name}.\n---\n\n# ${skill}\n\nSee [the guide](references/GUIDE.md).\n`,
        [`${skill}/references/GUIDE.md`]: `How ${name} does ${skill}: step one, step two.\n`,
        [`${skill}/assets/logo.bin`]: new Uint8Array([0, 1, 2, 250, 251, 252, skill.length]),
    };
}

const record = {};
for (const skill of listed.split(',').filter(Boolean)) Object.assign(record, filesOf(skill));

let catalog = null;
let entries = [];
let notify = () => {};

async function reload() {
    if (mode === 'stdio') {
        await catalog.reload();
    } else {
        const skills = new Map();
        for (const key of Object.keys(record).filter((k) => k.endsWith('/SKILL.md'))) {
            const dir = key.slice(0, -'/SKILL.md'.length);
            const files = Object.fromEntries(
                Object.entries(record)
                    .filter(([k]) => k.startsWith(`${dir}/`))
                    .map(([k, v]) => [k.slice(dir.length + 1), v]),
            );
            skills.set(dir, await skillEntry(dir, files));
        }
        entries = [...skills.values()].sort((a, b) => (a.uri < b.uri ? -1 : 1));
        notify();
    }
}

/// The HTTP server's own skills source: listing, getting and reading, no directories.
const source = {
    async list({ cursor }) {
        const start = cursor === undefined ? 0 : Number(cursor);
        const items = entries.slice(start, start + pageSize);
        const next = start + pageSize < entries.length ? String(start + pageSize) : undefined;
        return next === undefined ? { skills: items } : { skills: items, nextCursor: next };
    },
    async get(uri) {
        return entries.find((skill) => skill.uri === uri);
    },
    async read(uri) {
        const key = uri.replace(/^skill:\/\//, '');
        const content = record[key];
        if (content === undefined) return undefined;
        return typeof content === 'string' ? { text: content } : { bytes: content };
    },
};

function build() {
    // It says when its resources (and so its skills) change.
    const capabilities = { tools: {}, resources: { listChanged: true } };
    const server = new McpServer({ name: `skills-${name}`, version: '2.4.0' }, { capabilities });
    server.registerTool('add_skill', {
        description: 'Publishes one more skill.',
        inputSchema: z.object({ name: z.string() }),
    }, async ({ name: skill }) => {
        Object.assign(record, filesOf(skill));
        await reload();
        return { content: [{ type: 'text', text: `published ${skill}` }] };
    });
    if (mode === 'stdio') {
        catalog.attach(server);
    } else {
        new SkillsExtension({ source }).attach(server);
    }
    return server;
}

if (mode === 'stdio') {
    // The catalog says itself that its resources changed, through the server it is attached to.
    catalog = await SkillsExtension.load(memorySkillFiles(record), { pageSize });
    const server = build();
    serveStdio(() => server);
} else {
    await reload();
    const handler = createMcpHandler(() => build());
    notify = () => handler.notify.resourcesChanged?.();
    const listener = http.createServer(async (req, res) => {
        const chunks = [];
        for await (const chunk of req) chunks.push(chunk);
        const body = chunks.length ? Buffer.concat(chunks) : undefined;
        const url = `http://127.0.0.1:${listener.address().port}${req.url}`;
        const request = new Request(url, {
            method: req.method,
            headers: req.headers,
            body: req.method === 'GET' || req.method === 'HEAD' ? undefined : body,
        });
        const response = await handler.fetch(request);
        res.writeHead(response.status, Object.fromEntries(response.headers));
        if (response.body) {
            const reader = response.body.getReader();
            for (;;) {
                const { done, value } = await reader.read().catch(() => ({ done: true }));
                if (done) break;
                res.write(value);
            }
        }
        res.end();
    });
    listener.listen(0, '127.0.0.1', () => {
        console.log(`listening http://127.0.0.1:${listener.address().port}/mcp`);
    });
}
