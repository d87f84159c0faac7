// MCP Apps through mcpmux in a real browser: Debian's chromium driven by playwright-core (both
// from the npm test peers). Run by tests/interop/apps.rs:
//
//   node apps_browser.mjs MCP_URL ERA PAGE_PORT WORK_DIR SCREENSHOT
//
// with PEERS_NODE_MODULES naming the peers' node_modules. The daemon at MCP_URL holds the
// published app servers `server-system-monitor` (as `sysmon`) and `server-basic-vanillajs` (as
// `basic`) and lets the origin http://127.0.0.1:PAGE_PORT call it. The script bundles the host
// page's code (apps_host.mjs: ext-apps' AppBridge and the official client SDK) with esbuild into
// WORK_DIR, serves the page from 127.0.0.1:PAGE_PORT, and opens it: the page connects to mcpmux
// itself (ERA `2026-07-28` pins its client to that revision) and renders each tool's app. The
// script then watches what the apps do through mcpmux — the system monitor's own polling with
// `poll-system-stats` (app-only, unprefixed), a click on the basic app's button that calls
// `get-time` (unprefixed) — records every MCP request the browser sent and its answer, takes a
// screenshot (SCREENSHOT, a .png path) and prints one JSON summary line; the Rust test judges it.

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const [mcpUrl, era, pagePort, workDir, screenshot] = process.argv.slice(2);
const modules = process.env.PEERS_NODE_MODULES;
const require = createRequire(join(modules, 'noop.js'));
const esbuild = require('esbuild');
const { chromium } = require('playwright-core');

const summary = { era, requests: [], console_errors: [] };

