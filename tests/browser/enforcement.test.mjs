// Browser test of jobs and enforcement in Debian's headless Chromium, against the release build,
// on a simulated node without background jobs.
//
// A member with a booking runs a command from the Jobs page and watches its output arrive live
// until the job is over. Meanwhile a process nobody booked sits on GPU 0 (injected by the admin):
// the dashboard shows it red. The admin finds it under "Unbooked GPU use", switches the policy
// to terminate with a 1 s grace, and sees it ended.

import assert from 'node:assert/strict';
import {
  scenario, ensureUnixAccount, watchedPage, logIn, openLive, bookNow, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const ACCOUNT = 'lanes-test-job';
ensureUnixAccount(ACCOUNT);
const { url, browser, failures } = await scenario({
  users: [
    ['root', 'admin passphrase', ['--admin']],
    ['ada', 'ada passphrase', ['--unix-user', ACCOUNT, '--display-name', 'Ada']],
  ],
  gpus: 2,
  extra: ['--sim-background', 'false'],
});
// Shared by the steps below, which run in order.
let page, gpus, booking, form, log, row, admin, adminLogin, injected, pid, card0, adminPage, violations, policy, ended;

test('a job runs from the Jobs page and its output arrives live until it is over', async () => {
  page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  booking = await bookNow(page, url, gpus[1].uuid, 600_000);

  await page.click('nav >> text=Jobs');
  await page.waitForURL(url + '/jobs');
  form = page.locator('[data-testid=submit-job]');
  await form.locator(`select option[value="${booking.id}"]`).waitFor({ state: 'attached' });
  await form.locator('select').first().selectOption(String(booking.id));
  await form.locator('input').first().fill(`sh -c 'echo "hello from job $LANES_JOB_ID on $CUDA_VISIBLE_DEVICES"; sleep 2; echo bye'`);
  // An image that is no image is refused beside the form, before anything is sent.
  await form.locator('[data-testid=job-image]').fill('alpine; id');
  await form.locator('button[type=submit]').click();
  await form.getByRole('alert').filter({ hasText: '"alpine; id" is not an image' }).waitFor();
  await form.locator('[data-testid=job-image]').fill('');
  await form.locator('button[type=submit]').click();
  log = page.locator('[data-testid=log]');
  await log.filter({ hasText: `on ${gpus[1].uuid}` }).waitFor();
  await log.filter({ hasText: 'bye' }).waitFor({ timeout: 15_000 });
  await page.getByText('the job is over').waitFor();
  row = page.locator('[data-testid=jobs] tbody tr').first();
  await page.locator('[data-testid=refresh-jobs]').click();
  await row.filter({ hasText: 'completed (exit 0)' }).waitFor();
});

test('the dashboard shows the unbooked process in red', async () => {
  // A process on GPU 0 that nobody booked.
  admin = await browser.newContext();
  adminLogin = await admin.request.post(url + '/api/v1/auth/login',
    { data: { username: 'root', password: 'admin passphrase' } });
  assert.equal(adminLogin.status(), 200);
  injected = await admin.request.post(url + '/api/v1/sim/processes',
    { data: { gpu: gpus[0].uuid, user: 'mallory', command: 'python' } });
  assert.equal(injected.status(), 201, await injected.text());
  ({ pid } = await injected.json());

  await page.click('nav >> text=Dashboard');
  await page.waitForURL(url + '/');
  card0 = page.locator(`.gpu-card[data-uuid="${gpus[0].uuid}"]`);
  await card0.locator('tr.unbooked', { hasText: String(pid) }).waitFor();
  assert.match(await card0.locator('tr.unbooked').textContent(), /mallory.*python.*UNBOOKED/);
  assert.equal(await card0.evaluate((e) => e.classList.contains('violated')), true);
});

test('the admin sees the violation and sets the policy to terminate', async () => {
  adminPage = await admin.newPage({ viewport: { width: 1400, height: 900 } });
  adminPage.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  await openLive(adminPage, url + '/admin/violations');
  violations = adminPage.locator('[data-testid=violations]');
  await violations.locator('tr', { hasText: 'mallory' }).waitFor();
  assert.match(await violations.locator('tr', { hasText: 'mallory' }).textContent(), /still running.*observed/);
  await adminPage.click('[data-testid=admin-nav] >> text=Policy and settings');
  policy = adminPage.locator('[data-testid=policy]');
  await policy.locator('select[name=watchdog]').selectOption('terminate');
  await policy.locator('input[name=violation_grace_s]').fill('1');
  await policy.locator('button[type=submit]').click();
  await adminPage.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  await adminPage.click('[data-testid=admin-nav] >> text=Unbooked use');
});

test('under terminate the process is ended after the grace period', async () => {
  ended = false;
  for (let i = 0; i < 40 && !ended; i++) {
    await adminPage.waitForTimeout(250);
    await adminPage.locator('section', { hasText: 'Unbooked GPU use' }).locator('button:text("Refresh")').click();
    // SIGTERM marks it "sent SIGTERM"; a process still there after the grace gets SIGKILL and
    // is marked so. A slow refresh (a loaded machine) can miss the first mark: either ends it.
    ended = /sent SIGTERM|sent SIGKILL/.test(await violations.locator('tr', { hasText: 'mallory' }).textContent());
  }
  assert.ok(ended, 'the violation shows terminated (or killed after the grace)');
  await card0.locator('tr.unbooked').waitFor({ state: 'detached' });
  if (process.env.SCREENSHOT) await adminPage.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
});

test('no errors in the pages', async () => {
  assertOnlyProvokedErrors(failures, [], 0);
});
