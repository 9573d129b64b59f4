// Browser test of the history page in Debian's headless Chromium, against the release build.
//
// A member books a card, lets the simulated fleet run for a few seconds (the writer flushes
// every 5 s), opens History, sees a heatmap row per card with cells in the last hour and a
// chart per card, zooms and pages, and finds their booking in the usage report, whose CSV
// downloads with a header row.

import { rmSync } from 'node:fs';
import assert from 'node:assert/strict';
import {
  freshDataDir, addUser, startServer, stopServer, launchBrowser, watchedPage, logIn, bookNow, step, assertOnlyProvokedErrors,
} from './lib.mjs';

const dataDir = freshDataDir();
addUser(dataDir, 'ada', 'ada passphrase', ['--display-name', 'Ada']);
const server = await startServer({ dataDir, gpus: 4 });
const url = server.url;
const browser = await launchBrowser();
const failures = [];

try {
  const page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  const gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  const booking = await bookNow(page, url, gpus[2].uuid, 3_600_000);
  // Two flushes of the history writer.
  await page.waitForTimeout(11_000);

  await page.click('nav >> text=History');
  await page.waitForURL(url + '/history');
  await page.click('[data-testid=range] button:text("1 h")');
  const heatmap = page.locator('[data-testid=heatmap]');
  await heatmap.locator('rect[fill^="hsl"]').first().waitFor();
  assert.equal(await heatmap.locator('text.heat-label').count(), 4);
  const cells = await heatmap.locator('rect[fill^="hsl"]').count();
  assert.ok(cells >= 4, `cells in the last hour: ${cells}`);
  assert.equal(await page.locator('.history-chart').count(), 4);
  assert.match(await page.locator('.history-chart figcaption').first().textContent(), /mean \d+ %/);
  step('the heatmap has a row per card with readings, and a chart per card');

  const shown = () => page.locator('main > p.muted').first().textContent();
  const before = await shown();
  await page.click('button[aria-label="Zoom in"]');
  await page.waitForFunction((b) => document.querySelector('main > p.muted').textContent !== b, before);
  await page.click('button[aria-label="Earlier"]');
  // A day at 240 points reads minute buckets (none may be whole yet on a server this young).
  await page.click('[data-testid=range] button:text("24 h")');
  await page.getByRole('heading', { name: 'All cards · buckets of 360 s (1m data)' }).waitFor();
  step('zoom, paging and presets change the range and the resolution');

  const row = page.locator('[data-testid=report-bookings] tbody tr', { hasText: `#${booking.id}` });
  await row.waitFor();
  assert.match(await row.textContent(), /ada/);
  const users = page.locator('[data-testid=report-users] tbody tr', { hasText: 'ada' });
  await users.waitFor();
  const href = await page.locator('a:text("CSV")').first().getAttribute('href');
  const csv = await page.request.get(url + href);
  assert.equal(csv.status(), 200);
  assert.match(csv.headers()['content-type'], /text\/csv/);
  assert.match(await csv.text(), /^user,gpu_hours_booked,gpu_hours_used,idle_booked_hours,violations,jobs\r\nada,/);
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  step('the usage report lists the booking and the CSV downloads');

  assertOnlyProvokedErrors(failures, [], 0);
  step('no errors in the page');
} finally {
  await browser.close();
  await stopServer(server.child);
  rmSync(dataDir, { recursive: true, force: true });
}
console.log('history browser test passed');
