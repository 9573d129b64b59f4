// Browser test of the calendar's finding and keyboard booking, in Debian's headless Chromium.
//
// A member books two cards by keyboard only (Tab into the grid, arrows, Shift+arrows, Enter)
// and sees the booking drawn; then asks "Find a slot" for all four cards for two hours, which
// answers with the window after that booking, and books it in one click; then books "any 1"
// from the same form. Each booking is checked through the API, as the server has it.

import assert from 'node:assert/strict';
import {
  scenario, watchedPage, logIn, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const { url, browser, failures } = await scenario({
  users: [['ada', 'ada passphrase', ['--unix-user', 'ada', '--display-name', 'Ada']]],
  gpus: 4,
});

let page;
const mine = async () => {
  const answer = await page.request.get(url + '/api/v1/bookings');
  assert.equal(answer.status(), 200);
  return (await answer.json()).filter((b) => b.state === 'upcoming' || b.state === 'active');
};

test('two cards are booked by keyboard only', async () => {
  page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  await page.click('nav >> text=Calendar');
  await page.waitForURL(url + '/calendar');
  const grid = page.getByRole('grid');
  await grid.waitFor();
  // Today, the grid's one tab stop is now's hour (it once sat at midnight, 15 Tabs away).
  await page.locator(`.cal-cell[tabindex="0"][data-cell="${new Date().getHours()}"]`).first().waitFor();
  await page.click('button[aria-label=Later]');
  // The grid has one tab stop: the cursor's cell, first card at the day's first hour.
  const first = page.locator('.cal-cell[tabindex="0"]');
  await first.waitFor();
  assert.equal(await page.locator('.cal-cell[tabindex="0"]').count(), 1);
  await first.focus();
  // To tomorrow 10:00 on card 0, then Shift: one card down and an hour on (two cells).
  for (let i = 0; i < 10; i++) await page.keyboard.press('ArrowRight');
  await page.keyboard.press('Shift+ArrowDown');
  await page.keyboard.press('Shift+ArrowRight');
  const chosen = page.locator('.cal-cell[aria-selected="true"]');
  assert.equal(await chosen.count(), 4, 'two cards × two hours');
  const confirm = page.locator('[data-testid=confirm]');
  await confirm.waitFor();
  assert.match(await confirm.textContent(), /GPU 0 · \S+, GPU 1 · /);
  assert.match(await confirm.textContent(), /2\.0 h/);
  // The focused cell names its card and time for a screen reader.
  const focused = await page.evaluate(() => document.activeElement.getAttribute('aria-label'));
  assert.match(focused, /^GPU 1 · \S+, .*11:00/);
  await page.keyboard.press('Enter');
  await confirm.waitFor({ state: 'detached' });
  const booked = await mine();
  assert.equal(booked.length, 1);
  assert.equal(booked[0].gpus.length, 2);
  assert.equal((new Date(booked[0].end) - new Date(booked[0].start)) / 3600e3, 2);
  assert.equal(new Date(booked[0].start).getHours(), 10, 'tomorrow 10:00 in the viewer zone');
  await page.locator(`.cal-bar[data-booking="${booked[0].id}"]`).first().waitFor();
});

test('find a slot lists the earliest window and books it in a click', async () => {
  const panel = page.locator('[data-testid=find-slot]');
  await panel.locator('input[name=slot-gpus]').fill('4');
  await panel.locator('input[name=slot-duration]').fill('2h');
  // From tomorrow 09:00: the four cards are free until the keyboard booking at 10:00, too
  // short for two hours, so the earliest window starts when it ends, at 12:00.
  const tomorrow = new Date(Date.now() + 86400e3);
  const pad = (n) => String(n).padStart(2, '0');
  const day = `${tomorrow.getFullYear()}-${pad(tomorrow.getMonth() + 1)}-${pad(tomorrow.getDate())}`;
  await panel.locator('input[name=slot-from]').fill(`${day}T09:00`);
  await panel.locator('button', { hasText: 'Find' }).click();
  const rows = page.locator('[data-testid=slots] tbody tr');
  await rows.first().waitFor();
  const text = await rows.first().textContent();
  assert.match(text, /12:00/, text);
  assert.match(text, /GPU 0, GPU 1, GPU 2, GPU 3/, text);
  await rows.first().locator('button', { hasText: 'Book' }).click();
  await panel.locator('[role=status]').waitFor();
  const booked = await mine();
  assert.equal(booked.length, 2);
  const found = booked.find((b) => b.gpus.length === 4);
  assert.equal(new Date(found.start).getHours(), 12);
  assert.equal(new Date(found.start).getDate(), tomorrow.getDate());
});

test('"any N" books cards Lanes picks, from now', async () => {
  const panel = page.locator('[data-testid=find-slot]');
  await panel.locator('input[name=slot-gpus]').fill('1');
  await panel.locator('input[name=slot-duration]').fill('30m');
  await panel.locator('input[name=slot-from]').fill('');
  await panel.locator('button', { hasText: 'Book any' }).click();
  await panel.locator('[role=status]', { hasText: 'Booked 1 card' }).waitFor();
  const booked = await mine();
  assert.equal(booked.length, 3);
  assert.ok(booked.some((b) => b.state === 'active' && b.gpus.length === 1));
  // All four now cannot be had (one is taken for 30 minutes): the refusal comes with the
  // earliest windows "Find" would find, each a click from booked.
  await panel.locator('input[name=slot-gpus]').fill('4');
  await panel.locator('button', { hasText: 'Book any' }).click();
  await panel.locator('[role=alert]').waitFor();
  const offered = page.locator('[data-testid=slots] tbody tr');
  await offered.first().waitFor();
  assert.match(await offered.first().textContent(), /GPU 0, GPU 1, GPU 2, GPU 3/);
  assert.equal((await mine()).length, 3, 'nothing booked by the refusal');
  await panel.locator('input[name=slot-gpus]').fill('1');
  // A malformed duration is said in the form, with nothing sent.
  await panel.locator('input[name=slot-duration]').fill('soon');
  await panel.locator('button', { hasText: 'Find' }).click();
  await panel.locator('[role=alert]', { hasText: 'not a duration' }).waitFor();
  await page.screenshot({ path: '/tmp/lanes-find-slot.png', fullPage: true });
  assertOnlyProvokedErrors(failures, [409], 1);
});
