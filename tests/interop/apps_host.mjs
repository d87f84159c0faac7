// A web host of MCP Apps, for the browser: bundled with esbuild by apps_browser.mjs (never
// committed bundled) and loaded by its page as `host.js`. It connects to mcpmux itself with the
// official client SDK (`@modelcontextprotocol/client`) over Streamable HTTP — a cross-origin
// request the daemon allows for this page's origin — declaring the UI extension; lists the tools;
// and for each tool whose `_meta.ui.resourceUri` names a page, reads the page through mcpmux,
// renders it in a sandboxed `<iframe srcdoc>`, connects an `AppBridge` (ext-apps) to it over
// `PostMessageTransport`, calls the tool and hands the page its input and result once it is
// initialized. The bridge forwards the page's own requests (`tools/call`, `resources/read`) to
// the same client, with the names the page's server gave them.
//
// The page's query string: `mcp` (the daemon's host endpoint) and `era` (`2026-07-28` pins the
// client to that revision; anything else leaves it handshake-era). What it did is in
// `window.__host`, which apps_browser.mjs reads.

import {
  AppBridge,
  PostMessageTransport,
  RESOURCE_MIME_TYPE,
  getToolUiResourceUri,
  isToolVisibilityAppOnly,
} from '@modelcontextprotocol/ext-apps/app-bridge';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const UI_EXTENSION = 'io.modelcontextprotocol/ui';
const HOST_INFO = { name: 'mcpmux-apps-browser-host', version: '0' };

const state = { apps: {}, done: false };
window.__host = state;

async function main() {
  const query = new URLSearchParams(location.search);
  const era = query.get('era');
  const client = new Client(HOST_INFO, {
    capabilities: { extensions: { [UI_EXTENSION]: { mimeTypes: [RESOURCE_MIME_TYPE] } } },
    ...(era === '2026-07-28' ? { versionNegotiation: { mode: { pin: era } } } : {}),
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(query.get('mcp'))));
  state.protocolVersion = client.getNegotiatedProtocolVersion() ?? null;
  const { tools } = await client.listTools();
  state.tools = tools.map((tool) => ({
    name: tool.name,
    resourceUri: getToolUiResourceUri(tool) ?? null,
    visibility: tool._meta?.ui?.visibility ?? null,
  }));
  for (const tool of tools) {
    const uri = getToolUiResourceUri(tool);
    // A tool only its page may call is no tool to show a page for.
    if (uri === undefined || isToolVisibilityAppOnly(tool)) continue;
    const app = { uri };
    state.apps[tool.name] = app;
    try {
      await show(client, tool, uri, app);
    } catch (error) {
      app.error = String(error?.stack ?? error);
    }
  }
}

/// Reads `tool`'s page at `uri`, renders it, connects its bridge, calls the tool and hands the
/// page its input and result; what happened goes in `app`.
async function show(client, tool, uri, app) {
  const read = await client.readResource({ uri });
  const [content] = read.contents;
  app.contentUri = content.uri;
  app.mimeType = content.mimeType ?? null;
  app.htmlLength = content.text?.length ?? 0;

  const section = document.createElement('section');
  const heading = document.createElement('h2');
  heading.textContent = `${tool.name} — ${uri}`;
  const iframe = document.createElement('iframe');
  iframe.dataset.tool = tool.name;
  iframe.title = tool.title ?? tool.name;
  iframe.setAttribute('sandbox', 'allow-scripts allow-same-origin');
  section.append(heading, iframe);
  document.getElementById('apps').append(section);

  const bridge = new AppBridge(
    client,
    HOST_INFO,
    { serverTools: {}, serverResources: {}, logging: {} },
    { hostContext: { theme: 'light', platform: 'web', displayMode: 'inline' } },
  );
  const initialized = new Promise((resolve) => bridge.addEventListener('initialized', resolve));
  bridge.onsizechange = ({ height }) => {
    if (height !== undefined) iframe.style.height = `${Math.min(height, 900)}px`;
  };
  // The page sends `ui/initialize` once, when its script runs, and nothing makes the browser
  // deliver it only after the frame's `load`: the bridge listens on the frame's window first
  // (the same window across the srcdoc navigation), then the page is loaded into it.
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  const loaded = new Promise((resolve) => iframe.addEventListener('load', resolve, { once: true }));
  iframe.srcdoc = content.text;
  await loaded;
  app.loaded = true;

  const input = {};
  const result = await client.callTool({ name: tool.name, arguments: input });
  app.result = { isError: result.isError === true, structuredContent: result.structuredContent ?? null };
  await initialized;
  app.initialized = true;
  await bridge.sendToolInput({ arguments: input });
  await bridge.sendToolResult(result);
  app.delivered = true;
}

main()
  .catch((error) => {
    state.error = String(error?.stack ?? error);
  })
  .finally(() => {
    state.done = true;
  });
