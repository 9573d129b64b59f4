// Browser test of the dashboard in Debian's headless Chromium, against the release build.
//
// Creates a user with `lanes user add`, starts `target/release/lanes serve --gpus sim:4` on a
// random port with a fresh data dir, and checks: `/` sends a visitor to the login page; a wrong
// password is refused with a message; logging in leads back to the dashboard; every card is
// server-rendered; the page hydrates and goes live over the websocket; a value changes live;
// the page says it is reconnecting when the server goes away and goes live again when it is
// back; logging out ends the session. With SCREENSHOT=path it saves a screenshot there
// after SCREENSHOT_WAIT seconds of history (LANES_TEST_GPUS sets the fleet size).

import { rmSync, mkdirSync } from 'node:fs';
import { resolve, dirname } from 'node:path';
import assert from 'node:assert/strict';
import {
  root, freshDataDir, addUser, startServer as start, stopServer, launchBrowser, watchedPage,
} from './lib.mjs';
import { test, after } from 'node:test';

const dataDir = freshDataDir();
const GPUS = Number(process.env.LANES_TEST_GPUS || 4);
const startServer = (listen) =>
  start({ dataDir, listen, gpus: GPUS, poll: process.env.SCREENSHOT ? '1s' : '250ms' });

const USER = 'viewer';
const PASSWORD = 'viewer passphrase';
addUser(dataDir, USER, PASSWORD);
let server = await startServer('127.0.0.1:0');
const browser = await launchBrowser();
const failures = [];
// Shared by the steps below, which run in order.
let page, resp, html, readings, before, pathsBefore, overflow, port, real;

after(async () => {
  await browser.close();
  await stopServer(server.child);
  rmSync(dataDir, { recursive: true, force: true });
});

test('a wrong password is refused with a message', async () => {
  page = await watchedPage(browser, failures);

  // A visitor is sent to the login page, and brought back after logging in.
  await page.goto(server.url + '/');
  assert.match(new URL(page.url()).pathname, /^\/login$/);
  await page.fill('input[name=username]', USER);
  await page.fill('input[name=password]', 'not the password');
  await page.click('button[type=submit]');
  await page.getByText('Wrong username or password.').waitFor();
});

test('logging in leads to the dashboard', async () => {
  await page.fill('input[name=username]', USER);
  await page.fill('input[name=password]', PASSWORD);
  await page.click('button[type=submit]');
  await page.waitForURL(server.url + '/');
});

test('the server-rendered page has every card', async () => {
  // Server-rendered: the cards are in the HTML before any script runs.
  resp = await page.request.get(server.url + '/');
  html = await resp.text();
  assert.equal((html.match(/class="gpu-card/g) || []).length, GPUS, 'every card is server-rendered');
  // The recent history comes once, as the page's data; the browser draws it.
  assert.doesNotMatch(html, /<path[^>]* d="M/, 'no server-drawn chart paths');
});

test('the page hydrated and the websocket is live', async () => {
  await page.locator('[data-testid=link-status]', { hasText: 'live' }).waitFor({ timeout: 30_000 });
});

test(`${GPUS} GPU cards and the simulated-fleet banner are shown`, async () => {
  assert.equal(await page.locator('.gpu-card').count(), GPUS);
  await page.getByText('Simulated GPU fleet').waitFor();
});

test('values change live', async () => {
  readings = () => page.locator('.gpu-card .chart-value').allTextContents();
  before = (await readings()).join('|');
  await page.waitForFunction(
    (b) => [...document.querySelectorAll('.gpu-card .chart-value')].map((e) => e.textContent).join('|') !== b,
    before, { timeout: 10_000 });
});

test('charts redraw as ticks arrive', async () => {
  pathsBefore = await page.locator('.series-util .line').first().getAttribute('d');
  await page.waitForFunction(
    (b) => document.querySelector('.series-util .line').getAttribute('d') !== b,
    pathsBefore, { timeout: 10_000 });
});

test('fits a phone screen', async () => {
  if (process.env.SCREENSHOT) {
    await page.waitForTimeout(Number(process.env.SCREENSHOT_WAIT || 4) * 1000);
    mkdirSync(dirname(resolve(root, process.env.SCREENSHOT)), { recursive: true });
    await page.screenshot({ path: resolve(root, process.env.SCREENSHOT), fullPage: false });
    console.log(`screenshot saved to ${process.env.SCREENSHOT}`);
  }

  // Phone width: one column, no horizontal scrolling.
  await page.setViewportSize({ width: 390, height: 844 });
  overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow}px on a phone`);
});

test('shows that it is reconnecting when the server is gone', async () => {
  await page.setViewportSize({ width: 1400, height: 900 });

  // The server goes away: the page says it is reconnecting, then recovers when it is back.
  port = new URL(server.url).port;
  await stopServer(server.child);
  await page.locator('[data-testid=link-status]', { hasText: 'reconnecting' }).waitFor({ timeout: 10_000 });
});

test('goes live again when the server is back', async () => {
  server = await startServer(`127.0.0.1:${port}`);
  await page.locator('[data-testid=link-status]', { hasText: 'live' }).waitFor({ timeout: 30_000 });
});

test('logging out ends the session', async () => {
  await page.click('form.logout button');
  await page.waitForURL(/\/login$/);
  await page.goto(server.url + '/');
  assert.match(new URL(page.url()).pathname, /^\/login$/, 'the session ended');
});

test('no errors in the page', async () => {
  // Reconnect failures are expected console noise while the server is down.
  real = failures.filter((f) => !/WebSocket connection|ERR_CONNECTION_REFUSED/.test(f));
  assert.deepEqual(real, [], 'no page errors');
});