// The host page's code, bundled for the browser with what it imports.
const bundle = join(workDir, 'host.js');
await esbuild.build({
  entryPoints: [join(dirname(fileURLToPath(import.meta.url)), 'apps_host.mjs')],
  nodePaths: [modules],
  bundle: true,
  format: 'iife',
  platform: 'browser',
  target: 'chrome120',
  outfile: bundle,
  logLevel: 'error',
});
const pageHtml = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>mcpmux MCP Apps test host</title>
<style>body{font:14px sans-serif;margin:12px} h2{font-size:14px;margin:12px 0 4px}
iframe{width:100%;height:560px;border:1px solid #888}</style></head>
<body><h1>MCP Apps through mcpmux (${era})</h1><div id="apps"></div>
<script src="host.js"></script></body></html>`;
const server = createServer((req, res) => {
  const path = new URL(req.url, 'http://127.0.0.1').pathname;
  if (path === '/') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(pageHtml);
  } else if (path === '/host.js') {
    res.writeHead(200, { 'content-type': 'text/javascript' }).end(readFileSync(bundle));
  } else {
    res.writeHead(404).end();
  }
});
await new Promise((resolve) => server.listen(Number(pagePort), '127.0.0.1', resolve));

/// The JSON-RPC messages of an answer: a JSON body, or the `data:` lines of an event stream.
function messagesOf(text) {
  try {
    return [JSON.parse(text)];
  } catch {
    return text.split('\n').filter((l) => l.startsWith('data:')).flatMap((l) => {
      try {
        return [JSON.parse(l.slice(5))];
      } catch {
        return [];
      }
    });
  }
}

/// Waits until `check()` (run in the page or a frame) holds, within `ms`.
const until = (where, check, arg, ms = 30000) => where.waitForFunction(check, arg, { timeout: ms, polling: 100 });

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') summary.console_errors.push(m.text().slice(0, 300));
  });
  page.on('pageerror', (e) => summary.console_errors.push(`pageerror: ${String(e).slice(0, 300)}`));
  page.on('response', (r) => {
    if (r.status() >= 400) summary.console_errors.push(`HTTP ${r.status()} for ${r.request().method()} ${r.url()}`);
  });
  // Every MCP request the browser sent to mcpmux (the page's own, forwarded by the bridge, among
  // them), with what was answered; `pending` counts those not recorded yet.
  const isMcp = (request) => request.url().startsWith(mcpUrl) && request.method() === 'POST';
  let pending = 0;
  page.on('request', (request) => {
    if (isMcp(request)) pending += 1;
  });
  page.on('requestfailed', (request) => {
    if (!isMcp(request)) return;
    pending -= 1;
    summary.console_errors.push(`request failed: ${request.postData()?.slice(0, 200)}: ${request.failure()?.errorText}`);
  });
  page.on('requestfinished', async (request) => {
    if (!isMcp(request)) return;
    try {
      const body = request.postDataJSON();
      const response = await request.response();
      const answers = messagesOf(await response.text().catch(() => ''));
      const answer = answers.find((m) => m.id !== undefined && m.id === body.id) ?? null;
      summary.requests.push({
        method: body.method ?? null,
        name: body.params?.name ?? body.params?.uri ?? null,
        status: response.status(),
        allow_origin: response.headers()['access-control-allow-origin'] ?? null,
        error: answer?.error ?? null,
        is_error: answer?.result?.isError === true,
        answered: answer !== null,
      });
    } finally {
      pending -= 1;
    }
  });

  await page.goto(`http://127.0.0.1:${pagePort}/?mcp=${encodeURIComponent(mcpUrl)}&era=${era}`);
  await until(page, () => window.__host?.done === true, null, 60000);
  const host = await page.evaluate(() => window.__host);
  summary.host = host;
  if (host.error) throw new Error(`the host page failed: ${host.error}`);

  // The system monitor: its tool result shows the machine, then the page polls on its own
  // (every 2 s) through the bridge and mcpmux; each answer updates the status line to the time.
  const sysmon = page.frameLocator('iframe[data-tool="sysmon__get-system-info"]');
  const monitorFrame = await (await page.$('iframe[data-tool="sysmon__get-system-info"]')).contentFrame();
  await until(monitorFrame, () => /^\d{2}:\d{2}:\d{2}$/.test(document.getElementById('status-text')?.textContent ?? ''));
  // Two answered polls at least: the page keeps polling, not just once.
  const polls = () => summary.requests.filter((r) => r.method === 'tools/call' && r.name === 'poll-system-stats' && r.answered);
  for (let i = 0; i < 100 && polls().length < 2; i++) await page.waitForTimeout(100);
  summary.sysmon = {
    hostname: await sysmon.locator('#info-hostname').textContent(),
    platform: await sysmon.locator('#info-platform').textContent(),
    status: await sysmon.locator('#status-text').textContent(),
    indicator: await sysmon.locator('#status-indicator').getAttribute('class'),
    memory: await sysmon.locator('#memory-percent').textContent(),
    uptime: await sysmon.locator('#info-uptime').textContent(),
    button: await sysmon.locator('#poll-toggle-btn').textContent(),
  };

  // The basic app: its tool result shows the server's time; its button calls `get-time` itself.
  const basic = page.frameLocator('iframe[data-tool="basic__get-time"]');
  const basicFrame = await (await page.$('iframe[data-tool="basic__get-time"]')).contentFrame();
  await until(basicFrame, () => /^\d{4}-\d\d-\d\dT/.test(document.getElementById('server-time')?.textContent ?? ''));
  const first = await basic.locator('#server-time').textContent();
  await basic.locator('#get-time-btn').click();
  await until(basicFrame, (before) => {
    const now = document.getElementById('server-time')?.textContent ?? '';
    return now !== before && /^\d{4}-\d\d-\d\dT/.test(now);
  }, first);
  summary.basic = { first, after_click: await basic.locator('#server-time').textContent() };

  // The picture while the monitor polls; then its polling is stopped (its own button) and every
  // request sent is recorded, so that the count is settled.
  await page.screenshot({ path: screenshot, fullPage: true });
  await sysmon.locator('#poll-toggle-btn').click();
  await until(monitorFrame, () => document.getElementById('poll-toggle-btn')?.textContent === 'Start');
  for (let quiet = 0, i = 0; quiet < 5; quiet = pending === 0 ? quiet + 1 : 0, i += 1) {
    if (i > 100) throw new Error(`${pending} requests to mcpmux still unanswered after 10 s`);
    await page.waitForTimeout(100);
  }
  summary.ok = true;
} catch (error) {
  summary.error = String(error?.stack ?? error);
} finally {
  await browser.close();
  server.close();
}
console.log(JSON.stringify(summary));
process.exit(summary.ok ? 0 : 1);
