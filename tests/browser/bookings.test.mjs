// Browser test of booking in Debian's headless Chromium, against the release build.
//
// An admin sets a weekly GPU-hours quota through the API. A member opens the calendar, moves
// to tomorrow, drags across two cards × three hours, sees the quota impact, books, and sees
// the booking on the calendar, in "My bookings" and on the dashboard cards. A second drag over
// the same cells is refused inline with the conflict. Then the member cancels the booking and
// the calendar is free again.

import assert from 'node:assert/strict';
import {
  scenario, watchedPage, logIn, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const { url, browser, failures } = await scenario({
  users: [
    ['root', 'admin passphrase', ['--admin']],
    ['ada', 'ada passphrase', ['--unix-user', 'ada', '--display-name', 'Ada']],
  ],
  gpus: 4,
});

/** Drags with the mouse from one calendar cell to another. */
async function drag(page, from, to) {
  const box = async ([row, cell]) => page
    .locator(`.cal-row:not(.cal-head)`).nth(row).locator(`.cal-cell[data-cell="${cell}"]`).boundingBox();
  const a = await box(from);
  const b = await box(to);
  await page.mouse.move(a.x + a.width / 2, a.y + a.height / 2);
  await page.mouse.down();
  await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2, { steps: 8 });
  await page.mouse.up();
}
// Shared by the steps below, which run in order.
let admin, login, quota, page, confirm, impact, bars, mine, row0, holder;

test('the calendar shows a row per GPU', async () => {
  // The admin's quota: 40 GPU-hours a week for everyone.
  admin = await browser.newContext();
  login = await admin.request.post(url + '/api/v1/auth/login',
    { data: { username: 'root', password: 'admin passphrase' } });
  assert.equal(login.status(), 200);
  quota = await admin.request.put(url + '/api/v1/quotas',
    { data: { default: { gpu_hours_per_week: 40 } } });
  assert.equal(quota.status(), 200, await quota.text());
  await admin.close();

  page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  await page.click('nav >> text=Calendar');
  await page.waitForURL(url + '/calendar');
  await page.locator('[data-testid=calendar] .cal-row:not(.cal-head)').nth(3).waitFor();
  assert.equal(await page.locator('[data-testid=calendar] .cal-row:not(.cal-head)').count(), 4);
});

test('dragging across two cards × three hours asks to confirm, with the quota impact', async () => {
  await page.click('button[aria-label=Later]');
  await drag(page, [0, 9], [1, 11]);
  confirm = page.locator('[data-testid=confirm]');
  await confirm.waitFor();
  assert.match(await confirm.textContent(), /GPU 0 · [\w-]+, GPU 1 · [\w-]+/);
  assert.match(await confirm.textContent(), /3\.0 h/);
  impact = await page.locator('[data-testid=quota-impact]').textContent();
  assert.match(impact, /Uses 6\.0 of your 40 GPU-hours a week/);
});

test('the booking shows on the calendar and in My bookings', async () => {
  await confirm.locator('input[name=note]').fill('ablation run');
  await confirm.locator('button:text("Book")').click();
  await confirm.waitFor({ state: 'detached' });
  bars = page.locator('.cal-bar', { hasText: 'Ada' });
  await bars.nth(1).waitFor();
  assert.equal(await bars.count(), 2);
  mine = page.locator('[data-testid=my-bookings] tbody tr');
  await mine.first().waitFor();
  assert.equal(await mine.count(), 1);
  assert.match(await mine.first().textContent(), /ablation run/);
  assert.match(await mine.first().textContent(), /GPU 0, GPU 1/);
});

test('the week view shows it too', async () => {
  await page.click('button:text("Week")');
  await page.getByRole('heading', { name: /^Week of / }).waitFor();
  await bars.nth(1).waitFor();
  assert.equal(await page.locator('[data-testid=calendar] .cal-row:not(.cal-head)').first().locator('.cal-cell').count(), 56);
  // Late in the evening a day has one bookable column left: the next 24 hours from now's
  // hour, with tomorrow's booking in them once they reach it.
  await page.getByTestId('next-24').click();
  await page.getByRole('heading', { name: /^Next 24 hours: / }).waitFor();
  const hours = page.locator('[data-testid=calendar] .cal-row:not(.cal-head)').first().locator('.cal-cell');
  assert.equal(await hours.count(), 24);
  assert.equal(await hours.first().getAttribute('class').then((c) => / past/.test(c)), false, 'the first hour is now\'s');
  assert.equal(await page.locator('.cal-cell[tabindex="0"][data-cell="0"]').count(), 1, 'the cursor at now');
  await page.click('button:text("Day")');
});

test('taken and past cells are refused in place, before "Book"', async () => {
  // The same cells again: the box says whose they are, and "Book" cannot be pressed.
  await drag(page, [1, 10], [1, 10]);
  const problem = confirm.locator('[data-testid=choice-problem]');
  await problem.filter({ hasText: /^GPU 1 · [\w-]+ is booked by Ada from .+ to .+: choose free cells/ }).waitFor();
  assert.equal(await confirm.locator('button:text("Book")').isDisabled(), true);
  await confirm.locator('button:text("Cancel")').click();
  // Yesterday is shaded and refused alike.
  await page.click('button[aria-label=Earlier]');
  await page.click('button[aria-label=Earlier]');
  assert.ok(await page.locator('.cal-cell.past').count() > 0);
  await drag(page, [2, 10], [2, 11]);
  await problem.filter({ hasText: 'That time has passed' }).waitFor();
  await confirm.locator('button:text("Cancel")').click();
  await page.click('button:text("Today")');
  await page.locator('[data-testid=legend]').filter({ hasText: 'maintenance' }).waitFor();
});

test('the dashboard card says who books the card next', async () => {
  row0 = await page.locator('.cal-row:not(.cal-head)').nth(0).getAttribute('data-uuid');
  await page.click('nav >> text=Dashboard');
  await page.waitForURL(url + '/');
  holder = page.locator(`.gpu-card[data-uuid="${row0}"] [data-testid=holder]`);
  await holder.filter({ hasText: 'next: Ada' }).waitFor();
});

test('cancelling frees the calendar', async () => {
  await page.click('nav >> text=Calendar');
  await page.waitForURL(url + '/calendar');
  await page.click('button[aria-label=Later]');
  await bars.nth(1).waitFor();
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  await page.locator('[data-testid=my-bookings] button:text("Cancel")').click();
  await page.getByText('No upcoming or active bookings.').waitFor();
  await bars.first().waitFor({ state: 'detached' });
  assert.equal(await page.locator('.cal-bar').count(), 0);
});

test('no errors in the page', async () => {
  // No refused booking: the page refuses taken cells before asking the server.
  assertOnlyProvokedErrors(failures, [409], 0);
});
