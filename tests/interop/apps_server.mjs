// An MCP App server built with the official SDKs: `@modelcontextprotocol/server` 2.4 and the
// server helpers of `@modelcontextprotocol/ext-apps` 2.0 (`registerAppTool`,
// `registerAppResource`), pinned in tests/peers/. Run by tests/interop/apps.rs as an upstream:
//
//   node apps_server.mjs          serveStdio over this process's stdin/stdout (both eras)
//
// `MCP_NODE_MODULES` names the node_modules directory the SDKs and zod are in (the tests install
// them under target/).
//
// Its app tool `show-dashboard` carries every field `_meta.ui` has (and one a later version might
// add), so a test can check that each reaches the host as it is but the page's URI; its page
// `ui://dashboard/page.html` carries the resource side of them. `refresh-dashboard` is only the
// page's to call (`visibility: ["app"]`); `plain-echo` has no app.

import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.MCP_NODE_MODULES;
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { McpServer } = await load('@modelcontextprotocol/server/dist/index.mjs');
const { serveStdio } = await load('@modelcontextprotocol/server/dist/stdio.mjs');
const { registerAppTool, registerAppResource, RESOURCE_MIME_TYPE } = await load(
    '@modelcontextprotocol/ext-apps/dist/src/server/index.js',
);
const z = await load('zod/index.js');

const PAGE = 'ui://dashboard/page.html';
const HTML = '<!doctype html><title>Dashboard</title><p id="figure">42</p>';

// What the page needs of its host (the resource side of SEP-1865), also on the tool below.
const csp = {
    connectDomains: ['https://api.dashboard.example'],
    resourceDomains: ['https://cdn.dashboard.example'],
};
const permissions = { camera: {}, clipboardWrite: {} };
const domain = 'dashboard.example';

function build() {
    const server = new McpServer({ name: 'apps-demo', version: '2.4.0' }, { capabilities: { tools: {}, resources: {} } });
    registerAppTool(server, 'show-dashboard', {
        title: 'Show dashboard',
        description: 'Shows the sales dashboard of a quarter.',
        inputSchema: z.object({ quarter: z.string() }),
        _meta: {
            ui: {
                resourceUri: PAGE,
                csp,
                permissions,
                domain,
                prefersBorder: true,
                visibility: ['model', 'app'],
                'x-future-field': { nested: [1, 'two', { three: 3 }], enabled: false },
            },
            'com.example/owner': 'sales',
        },
    }, async ({ quarter }) => ({
        content: [{ type: 'text', text: `dashboard of ${quarter}` }],
        structuredContent: { quarter, total: 42 },
    }));
    registerAppTool(server, 'refresh-dashboard', {
        title: 'Refresh dashboard',
        description: 'Refreshes the sales dashboard figures (only the dashboard page calls it).',
        inputSchema: z.object({}),
        _meta: { ui: { resourceUri: PAGE, visibility: ['app'] } },
    }, async () => ({ content: [{ type: 'text', text: 'refreshed' }], structuredContent: { total: 43 } }));
    server.registerTool('plain-echo', {
        description: 'Echoes its text (a tool without an app).',
        inputSchema: z.object({ text: z.string() }),
    }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
    registerAppResource(server, 'Dashboard', PAGE, {
        description: 'The sales dashboard page.',
        _meta: { ui: { csp, permissions, domain, prefersBorder: true } },
    }, async (uri) => ({
        contents: [{
            uri: uri.href,
            mimeType: RESOURCE_MIME_TYPE,
            text: HTML,
            _meta: { ui: { csp, permissions, domain, prefersBorder: true } },
        }],
    }));
    return server;
}

serveStdio(() => build());
