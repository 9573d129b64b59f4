// Browser test of lending in Debian's headless Chromium, against the release build, on a
// simulated node of one card without background jobs.
//
// Ada's booking lends its card while idle. Bob queues a job from the queue page, ticking
// "Preemptible": it borrows the card. Ada's dashboard says "lent to queue job #N", shows the
// job's process with its SM share, and the booking's energy so far; she presses Reclaim: the job
// gets SIGTERM and waits in the queue again, and her card is hers.

import assert from 'node:assert/strict';
import { scenario, ensureUnixAccount, watchedPage, logIn, bookNow, assertOnlyProvokedErrors } from './lib.mjs';
import { test } from 'node:test';

const ACCOUNT = 'lanes-test-job';
ensureUnixAccount(ACCOUNT);
const { url, browser, failures } = await scenario({
  users: [
    ['boss', 'boss passphrase', ['--admin']],
    ['ada', 'ada passphrase', ['--display-name', 'Ada']],
    ['bob', 'bob passphrase', ['--unix-user', ACCOUNT, '--display-name', 'Bob']],
  ],
  gpus: 1,
  extra: ['--sim-background', 'false'],
});
let boss, policy, ada, bob, booking, job, holder;

test('a booking that lends its idle card runs a preemptible job queued from the queue page', async () => {
  // Admins: bookings idle after a second; a two-second grace.
  boss = await watchedPage(browser, failures);
  await logIn(boss, url, 'boss', 'boss passphrase');
  policy = await (await boss.request.get(url + '/api/v1/policy')).json();
  assert.equal((await boss.request.put(url + '/api/v1/policy', { data: { ...policy, idle_window_s: 1 } })).status(), 200);
  const settings = await (await boss.request.get(url + '/api/v1/queue/settings')).json();
  assert.equal((await boss.request.put(url + '/api/v1/queue/settings', { data: { ...settings, lending_grace_s: 2 } })).status(), 200);

  ada = await watchedPage(browser, failures);
  await logIn(ada, url, 'ada', 'ada passphrase');
  const gpus = await (await ada.request.get(url + '/api/v1/gpus')).json();
  const start = new Date();
  const made = await ada.request.post(url + '/api/v1/bookings', {
    data: { gpus: [gpus[0].uuid], start: start.toISOString(), end: new Date(+start + 600_000).toISOString(), lend: true },
  });
  assert.equal(made.status(), 201, await made.text());
  booking = await made.json();
  assert.equal(booking.lend, true);

  bob = await watchedPage(browser, failures);
  await logIn(bob, url, 'bob', 'bob passphrase');
  await bob.click('nav >> text=Queue');
  await bob.waitForURL(url + '/queue');
  const form = bob.locator('[data-testid=submit-queue]');
  await form.locator('input').nth(0).fill('1');
  await form.locator('input').nth(1).fill('1h');
  await form.locator('input').nth(2).fill(`sh -c 'trap "echo checkpointed; exit 0" TERM; while true; do sleep 0.2; done'`);
  await form.locator('input').nth(4).fill('borrower');
  await form.locator('input[name=preemptible]').check();
  await form.locator('button[type=submit]').click();
  const row = bob.locator('[data-testid=queue-live] tr', { hasText: 'borrower' });
  await row.filter({ hasText: `lent by booking #${booking.id}` }).waitFor({ timeout: 20_000 });
  assert.match(await row.textContent(), /preemptible/);
  job = Number(await row.getAttribute('data-queue-job'));
});

test("the holder's dashboard says the card is lent, shows the borrower's SM share and the booking's energy", async () => {
  await ada.goto(url + '/');
  holder = ada.locator('[data-testid=holder]').first();
  await holder.filter({ hasText: `lent to queue job #${job}` }).waitFor({ timeout: 20_000 });
  assert.match(await holder.textContent(), /Booked by Ada until/);
  await holder.filter({ hasText: /this booking: \d+\.\d+ kWh so far/ }).waitFor({ timeout: 20_000 });
  const procs = ada.locator('table.procs').first();
  await procs.locator('th', { hasText: 'SM' }).waitFor();
  await procs.locator('td.sm', { hasText: /\d+ %/ }).first().waitFor({ timeout: 10_000 });
  // The watchdog's lane for it: the borrowing job's, not unbooked use.
  await procs.locator('td.lane', { hasText: `job ${job}` }).waitFor({ timeout: 10_000 });
  if (process.env.SCREENSHOT) await ada.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
});

test('Reclaim sends the borrower back to the queue and the card is the holder’s again', async () => {
  // A taken-back card is lent again only after it sits idle for a whole idle window: ten
  // minutes from here on, so the test sees it stay the holder's.
  assert.equal((await boss.request.put(url + '/api/v1/policy', { data: { ...policy, idle_window_s: 600 } })).status(), 200);
  await holder.getByRole('button', { name: 'Reclaim' }).click();
  const back = await (async () => {
    for (let i = 0; i < 80; i++) {
      // Its owner sees its message.
      const view = await (await bob.request.get(url + '/api/v1/queue')).json();
      const found = view.jobs.find((j) => j.id === job);
      // Preempted for its holder and waiting again: requeued, not failed.
      if (found.state === 'requeued' && found.requeues === 1) return found;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error('the borrower did not go back to the queue');
  })();
  assert.match(back.message, /preempted/);
  // The job's output (plain text to a browser's request): it caught SIGTERM.
  const log = await (await bob.request.get(url + `/api/v1/jobs/${job}/log`)).text();
  assert.match(log, /checkpointed/);
  // The dashboard's bookings refresh every 10 s: the card is no longer lent.
  await ada.locator('[data-testid=holder]', { hasText: 'lent to queue job' }).waitFor({ state: 'detached', timeout: 20_000 });
  assertOnlyProvokedErrors(failures, [], 0);
});
