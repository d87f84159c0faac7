// A person signing in through their host, in a real browser: Debian's chromium driven by
// playwright-core (from the npm test peers). The Python SDK host of tests/interop/signin.rs runs
//
//   node signin_browser.mjs HOST_TOKEN USER URL
//
// (with PEERS_NODE_MODULES naming the peers' node_modules) when mcpmux asks it, by a URL-mode
// elicitation, to send its person to URL: mcpmux's sign-in page. The script proves who the person
// is with the host's token, picks USER at the test authorization server, and waits for mcpmux's
// "Signed in" page; it exits 0 then, else prints what the page said and exits 1.

import { createRequire } from 'node:module';
import { join } from 'node:path';

const [token, user, url] = process.argv.slice(2);
const require = createRequire(join(process.env.PEERS_NODE_MODULES, 'noop.js'));
const { chromium } = require('playwright-core');

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
let status = 1;
let page;
try {
  page = await browser.newPage();
  await page.goto(url);
  await page.fill('#token', token);
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
  // The test authorization server asks who signs in.
  await page.fill('#user', user);
  await Promise.all([page.waitForNavigation({ url: /\/oauth\/callback/ }), page.click('#approve')]);
  const heading = await page.textContent('h1');
  const text = await page.textContent('body');
  process.stderr.write(`[signin-browser] ${heading}: ${text}\n`);
  status = heading === 'Signed in' ? 0 : 1;
} catch (e) {
  const at = page ? `${page.url()}: ${await page.textContent('body').catch(() => '')}` : '';
  process.stderr.write(`[signin-browser] ${e}\n[signin-browser] the page was ${at}\n`);
} finally {
  await browser.close();
}
process.exit(status);
