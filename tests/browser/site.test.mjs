// The release binary is the whole product: started from an empty directory, with no site
// folder anywhere near it, it serves pages that hydrate and go live, its bundle precompressed
// and cached for good under a versioned address, everything else revalidated.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, stopServer, launchBrowser, watchedPage, freshDataDir, addUser, logIn } from './lib.mjs';

const empty = mkdtempSync(join(tmpdir(), 'lanes-empty-'));
const dataDir = freshDataDir();
addUser(dataDir, 'ada', 'correct horse battery');
const server = await startServer({ dataDir, gpus: 2, cwd: empty });
const browser = await launchBrowser();
const failures = [];
const page = await watchedPage(browser, failures);
after(async () => {
  await browser.close();
  await stopServer(server.child);
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(empty, { recursive: true, force: true });
});

let bundle;

test('from an empty directory the dashboard hydrates and goes live', async () => {
  assert.deepEqual(readdirSync(empty), [], 'the server wrote nothing into its directory');
  await logIn(page, server.url, 'ada', 'correct horse battery');
  await page.locator('[data-testid=link-status]', { hasText: 'live' }).waitFor({ timeout: 30_000 });
  assert.equal(await page.locator('.gpu-card').count(), 2);
  // The stylesheet applied: a card is laid out as a box, not as inline text.
  const display = await page.locator('.gpu-card').first().evaluate((e) => getComputedStyle(e).display);
  assert.notEqual(display, 'inline');
  assert.deepEqual(failures, []);
});

test('the bundle has a versioned address, brotli, and a year of caching', async () => {
  const html = await (await page.request.get(server.url + '/')).text();
  const m = html.match(/href="(\/pkg\/[0-9a-f]{16}\/)lanes\.js"/);
  assert.ok(m, 'the page names a versioned bundle');
  bundle = m[1];
  for (const [file, type] of [['lanes_bg.wasm', 'application/wasm'], ['lanes.js', 'text/javascript'], ['lanes.css', 'text/css']]) {
    const resp = await fetch(server.url + bundle + file, { headers: { 'accept-encoding': 'br, gzip' } });
    assert.equal(resp.status, 200, file);
    assert.equal(resp.headers.get('content-encoding'), 'br', file);
    assert.equal(resp.headers.get('cache-control'), 'public, max-age=31536000, immutable', file);
    assert.ok(resp.headers.get('content-type').startsWith(type), file);
    await resp.arrayBuffer();
  }
  const gz = await fetch(server.url + bundle + 'lanes.js', { headers: { 'accept-encoding': 'gzip' } });
  assert.equal(gz.headers.get('content-encoding'), 'gzip');
});

test('other files revalidate with an ETag, and an old build\'s bundle is gone', async () => {
  const icon = await fetch(server.url + '/favicon.svg');
  assert.equal(icon.status, 200);
  assert.equal(icon.headers.get('cache-control'), 'no-cache');
  const again = await fetch(server.url + '/favicon.svg', { headers: { 'if-none-match': icon.headers.get('etag') } });
  assert.equal(again.status, 304);
  const old = await fetch(server.url + '/pkg/0000000000000000/lanes.js');
  assert.equal(old.status, 404);
  // A page that does not exist, asked by a signed-in member: the app's own "not found" page.
  const page404 = await page.request.get(server.url + '/no/such/page');
  assert.equal(page404.status(), 404);
  assert.match(await page404.text(), /<html/);
});

test('the dashboard loads no other page; a page loads its own part when opened', async () => {
  // What a page fetched of the bundle: `names`, and of those, what it asked for to run now
  // (not a low-priority prefetch of a page it links to).
  const fetched = (p) => {
    const names = [];
    const needed = [];
    p.on('request', (r) => {
      if (!r.url().includes('/pkg/')) return;
      const name = r.url().split('/').pop();
      names.push(name);
      if (r.headers()['sec-purpose'] !== 'prefetch') needed.push(name);
    });
    return { names, needed };
  };
  const fresh = await browser.newContext();
  await fresh.addCookies(await page.context().cookies());
  const first = await fresh.newPage();
  first.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  const { names, needed } = fetched(first);
  await first.goto(server.url + '/');
  await first.locator('html[data-live]').waitFor({ state: 'attached' });
  assert.ok(needed.includes('lanes_bg.wasm'), needed.join(' '));
  assert.deepEqual(needed.filter((n) => n.startsWith('split_')), [], 'the dashboard needed no other page');
  // Once live, the pages of the top bar come at low priority; the admin page, not linked for a
  // member, never does.
  await first.waitForFunction(() => document.querySelectorAll('link[rel=prefetch]').length > 0);
  // By its link: the calendar's part is there (prefetched, or fetched now) and the page draws.
  await first.click('nav a[href="/calendar"]');
  await first.locator('[data-testid=calendar] .cal-cell').first().waitFor();
  assert.ok(names.some((n) => /^split_.*calendar.*\.wasm$/.test(n)), names.join(' '));
  assert.ok(!names.some((n) => /^split_.*admin/.test(n)), 'the admin page did not come');
  // Opened directly: the server names the page's parts in its head, and the page goes live.
  const html = await (await fresh.request.get(server.url + '/history')).text();
  assert.match(html, /<link [^>]*href="\/pkg\/[0-9a-f]{16}\/split_[^"]*history[^"]*\.wasm" rel="preload"/);
  const direct = await fresh.newPage();
  direct.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  await direct.goto(server.url + '/history');
  await direct.locator('html[data-live]').waitFor({ state: 'attached' });
  await fresh.close();
  assert.deepEqual(failures, []);
});
