// Browser test of the job queue in Debian's headless Chromium, against the release build, on a
// simulated node of two cards without background jobs.
//
// A member queues a job needing both cards while another member holds one in a booking: the
// queue page says why it waits and when it should start. The booking is given back: the job
// runs, the dashboard shows the queue job on its cards, and it ends as completed. The member
// sees their use in the fair-share table.

import { rmSync } from 'node:fs';
import assert from 'node:assert/strict';
import {
  freshDataDir, addUser, ensureUnixAccount, startServer, stopServer, launchBrowser, watchedPage, logIn, bookNow, step,
  assertOnlyProvokedErrors,
} from './lib.mjs';

const ACCOUNT = 'lanes-test-job';
ensureUnixAccount(ACCOUNT);
const dataDir = freshDataDir();
addUser(dataDir, 'ada', 'ada passphrase', ['--unix-user', ACCOUNT, '--display-name', 'Ada']);
addUser(dataDir, 'bob', 'bob passphrase', ['--display-name', 'Bob']);
const server = await startServer({ dataDir, gpus: 2, extra: ['--sim-background', 'false'] });
const url = server.url;
const browser = await launchBrowser();
const failures = [];

try {
  const bob = await browser.newContext();
  const bobLogin = await bob.request.post(url + '/api/v1/auth/login',
    { data: { username: 'bob', password: 'bob passphrase' } });
  assert.equal(bobLogin.status(), 200);
  const bobPage = await bob.newPage();
  const gpus = await (await bob.request.get(url + '/api/v1/gpus')).json();
  const booking = await bookNow(bobPage, url, gpus[0].uuid, 600_000);

  const page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  await page.click('nav >> text=Queue');
  await page.waitForURL(url + '/queue');
  const form = page.locator('[data-testid=submit-queue]');
  await form.locator('input').nth(0).fill('2');
  await form.locator('input').nth(1).fill('0.5');
  await form.locator('input').nth(2).fill(`sh -c 'echo "on $CUDA_VISIBLE_DEVICES"; sleep 3'`);
  await form.locator('input').nth(4).fill('two-card job');
  await form.locator('button[type=submit]').click();
  const live = page.locator('[data-testid=queue-live]');
  const row = live.locator('tr', { hasText: 'two-card job' });
  await row.filter({ hasText: 'needs 2 cards, 1 free' }).waitFor();
  assert.match(await row.textContent(), /pending · #1 in line/);
  assert.match(await row.textContent(), /estimated start \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  step('a job waiting for cards says why and when it should start');

  // A bad submission shows the server's reason and queues nothing.
  await form.locator('input').nth(0).fill('3');
  await form.locator('button[type=submit]').click();
  await form.getByRole('alert').filter({ hasText: 'the pool has 2 card(s)' }).waitFor();
  assert.equal(await live.locator('tbody tr').count(), 1);
  step('a bad submission shows the reason and queues nothing');

  const released = await bob.request.delete(url + `/api/v1/bookings/${booking.id}`);
  assert.equal(released.status(), 200);
  await row.filter({ hasText: 'running' }).waitFor();
  assert.match(await row.textContent(), new RegExp(gpus[0].uuid.slice(0, 12)));
  step('the job starts once the booking is given back, on both cards');

  const dash = await browser.newPage();
  const cookies = await page.context().cookies();
  await dash.context().addCookies(cookies);
  await dash.goto(url + '/');
  await dash.locator(`.gpu-card[data-uuid="${gpus[1].uuid}"] [data-testid=holder]`)
    .filter({ hasText: /Queue job #\d+ of Ada/ }).waitFor();
  step('the dashboard shows the queue job on its cards');

  const ended = page.locator('[data-testid=queue-ended] tr', { hasText: 'two-card job' });
  await ended.filter({ hasText: 'completed' }).waitFor({ timeout: 15_000 });
  const standings = page.locator('[data-testid=standings]');
  await standings.locator('tr', { hasText: 'ada' }).waitFor();
  assert.match(await standings.locator('tr', { hasText: 'ada' }).textContent(), /50\.0%/);
  step('it ends as completed and the fair-share table lists its owner');

  assertOnlyProvokedErrors(failures, [422], 1);
  step('no errors in the pages but the provoked one');
} finally {
  await browser.close();
  await stopServer(server.child);
  rmSync(dataDir, { recursive: true, force: true });
}
console.log('queue browser test passed');
