// Browser test of the job queue in Debian's headless Chromium, against the release build, on a
// simulated node of two cards without background jobs.
//
// A member queues a job needing both cards while another member holds one in a booking: the
// queue page says why it waits and when it should start. The booking is given back: the job
// runs, the dashboard shows the queue job on its cards, and it ends as completed. The member
// sees their use in the fair-share table. "When would it start?" answers without queueing.

import assert from 'node:assert/strict';
import {
  scenario, ensureUnixAccount, watchedPage, logIn, bookNow, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const ACCOUNT = 'lanes-test-job';
ensureUnixAccount(ACCOUNT);
const { server, url, browser, failures } = await scenario({
  users: [
    ['ada', 'ada passphrase', ['--unix-user', ACCOUNT, '--display-name', 'Ada']],
    ['bob', 'bob passphrase', ['--display-name', 'Bob']],
  ],
  gpus: 2,
  extra: ['--sim-background', 'false'],
});
// Shared by the steps below, which run in order.
let bob, bobLogin, bobPage, gpus, booking, page, form, live, row, released, dash, cookies, ended, standings;

test('a job waiting for cards says why and when it should start', async () => {
  bob = await browser.newContext();
  bobLogin = await bob.request.post(url + '/api/v1/auth/login',
    { data: { username: 'bob', password: 'bob passphrase' } });
  assert.equal(bobLogin.status(), 200);
  bobPage = await bob.newPage();
  gpus = await (await bob.request.get(url + '/api/v1/gpus')).json();
  booking = await bookNow(bobPage, url, gpus[0].uuid, 600_000);

  page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  await page.click('nav >> text=Queue');
  await page.waitForURL(url + '/queue');
  form = page.locator('[data-testid=submit-queue]');
  await form.locator('input').nth(0).fill('2');
  await form.locator('input').nth(1).fill('30m');
  await form.locator('input').nth(2).fill(`sh -c 'echo "on $CUDA_VISIBLE_DEVICES"; sleep 15'`);
  await form.locator('input').nth(4).fill('two-card job');
  await form.locator('button[type=submit]').click();
  live = page.locator('[data-testid=queue-live]');
  row = live.locator('tr', { hasText: 'two-card job' });
  await row.filter({ hasText: 'needs 2 cards, 1 free' }).waitFor();
  assert.match(await row.textContent(), /pending · #1 in line/);
  assert.match(await row.textContent(), /estimated start [A-Z][a-z]{2} \d{1,2} [A-Z][a-z]{2} \d\d:\d\d/);
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
});

test('a bad submission shows the reason and queues nothing', async () => {
  // A bad submission shows the server's reason and queues nothing.
  await form.locator('input').nth(0).fill('3');
  await form.locator('button[type=submit]').click();
  await form.getByRole('alert').filter({ hasText: 'the pool has 2' }).waitFor();
  assert.equal(await live.locator('tbody tr').count(), 1);
  // So do 20 cards (the server's limit) and a time limit without its unit (once read as hours).
  await form.locator('input').nth(0).fill('20');
  await form.locator('button[type=submit]').click();
  await form.getByRole('alert').filter({ hasText: /1 to 8 GPUs|the pool has/ }).waitFor();
  await form.locator('input').nth(0).fill('1');
  await form.locator('input').nth(1).fill('2');
  await form.locator('button[type=submit]').click();
  await form.getByRole('alert').filter({ hasText: 'a duration with its unit: 4h, 90m or 1h30m' }).waitFor();
  assert.equal(await live.locator('tbody tr').count(), 1);
  await form.locator('input').nth(0).fill('2');
  await form.locator('input').nth(1).fill('30m');
  // An image that is an option (a flag smuggled in where the image goes): refused beside the
  // form before anything is sent, nothing queued.
  await form.locator('[data-testid=queue-image]').fill('--privileged');
  await form.locator('button[type=submit]').click();
  await form.getByRole('alert').filter({ hasText: '"--privileged" is not an image' }).waitFor();
  assert.equal(await live.locator('tbody tr').count(), 1);
  await form.locator('[data-testid=queue-image]').fill('');
});

test('"When would it start?" answers beside the form and queues nothing', async () => {
  // Two cards for 30 minutes: one of them is Bob's for ten minutes yet, and the two-card job
  // ahead takes both at his booking's end, so this one would start after it; booking instead
  // gives the first hour both are free.
  await form.locator('input').nth(0).fill('2');
  await form.locator('input').nth(1).fill('30m');
  await form.locator('[data-testid=forecast]').click();
  const answer = form.locator('[data-testid=forecast-answer]');
  await answer.waitFor();
  const said = await answer.textContent();
  // Should it fail, what the queue and the cards looked like (the answer depends on both).
  const seen = async () => JSON.stringify({
    said,
    queue: await (await page.request.get(url + '/api/v1/queue')).json(),
    gpus: await (await page.request.get(url + '/api/v1/gpus')).json(),
  });
  assert.match(said, /^If you queue this now: likely start .+, and by .+ nine times in ten\. /, await seen());
  assert.match(said, /The earliest slot you could book instead: .+ on /);
  assert.equal(await live.locator('tbody tr').count(), 1);
});

test('the job starts once the booking is given back, on both cards', async () => {
  released = await bob.request.delete(url + `/api/v1/bookings/${booking.id}`);
  assert.equal(released.status(), 200);
  await row.filter({ hasText: 'running' }).waitFor();
  assert.match(await row.textContent(), new RegExp(`GPU 0 · ${gpus[0].node}, GPU 1 · ${gpus[1].node}`));
});

test('the dashboard shows the queue job on its cards', async () => {
  dash = await browser.newPage();
  cookies = await page.context().cookies();
  await dash.context().addCookies(cookies);
  await dash.goto(url + '/');
  await dash.locator(`.gpu-card[data-uuid="${gpus[1].uuid}"] [data-testid=holder]`)
    .filter({ hasText: /Queue job #\d+ of Ada/ }).waitFor();
});

test('it ends as completed and the fair-share table lists its owner', async () => {
  ended = page.locator('[data-testid=queue-ended] tr', { hasText: 'two-card job' });
  // The job sleeps 15 s from its start two steps ago and the page looks every 2 s: a 15 s
  // wait begun after the dashboard step passed only by the time that step took.
  await ended.filter({ hasText: 'completed' }).waitFor({ timeout: 30_000 });
  standings = page.locator('[data-testid=standings]');
  await standings.locator('tr', { hasText: 'ada' }).waitFor();
  assert.match(await standings.locator('tr', { hasText: 'ada' }).textContent(), /50\.0%/);
});

test('no errors in the pages but the provoked one', async () => {
  assertOnlyProvokedErrors(failures, [422], 2);
});
