// The mcpmux web console in a real browser: Debian's chromium, driven by playwright-core, checked
// by axe-core (both from the npm test peers). Run by tests/observability/console.rs:
//
//   node console.mjs ADMIN_URL TOKEN_FILE CONFIG_FILE SCREENSHOT_DIR
//
// with PEERS_NODE_MODULES naming the peers' node_modules. The daemon holds test upstreams `a`,
// `b` and `c` (pin = "strict", whose tool `helper` changed since it was pinned) and `web`, a
// remote one that signs in with OAuth and has not yet; `a__echo` was called a few times. Every
// action is taken from the keyboard alone (Tab to it, then Enter). The script signs in (after
// being refused without the token), sees that a listener on a sibling port the browser visits
// receives no console cookie, watches `a` restart live after its process is killed,
// restarts `b` from its button, signs in to `web` through its authorization server and sees it
// ready live, signs out of it, queries the audit log and opens a record, watches the live tail add
// a record, verifies the chain and exports CSV, approves the changed pin and finds the tool in the
// catalog again, sees a refused reload's error, tries forged cross-site requests, screenshots
// every page and runs axe on it. It prints one JSON summary line; the Rust test judges it.

import { createRequire } from 'node:module';
import { appendFileSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';

const [adminUrl, tokenFile, configFile, shots] = process.argv.slice(2);
const require = createRequire(join(process.env.PEERS_NODE_MODULES, 'noop.js'));
const { chromium } = require('playwright-core');
const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const token = readFileSync(tokenFile, 'utf8').trim();

const summary = { pages: {}, steps: [], keyboard: {} };
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

/// Presses Tab until the focused element is `target` (at most 80 times): its text when `target`
/// is a string, else `{ css }`. Returns how many presses it took.
async function tabTo(page, target) {
  const wanted = typeof target === 'string' ? { text: target } : target;
  for (let i = 0; i < 80; i++) {
    await page.keyboard.press('Tab');
    const hit = await page.evaluate((t) => {
      const focused = document.activeElement;
      if (!focused || focused === document.body) return false;
      return t.css ? focused.matches(t.css) : focused.textContent?.trim() === t.text;
    }, wanted);
    if (hit) {
      summary.keyboard[wanted.text ?? wanted.css] = i + 1;
      return i + 1;
    }
  }
  throw new Error(`${JSON.stringify(wanted)} is not reachable with Tab`);
}

/// Reaches `target` with Tab, presses Enter, and waits for the page at `url`.
async function press(page, target, url) {
  await tabTo(page, target);
  await Promise.all([page.waitForURL(url), page.keyboard.press('Enter')]);
}

/// Reaches the field `css` with Tab, types `text` into it and presses Enter (submitting its
/// form); waits for the page at `url`.
async function submit(page, css, text, url) {
  await tabTo(page, { css });
  await page.keyboard.press('Control+A');
  await page.keyboard.type(text);
  await Promise.all([page.waitForURL(url), page.keyboard.press('Enter')]);
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
  await tabTo(page, { css: '#token' });
  await page.keyboard.type('not-the-token');
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/console/login') && r.request().method() === 'POST'),
    page.keyboard.press('Enter'),
  ]);
  summary.wrong_token = { status: refused.status(), alert: await page.locator('[role=alert]').textContent() };
  // The session's pages are below a path of its own: `/console/s/<key>/`.
  await submit(page, '#token', token, /\/console\/s\/[0-9a-f]+\/$/);
  const base = page.url();
  summary.base = new URL(base).pathname;
  summary.cookie = (await context.cookies()).map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite, path: c.path }));
  step('signed in');

  // Another local user's listener on a sibling port of 127.0.0.1, which the signed-in browser
  // visits: the cookies it receives, replayed to the admin port, must open no console page.
  const received = [];
  const sibling = createServer((request, response) => {
    received.push(request.headers.cookie ?? '');
    response.end('<!doctype html><title>sibling</title>');
  });
  await new Promise((resolve) => sibling.listen(0, '127.0.0.1', resolve));
  const siblingUrl = `http://127.0.0.1:${sibling.address().port}`;
  const visitor = await context.newPage();
  for (const path of ['/', '/console/', '/console/config']) await visitor.goto(`${siblingUrl}${path}`);
  await visitor.close();
  sibling.close();
  const replayed = [];
  for (const cookies of received) {
    for (const path of ['/console/', '/console/config']) {
      const answer = await fetch(`${adminUrl}${path}`, { redirect: 'manual', headers: { cookie: cookies } });
      replayed.push({ path, status: answer.status, csrf: (await answer.text()).includes('name="csrf"') });
    }
  }
  summary.sibling = { received, replayed };
  step('a sibling port got nothing to replay');

  // The overview: every upstream and its state.
  await page.waitForFunction(() => document.querySelectorAll('tr[data-upstream]').length >= 4);
  summary.states = {};
  for (const name of ['a', 'b', 'c', 'web']) summary.states[name] = await rowState(page, name);
  await inspect(page, 'overview');

  // Kill `a`'s process: its row leaves `ready` and comes back, live, without a reload.
  const status = await (await fetch(`${adminUrl}/status`, { headers: { authorization: `Bearer ${token}` } })).json();
  const pid = status.upstreams.find((u) => u.name === 'a').pid;
  // The watcher is in place before the kill: a phase change reaches the page at once.
  await page.evaluate(() => {
    const cell = document.querySelector('tr[data-upstream="a"] td[data-field="state"]');
    const seen = [];
    const note = () => { if (seen[seen.length - 1] !== cell.textContent) seen.push(cell.textContent); };
    note();
    window.__back = new Promise((resolve) => {
      new MutationObserver(() => {
        note();
        if (seen.length > 1 && cell.textContent === 'ready') resolve(seen);
      }).observe(cell, { childList: true, characterData: true, subtree: true });
    });
  });
  process.kill(pid, 'SIGKILL');
  summary.killed_states = await Promise.race([
    page.evaluate(() => window.__back),
    new Promise((_, reject) => setTimeout(() => reject(new Error('a did not come back live within 60 s')), 60000)),
  ]);
  step('a restarted live');

  // Restart `b` from its button, by keyboard alone.
  await page.goto(base);
  await press(page, 'Restart b', /notice=/);
  summary.restart_notice = await page.locator('.notice').textContent();
  await page.waitForFunction(
    () => document.querySelector('tr[data-upstream="b"] td[data-field="state"]')?.textContent === 'ready',
    null,
    { timeout: 60000 },
  );
  step('b restarted from its button');

  // Signing in to `web`: its authorization server (our test upstream's, which approves at once)
  // is reached by a link, sends the browser back to mcpmux, and the row turns ready live.
  const waitState = (name, wanted) => page.waitForFunction(
    ([n, w]) => document.querySelector(`tr[data-upstream="${n}"] td[data-field="state"]`)?.textContent === w,
    [name, wanted],
    { timeout: 60000 },
  );
  await page.goto(base);
  await press(page, 'Sign in to web', /\/upstreams\/login\?name=web$/);
  summary.sign_in_page = await page.locator('main [role=status]').textContent();
  await inspect(page, 'sign-in-upstream');
  await press(page, { css: '#authorize' }, /\/callback\?/);
  summary.callback = await page.locator('body').textContent();
  // The callback page (mcpmux's own loopback listener) links back to the console's page for
  // this sign-in, which says it is done once the tokens are stored.
  await press(page, 'Back to the mcpmux console', `${base}upstreams/login?name=web`);
  for (let i = 0; i < 60; i += 1) {
    summary.sign_in_done = await page.locator('main [role=status]').textContent();
    if (summary.sign_in_done.includes('Signed in to web')) break;
    await page.waitForTimeout(500);
    await page.reload();
  }
  await page.goto(base);
  await waitState('web', 'ready');
  summary.web_after_sign_in = await rowState(page, 'web');
  await page.goto(base);
  await press(page, 'Sign out of web', /notice=/);
  summary.sign_out_notice = await page.locator('.notice').textContent();
  await waitState('web', 'needs-login');
  summary.web_after_sign_out = await rowState(page, 'web');
  step('signed in to web and out');

  // The audit log: a query, a record, the chain, an export.
  await page.goto(`${base}audit`);
  await submit(page, 'input[name=tool]', 'a__echo', /tool=a__echo/);
  summary.audit_rows = await page.locator('tbody tr').count();
  const exportHref = await page.locator('a:has-text("Export CSV")').getAttribute('href');
  await inspect(page, 'audit');
  await press(page, { css: 'tbody tr th a' }, /\/audit\/record\//);
  summary.record = await page.locator('pre').textContent();
  await inspect(page, 'audit-record');
  await page.goto(`${base}audit`);
  await press(page, 'Verify the chain', /\/audit\/verify$/);
  summary.verify = await page.locator('main p').first().textContent();
  const csv = await page.request.get(`${adminUrl}${exportHref}`);
  summary.csv = { status: csv.status(), type: csv.headers()['content-type'], head: (await csv.text()).split('\n').slice(0, 2) };

  // The live tail: an open audit page gains the records of a restart asked through the admin API.
  await page.goto(`${base}audit?upstream=a`);
  const before = await page.locator('#records tbody tr').count();
  const asked = await fetch(`${adminUrl}/upstreams/a/restart`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: '{}',
  });
  summary.tail = { restart: asked.status };
  // The methods of the rows the tail added (the status line counts them).
  await page.evaluate(() => {
    window.__tailAdded = () => {
      const count = parseInt(document.getElementById('tail-status')?.textContent ?? '', 10) || 0;
      return Array.from(document.querySelectorAll('#records tbody tr')).slice(0, count)
        .map((row) => row.querySelector('td:nth-of-type(3)')?.textContent);
    };
  });
  await page.waitForFunction(() => window.__tailAdded().includes('upstream.restarted'), null, { timeout: 30000 });
  summary.tail.before = before;
  summary.tail.after = await page.locator('#records tbody tr').count();
  summary.tail.status = await page.locator('#tail-status').textContent();
  summary.tail.added = await page.evaluate(() => window.__tailAdded());
  await press(page, { css: '#records tbody tr th a' }, /\/audit\/record\//);
  summary.tail.record = await page.locator('pre').textContent();
  step('audit');

  // Pins: the changed tool, approved; then listed in the catalog again.
  await page.goto(`${base}pins`);
  summary.changed_pins = await page.locator('h2:has-text("Changed") + table tbody tr').count();
  summary.diff = {
    removed: (await page.locator('table.diff td.del').allTextContents()).filter((t) => t.trim()),
    added: (await page.locator('table.diff td.ins').allTextContents()).filter((t) => t.trim()),
  };
  await inspect(page, 'pins');
  await press(page, 'Approve helper', /notice=/);
  summary.approve_notice = await page.locator('.notice').textContent();
  await page.goto(`${base}catalog`);
  await submit(page, 'input[name=query]', 'helper', /query=helper/);
  summary.catalog_found = await page.locator('details.tool summary code').allTextContents();
  await inspect(page, 'catalog');
  step('pin approved');

  await page.goto(`${base}hosts`);
  await inspect(page, 'hosts');

  // A reload the daemon refuses shows why, with the file and line.
  appendFileSync(configFile, '\n[upstreams.broken]\ncommand = 5\n');
  await page.goto(`${base}config`);
  await press(page, 'Reload the config', /notice=/);
  summary.reload_notice = await page.locator('.notice').textContent();
  summary.reload_error = await page.locator('.error').textContent();
  summary.config_file = await page.locator('pre.file').textContent();
  await inspect(page, 'config');
  step('refused reload shown');

  // Forged requests: no CSRF token, another origin, no origin; a cross-site form in the browser.
  const cookie = (await context.cookies()).find((c) => c.name === 'mcpmux_console');
  const forge = async (headers, body) =>
    (await fetch(`${base}upstreams/restart`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie: `${cookie.name}=${cookie.value}`, 'content-type': 'application/x-www-form-urlencoded', ...headers },
      body,
    })).status;
  const csrf = await page.locator('input[name=csrf]').first().inputValue();
  summary.forged = {
    no_csrf: await forge({ origin: adminUrl }, 'name=b'),
    wrong_csrf: await forge({ origin: adminUrl }, 'csrf=forged&name=b'),
    other_origin: await forge({ origin: 'http://evil.example' }, `csrf=${csrf}&name=b`),
    no_origin: await forge({}, `csrf=${csrf}&name=b`),
    genuine: await forge({ origin: adminUrl }, `csrf=${csrf}&name=b`),
  };
  const evil = await context.newPage();
  await evil.route('http://evil.example/**', (route) => route.fulfill({
    contentType: 'text/html',
    body: `<!doctype html><title>evil</title><form method="post" action="${base}upstreams/restart"><input name="csrf" value="x"><input name="name" value="b"><button>go</button></form>`,
  }));
  await evil.goto('http://evil.example/');
  const [crossSite] = await Promise.all([
    evil.waitForResponse((r) => r.url().includes('/upstreams/restart')),
    evil.click('button'),
  ]);
  summary.cross_site_form = crossSite.status();
  step('forgeries refused');

  // Signing out ends the session.
  await page.goto(base);
  await press(page, 'Sign out', /\/console\/login/);
  await page.goto(`${base}pins`);
  summary.after_sign_out = new URL(page.url()).pathname;
  summary.csp_errors = csp;
  summary.ok = true;
} finally {
  await browser.close();
}
console.log(JSON.stringify(summary));
