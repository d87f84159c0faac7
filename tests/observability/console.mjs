// The mcpmux web console in a real browser: Debian's chromium, driven by playwright-core, checked
// by axe-core (both from the npm test peers). Run by tests/observability/console.rs:
//
//   node console.mjs ADMIN_URL TOKEN_FILE CONFIG_FILE SCREENSHOT_DIR
//
// with PEERS_NODE_MODULES naming the peers' node_modules. The daemon holds test upstreams `a`,
// `b` and `c` (pin = "strict", whose tool `helper` changed since it was pinned), and `a__echo`
// was called a few times. The script signs in (after being refused without the token), watches `a`
// restart live after its process is killed, restarts `b` from its button by keyboard alone,
// queries the audit log and opens a record, verifies the chain and exports CSV, approves the
// changed pin and finds the tool in the catalog again, sees a refused reload's error, tries
// forged cross-site requests, screenshots every page and runs axe on it. It prints one JSON
// summary line; the Rust test judges it.

import { createRequire } from 'node:module';
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const [adminUrl, tokenFile, configFile, shots] = process.argv.slice(2);
const require = createRequire(join(process.env.PEERS_NODE_MODULES, 'noop.js'));
const { chromium } = require('playwright-core');
const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const token = readFileSync(tokenFile, 'utf8').trim();

const summary = { pages: {}, steps: [] };
const step = (name) => summary.steps.push(name);

/// Serious and critical axe violations of the page now, and a screenshot of it.
async function inspect(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  await page.evaluate(axeSource);
  const results = await page.evaluate(() => globalThis.axe.run(document, { resultTypes: ['violations'] }));
  summary.pages[name] = {
    url: page.url(),
    title: await page.title(),
    violations: results.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5) })),
  };
}

/// Presses Tab until the focused element's text is `label` (at most 60 times): the action is
/// reachable from the keyboard.
async function tabTo(page, label) {
  for (let i = 0; i < 60; i++) {
    await page.keyboard.press('Tab');
    const focused = await page.evaluate(() => document.activeElement?.textContent?.trim());
    if (focused === label) {
      return i + 1;
    }
  }
  throw new Error(`"${label}" is not reachable with Tab`);
}

