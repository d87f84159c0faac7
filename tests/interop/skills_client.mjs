// A host reading agent skills through mcpmux with the official TypeScript SDK v2's skills client
// (`@modelcontextprotocol/client` 2.4, `@modelcontextprotocol/client/ext/skills`):
//
//   node skills_client.mjs URL MODE [HIDDEN]
//
// MODE is `legacy` (2025-11-25, the client's default) or `2026-07-28`. It lists every skill (the
// client walks every page), gets each by its URI, reads and verifies every file of each (size,
// digest, and the `SKILL.md` frontmatter, checked by the SDK), and reads the directory of each
// skill when the server declares `directoryRead`. HIDDEN, when given, is a `SKILL.md` URI the
// host's view must not have: getting it and reading its files must fail. Prints one JSON
// summary line; the Rust test judges it.
//
// `MCP_NODE_MODULES` names the node_modules directory the SDK is in.

import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.MCP_NODE_MODULES;
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { Client, StreamableHTTPClientTransport } = await load('@modelcontextprotocol/client/dist/index.mjs');
const { SkillsClient } = await load('@modelcontextprotocol/client/dist/ext/skills/index.mjs');

const [url, mode, hidden] = process.argv.slice(2);
const options = mode === '2026-07-28' ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {};
const client = new Client({ name: 'skills-host', version: '1' }, options);
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const skills = new SkillsClient(client);

const summary = {
    version: client.getNegotiatedProtocolVersion?.() ?? null,
    supported: skills.supported,
    directoryRead: skills.directoryRead,
    skills: [],
    errors: [],
};
const listed = await skills.list();
summary.invalid = listed.invalid.length;
summary.cache = { ttlMs: listed.ttlMs ?? null, cacheScope: listed.cacheScope ?? null };
for (const entry of listed.skills) {
    const one = { uri: entry.uri, name: entry.frontmatter.name, files: [], children: null };
    try {
        const { skill } = await skills.get(entry.uri);
        one.got = skill.uri === entry.uri;
        for (const file of skill.resources === 'dynamic' ? [] : skill.resources) {
            const read = await skills.read(skill, file.uri);
            one.files.push({ uri: file.uri, size: read.bytes.byteLength, verified: read.verified === true });
        }
        if (skills.directoryRead) {
            const root = entry.uri.slice(0, -'/SKILL.md'.length);
            const { resources } = await skills.readDirectory(root);
            one.children = resources.map((r) => r.uri);
        }
    } catch (error) {
        summary.errors.push(`${entry.uri}: ${error.message}`);
    }
    summary.skills.push(one);
}
if (hidden) {
    summary.hidden = {};
    try {
        await skills.get(hidden);
        summary.hidden.get = 'answered';
    } catch (error) {
        summary.hidden.get = error.message;
    }
    try {
        await client.readResource({ uri: hidden });
        summary.hidden.read = 'answered';
    } catch (error) {
        summary.hidden.read = error.message;
    }
}
console.log(JSON.stringify(summary));
await client.close();
