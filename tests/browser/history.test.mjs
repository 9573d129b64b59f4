// Browser test of the history page in Debian's headless Chromium, against the release build.
//
// A member books a card, lets the simulated fleet run for a few seconds (the writer flushes
// every 5 s), opens History, sees a heatmap row per card with cells in the last hour and a
// chart per card, zooms and pages, and finds their booking in the usage report, whose CSV
// downloads with a header row.

import assert from 'node:assert/strict';
import {
  scenario, watchedPage, logIn, bookNow, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const { server, url, browser, failures } = await scenario({
  users: [
    ['ada', 'ada passphrase', ['--display-name', 'Ada']],
  ],
  gpus: 4,
});
// Shared by the steps below, which run in order.
let page, gpus, booking, heatmap, cells, shown, before, row, users, href, csv;

test('the heatmap has a row per card with readings, and a chart per card', async () => {
  page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  booking = await bookNow(page, url, gpus[2].uuid, 3_600_000);
  // Two flushes of the history writer.
  await page.waitForTimeout(11_000);

  await page.click('nav >> text=History');
  await page.waitForURL(url + '/history');
  await page.click('[data-testid=range] button:text("1 h")');
  heatmap = page.locator('[data-testid=heatmap]');
  await heatmap.locator('rect[fill^="hsl"]').first().waitFor();
  assert.equal(await heatmap.locator('text.heat-label').count(), 4);
  cells = await heatmap.locator('rect[fill^="hsl"]').count();
  assert.ok(cells >= 4, `cells in the last hour: ${cells}`);
  assert.equal(await page.locator('.history-chart').count(), 4);
  assert.match(await page.locator('.history-chart figcaption').first().textContent(), /mean \d+ %/);
});

test('zoom, paging and presets change the range and the resolution', async () => {
  shown = () => page.locator('main > p.muted').first().textContent();
  before = await shown();
  await page.click('button[aria-label="Zoom in"]');
  await page.waitForFunction((b) => document.querySelector('main > p.muted').textContent !== b, before);
  await page.click('button[aria-label="Earlier"]');
  // A day at 240 points reads minute buckets (none may be whole yet on a server this young).
  await page.click('[data-testid=range] button:text("24 h")');
  await page.getByRole('heading', { name: 'All cards · buckets of 360 s (1m data)' }).waitFor();
});

test('the usage report lists the booking and the CSV downloads', async () => {
  row = page.locator('[data-testid=report-bookings] tbody tr', { hasText: `#${booking.id}` });
  await row.waitFor();
  assert.match(await row.textContent(), /ada/);
  users = page.locator('[data-testid=report-users] tbody tr', { hasText: 'ada' });
  await users.waitFor();
  href = await page.locator('a:text("CSV")').first().getAttribute('href');
  csv = await page.request.get(url + href);
  assert.equal(csv.status(), 200);
  assert.match(csv.headers()['content-type'], /text\/csv/);
  assert.match(await csv.text(), /^user,gpu_hours_booked,gpu_hours_used,gpu_hours_used_card_level,idle_booked_hours,violations,jobs,energy_kwh,cost,co2e_kg\r\nada,/);
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
});

test('no errors in the page', async () => {
  assertOnlyProvokedErrors(failures, [], 0);
});