const rowState = (page, name) =>
  page.locator(`tr[data-upstream="${name}"] td[data-field="state"]`).textContent();

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const csp = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy/i.test(m.text())) csp.push(m.text());
  });

  // Without a session: the sign-in page; a wrong token is refused.
  await page.goto(`${adminUrl}/console/`);
  summary.unsigned_url = new URL(page.url()).pathname;
  await inspect(page, 'signin');
  await page.fill('#token', 'not-the-token');
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/console/login') && r.request().method() === 'POST'),
    page.click('button[type=submit]'),
  ]);
  summary.wrong_token = { status: refused.status(), alert: await page.locator('[role=alert]').textContent() };
  await page.fill('#token', token);
  await page.click('button[type=submit]');
  await page.waitForURL(`${adminUrl}/console/`);
  summary.cookie = (await context.cookies()).map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite }));
  step('signed in');

  // The overview: every upstream and its state.
  await page.waitForFunction(() => document.querySelectorAll('tr[data-upstream]').length >= 3);
  summary.states = { a: await rowState(page, 'a'), b: await rowState(page, 'b'), c: await rowState(page, 'c') };
  await inspect(page, 'overview');

  // Kill `a`'s process: its row leaves `ready` and comes back, live, without a reload.
  const status = await (await fetch(`${adminUrl}/status`, { headers: { authorization: `Bearer ${token}` } })).json();
  const pid = status.upstreams.find((u) => u.name === 'a').pid;
  await page.evaluate(() => { window.__seen = []; });
  const watcher = page.evaluate(() => new Promise((resolve) => {
    const cell = document.querySelector('tr[data-upstream="a"] td[data-field="state"]');
    const seen = window.__seen;
    const note = () => { if (seen[seen.length - 1] !== cell.textContent) seen.push(cell.textContent); };
    note();
    new MutationObserver(() => {
      note();
      if (seen.length > 1 && cell.textContent === 'ready') resolve(seen);
    }).observe(cell, { childList: true, characterData: true, subtree: true });
  }));
  process.kill(pid, 'SIGKILL');
  summary.killed_states = await Promise.race([
    watcher,
    new Promise((_, reject) => setTimeout(() => reject(new Error('a did not come back live within 60 s')), 60000)),
  ]);
  step('a restarted live');

  // Restart `b` from its button, by keyboard alone.
  await page.goto(`${adminUrl}/console/`);
  summary.tabs_to_restart = await tabTo(page, 'Restart b');
  await Promise.all([page.waitForURL(/notice=/), page.keyboard.press('Enter')]);
  summary.restart_notice = await page.locator('.notice').textContent();
  await page.waitForFunction(
    () => document.querySelector('tr[data-upstream="b"] td[data-field="state"]')?.textContent === 'ready',
    null,
    { timeout: 60000 },
  );
  step('b restarted from its button');

  // The audit log: a query, a record, the chain, an export.
  await page.goto(`${adminUrl}/console/audit`);
  await page.fill('input[name=tool]', 'a__echo');
  await Promise.all([page.waitForURL(/tool=a__echo/), page.click('button:has-text("Query")')]);
  summary.audit_rows = await page.locator('tbody tr').count();
  await inspect(page, 'audit');
  await page.locator('tbody tr th a').first().click();
  await page.waitForURL(/\/console\/audit\/record\//);
  summary.record = await page.locator('pre').textContent();
  await inspect(page, 'audit-record');
  await page.goto(`${adminUrl}/console/audit/verify`);
  summary.verify = await page.locator('main p').first().textContent();
  const csv = await page.request.get(`${adminUrl}/console/audit/export?format=csv&tool=a__echo`);
  summary.csv = { status: csv.status(), type: csv.headers()['content-type'], head: (await csv.text()).split('\n').slice(0, 2) };
  step('audit');

  // Pins: the changed tool, approved; then listed in the catalog again.
  await page.goto(`${adminUrl}/console/pins`);
  summary.changed_pins = await page.locator('h2:has-text("Changed") + table tbody tr').count();
  summary.diff = {
    removed: (await page.locator('table.diff td.del').allTextContents()).filter((t) => t.trim()),
    added: (await page.locator('table.diff td.ins').allTextContents()).filter((t) => t.trim()),
  };
  await inspect(page, 'pins');
  await Promise.all([page.waitForURL(/notice=/), page.click('button:has-text("Approve helper")')]);
  summary.approve_notice = await page.locator('.notice').textContent();
  await page.goto(`${adminUrl}/console/catalog?query=helper`);
  summary.catalog_found = await page.locator('details.tool summary code').allTextContents();
  await inspect(page, 'catalog');
  step('pin approved');

  await page.goto(`${adminUrl}/console/hosts`);
  await inspect(page, 'hosts');

  // A reload the daemon refuses shows why, with the file and line.
  appendFileSync(configFile, '\n[upstreams.broken]\ncommand = 5\n');
  await page.goto(`${adminUrl}/console/config`);
  await Promise.all([page.waitForURL(/notice=/), page.click('button:has-text("Reload the config")')]);
  summary.reload_notice = await page.locator('.notice').textContent();
  summary.reload_error = await page.locator('.error').textContent();
  await inspect(page, 'config');
  step('refused reload shown');

  // Forged requests: no CSRF token, another origin, no origin; a cross-site form in the browser.
  const cookie = (await context.cookies()).find((c) => c.name === 'mcpmux_console');
  const forge = async (headers, body) =>
    (await fetch(`${adminUrl}/console/upstreams/b/restart`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie: `${cookie.name}=${cookie.value}`, 'content-type': 'application/x-www-form-urlencoded', ...headers },
      body,
    })).status;
  const csrf = await page.locator('input[name=csrf]').first().inputValue();
  summary.forged = {
    no_csrf: await forge({ origin: adminUrl }, ''),
    wrong_csrf: await forge({ origin: adminUrl }, 'csrf=forged'),
    other_origin: await forge({ origin: 'http://evil.example' }, `csrf=${csrf}`),
    no_origin: await forge({}, `csrf=${csrf}`),
    genuine: await forge({ origin: adminUrl }, `csrf=${csrf}`),
  };
  const evil = await context.newPage();
  await evil.route('http://evil.example/**', (route) => route.fulfill({
    contentType: 'text/html',
    body: `<!doctype html><title>evil</title><form method="post" action="${adminUrl}/console/upstreams/b/restart"><input name="csrf" value="x"><button>go</button></form>`,
  }));
  await evil.goto('http://evil.example/');
  const [crossSite] = await Promise.all([
    evil.waitForResponse((r) => r.url().includes('/console/upstreams/b/restart')),
    evil.click('button'),
  ]);
  summary.cross_site_form = crossSite.status();
  step('forgeries refused');

  // Signing out ends the session.
  await page.goto(`${adminUrl}/console/`);
  await Promise.all([page.waitForURL(/\/console\/login/), page.click('button:has-text("Sign out")')]);
  await page.goto(`${adminUrl}/console/pins`);
  summary.after_sign_out = new URL(page.url()).pathname;
  summary.csp_errors = csp;
  summary.ok = true;
} finally {
  await browser.close();
}
console.log(JSON.stringify(summary));
