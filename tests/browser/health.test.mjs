// Browser test of card health in Debian's headless Chromium, against the built site, on a
// simulated node without background jobs.
//
// A member holds GPU 0 when the admin injects an Xid 79 into it: the member's dashboard shows
// the card failing, with the Xid's meaning, and the history page its timeline. The admin clears
// it from the history page; the badge goes and the timeline says who cleared it.

import assert from 'node:assert/strict';
import { scenario, watchedPage, logIn, openLive, bookNow, assertOnlyProvokedErrors } from './lib.mjs';
import { test } from 'node:test';

const { url, browser, failures } = await scenario({
  users: [
    ['root', 'admin passphrase', ['--admin']],
    ['ada', 'ada passphrase', ['--display-name', 'Ada']],
  ],
  gpus: 3,
  extra: ['--sim-background', 'false'],
});
let page, gpus, card0, admin, adminPage;

test('an Xid 79 on a booked card shows it failing on the dashboard, with why', async () => {
  page = await watchedPage(browser, failures);
  await logIn(page, url, 'ada', 'ada passphrase');
  gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  await bookNow(page, url, gpus[0].uuid, 600_000);
  admin = await browser.newContext();
  const login = await admin.request.post(url + '/api/v1/auth/login',
    { data: { username: 'root', password: 'admin passphrase' } });
  assert.equal(login.status(), 200);
  // A member may not inject faults.
  const refused = await page.request.post(url + '/api/v1/sim/faults',
    { data: { fault: 'xid', gpu: gpus[0].uuid, xid: 79 } });
  assert.equal(refused.status(), 403);
  const injected = await admin.request.post(url + '/api/v1/sim/faults',
    { data: { fault: 'xid', gpu: gpus[0].uuid, xid: 79 } });
  assert.equal(injected.status(), 204, await injected.text());

  await openLive(page, url + '/');
  card0 = page.locator(`.gpu-card[data-uuid="${gpus[0].uuid}"]`);
  await card0.locator('[data-testid=health]', { hasText: 'failing' }).waitFor();
  assert.match(await card0.locator('[data-testid=health-reason]').textContent(),
    /Xid 79: GPU has fallen off the bus/);
  // The others stay healthy.
  const card1 = page.locator(`.gpu-card[data-uuid="${gpus[1].uuid}"]`);
  assert.equal(await card1.locator('[data-testid=health]').count(), 0);
  if (process.env.SCREENSHOT) await card0.screenshot({ path: process.env.SCREENSHOT });
});

test('the history page shows the card\'s health timeline, and a member cannot clear it', async () => {
  await page.click('nav >> text=History');
  await page.waitForURL(url + '/history');
  const timeline = page.locator('[data-testid=health-timeline]');
  await timeline.locator('h4', { hasText: 'GPU 0 · ' }).waitFor();
  assert.match(await timeline.textContent(), /failing.*Xid 79: GPU has fallen off the bus/s);
  assert.equal(await timeline.locator('[data-testid=clear-health]').count(), 0);
});

test('the admin clears it from the history page and the badge goes', async () => {
  adminPage = await admin.newPage({ viewport: { width: 1400, height: 900 } });
  adminPage.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  await openLive(adminPage, url + '/history');
  const timeline = adminPage.locator('[data-testid=health-timeline]');
  await timeline.locator('[data-testid=clear-health]').click();
  await adminPage.getByRole('status').filter({ hasText: 'Cleared' }).waitFor();
  await timeline.locator('td', { hasText: 'cleared by root' }).waitFor();
  await card0.locator('[data-testid=health]').waitFor({ state: 'detached', timeout: 15_000 });
  if (process.env.SCREENSHOT_HISTORY) {
    await timeline.screenshot({ path: process.env.SCREENSHOT_HISTORY });
  }
});

test('no errors in the pages', async () => {
  assertOnlyProvokedErrors(failures, [403], 0);
});
