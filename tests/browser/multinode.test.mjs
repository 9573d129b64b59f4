// Browser test of a pool of nodes on one PostgreSQL: three nodes (`sim:4`, one of them
// managing only two of its cards) and a portal without cards, on a fresh database of the
// PostgreSQL at $LANES_TEST_POSTGRES (default: the machine's, 127.0.0.1:5432). The portal's
// dashboard shows the three nodes in sections with a summary each and a node filter; node b
// goes silent (SIGSTOP: it stops heartbeating, as a host cut off the network does) and is
// greyed with "unreachable since", then comes back. With SCREENSHOT=1 it saves
// docs/multi-node-partitioned.png.

import { rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import {
  root, freshDataDir, addUser, startServer, stopServer, launchBrowser, watchedPage, logIn,
} from './lib.mjs';
import { test, after } from 'node:test';

const server = process.env.LANES_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/postgres';
const dbName = `lanes_browser_${process.pid}`;
const psql = (sql) => execFileSync('psql', [server, '-qtAc', sql], { stdio: ['ignore', 'pipe', 'inherit'] });
psql(`CREATE DATABASE ${dbName}`);
const url = server.replace(/\/[^/?]*(\?.*)?$/, `/${dbName}$1`).replace(/undefined$/, '');

const dirs = [];
const dataDir = () => { const d = freshDataDir(); dirs.push(d); return d; };
const USER = 'poolviewer';
const PASSWORD = 'poolviewer passphrase';
addUser(dataDir(), USER, PASSWORD, ['--database-url', url]);

const common = (name) => ['--database-url', url, '--node-name', name, '--node-timeout', '3s', '--sim-background', 'false'];
const portal = await startServer({ dataDir: dataDir(), gpus: 'none', extra: common('portal') });
const nodes = {};
nodes.a = await startServer({ dataDir: dataDir(), gpus: 'sim:4', extra: common('a') });
nodes.b = await startServer({ dataDir: dataDir(), gpus: 'sim:4', extra: common('b') });
nodes.c = await startServer({ dataDir: dataDir(), gpus: 'sim:4:0,1', extra: common('c') });
const browser = await launchBrowser();
const failures = [];
let page;

after(async () => {
  await browser.close();
  nodes.b.child.kill('SIGCONT');
  for (const s of [portal, ...Object.values(nodes)]) await stopServer(s.child);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  psql(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
});

const shot = async (name) => {
  if (process.env.SCREENSHOT) await page.screenshot({ path: `${root}/docs/multi-node-${name}.png`, fullPage: true });
};

test('the portal shows three nodes, each in its section with a summary', async () => {
  page = await watchedPage(browser, failures);
  await logIn(page, portal.url, USER, PASSWORD);
  await page.locator('[data-testid=link-status]', { hasText: 'live' }).waitFor({ timeout: 30_000 });
  for (const name of ['a', 'b', 'c']) {
    await page.locator(`section.node[data-node=${name}] .gpu-card`).first().waitFor({ timeout: 15_000 });
  }
  assert.equal(await page.locator('section.node').count(), 3, 'a portal without cards has no section');
  assert.equal(await page.locator('section.node[data-node=a] .gpu-card').count(), 4);
  assert.match(await page.locator('section.node[data-node=a] [data-testid=node-state]').innerText(), /4 GPUs/);
});

test('cards a node leaves out are shown as unmanaged', async () => {
  const c = page.locator('section.node[data-node=c]');
  assert.equal(await c.locator('.gpu-card').count(), 4);
  assert.equal(await c.locator('.gpu-card.unmanaged').count(), 2);
  await c.locator('.badge.unmanaged').first().waitFor();
});

test('the node filter shows one node', async () => {
  await page.selectOption('[data-testid=node-filter]', 'b');
  await page.locator('section.node[data-node=a]').waitFor({ state: 'hidden' });
  assert.ok(await page.locator('section.node[data-node=b]').isVisible());
  await page.selectOption('[data-testid=node-filter]', '');
  await page.locator('section.node[data-node=a]').waitFor({ state: 'visible' });
});

test('a silent node is greyed with since when, and comes back', async () => {
  nodes.b.child.kill('SIGSTOP');
  const b = page.locator('section.node[data-node=b]');
  await page.locator('section.node.unreachable[data-node=b]').waitFor({ timeout: 15_000 });
  assert.match(await b.locator('[data-testid=node-state]').innerText(), /unreachable since (\w+ )?\d\d:\d\d \(last values shown\)/);
  assert.equal(await page.locator('section.node.unreachable').count(), 1, 'only b is greyed');
  // Greyed, its last values stay on its cards.
  assert.equal(await b.locator('.gpu-card').count(), 4);
  await shot('partitioned');
  nodes.b.child.kill('SIGCONT');
  await page.locator('section.node.unreachable').waitFor({ state: 'detached', timeout: 15_000 });
});

test('no errors reached the page', () => {
  assert.deepEqual(failures, []);
});
