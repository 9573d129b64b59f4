// Browser test: the admin sections arrive with their data, drawn on the server in the viewer's
// time zone, against the release build in Debian's headless Chromium.
//
// An admin in Shanghai (the browser's zone, UTC+8 all year) logs in: the page keeps the zone
// in the `tz` cookie. Every section then reads whole with scripts off (the server drew it),
// the audit log's times are Shanghai's, and with scripts on the page does not ask again for
// what it came with. A browser whose zone the server did not know yet (no cookie, or a laptop
// that travelled) gets the times redrawn in its own zone once the page is live. Sections
// opened from the side navigation still load in the browser. Then many browsers open every
// section at once: a render that waits on another task would wedge the server here.

import assert from 'node:assert/strict';
import { scenario, logIn, openLive, assertOnlyProvokedErrors, written } from './lib.mjs';
import { test } from 'node:test';

const { url, browser, failures } = await scenario({
  users: [
    ['root-admin', 'admin passphrase', ['--admin']],
    ['ada', 'correct horse battery'],
  ],
  gpus: 2,
});
const SECTIONS = ['users', 'groups', 'quotas', 'policy', 'queue', 'notifications', 'violations', 'audit'];
let context, page, newest;

const inShanghai = (iso) => written(Date.parse(iso), 8);
const inUtc = (iso) => written(Date.parse(iso), 0);

function watch(p) {
  p.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  p.on('console', (m) => { if (m.type() === 'error' || /hydrat/i.test(m.text())) failures.push(`console ${m.type()}: ${m.text()}`); });
  return p;
}

test('logging in keeps the browser\'s zone in a cookie', async () => {
  context = await browser.newContext({ timezoneId: 'Asia/Shanghai', locale: 'en-GB', viewport: { width: 1400, height: 900 } });
  page = watch(await context.newPage());
  await logIn(page, url, 'root-admin', 'admin passphrase');
  const tz = (await context.cookies()).find((c) => c.name === 'tz');
  assert.equal(tz?.value, 'Asia/Shanghai');
  const answer = await page.request.get(url + '/api/v1/audit?limit=3');
  assert.equal(answer.status(), 200);
  newest = await answer.json();
  assert.ok(newest.length >= 1, 'the login is in the audit log');
});

test('with scripts off, every section reads whole: its data, no loading line', async () => {
  const still = await browser.newContext({
    javaScriptEnabled: false, timezoneId: 'Asia/Shanghai', storageState: await context.storageState(),
  });
  const bare = await still.newPage();
  for (const section of SECTIONS) {
    const response = await bare.goto(url + '/admin/' + section);
    assert.equal(response.status(), 200, section);
    const text = await bare.locator('main').innerText();
    assert.doesNotMatch(text, /Loading|Could not load/, `/admin/${section}: ${text}`);
    assert.equal(await bare.locator('[data-testid=admin-nav] a[aria-current=page]').count(), 1, section);
  }
  await bare.goto(url + '/admin/users');
  await bare.locator('[data-testid=users] tr[data-username=ada]').waitFor();
  await bare.goto(url + '/admin/policy');
  assert.ok(await bare.locator('input[name=booking_horizon_days]').inputValue());
  await bare.goto(url + '/admin/audit');
  for (const entry of newest) {
    const row = bare.locator(`[data-testid=audit] tr[data-audit="${entry.id}"]`);
    assert.equal(await row.locator('td').first().textContent(), inShanghai(entry.at), `entry ${entry.id}`);
  }
  await still.close();
});

test('with scripts on, the page uses what it came with and asks the API for nothing more', async () => {
  const asked = [];
  const listen = (r) => { if (/\/api\/v1\/(users|audit|groups)/.test(r.url())) asked.push(r.url()); };
  page.on('request', listen);
  await openLive(page, url + '/admin/users');
  await page.locator('[data-testid=users] tr[data-username=ada]').waitFor();
  await openLive(page, url + '/admin/audit');
  assert.match(await page.locator('[data-testid=zone]').textContent(), /UTC\+08:00/);
  await page.waitForTimeout(500);
  page.off('request', listen);
  assert.deepEqual(asked, []);
  const first = newest[0];
  assert.equal(await page.locator(`tr[data-audit="${first.id}"] td`).first().textContent(), inShanghai(first.at));
});

test('a browser the server did not know the zone of gets its times redrawn in its own', async () => {
  // Cookies from a browser in UTC, opened in Shanghai: the server draws UTC, the page redraws.
  const travelled = await browser.newContext({ timezoneId: 'Asia/Shanghai', locale: 'en-GB' });
  const state = await context.storageState();
  await travelled.addCookies(state.cookies.map((c) => (c.name === 'tz' ? { ...c, value: 'UTC' } : c)));
  const p = watch(await travelled.newPage());
  const first = newest[0];
  // What the server sends that browser.
  const sent = await (await travelled.request.get(url + '/admin/audit')).text();
  assert.match(sent, new RegExp(`data-audit="${first.id}"[^]*?${inUtc(first.at)}`));
  await p.goto(url + '/admin/audit');
  const cell = p.locator(`tr[data-audit="${first.id}"] td`).first();
  await p.waitForFunction(
    ([id, want]) => document.querySelector(`tr[data-audit="${id}"] td`)?.textContent === want,
    [first.id, inShanghai(first.at)],
  );
  assert.equal(await cell.textContent(), inShanghai(first.at));
  assert.equal((await travelled.cookies()).find((c) => c.name === 'tz')?.value, 'Asia/Shanghai');
  await travelled.close();
});

test('a section opened from the side navigation loads in the browser', async () => {
  await openLive(page, url + '/admin/users');
  await page.click('[data-testid=admin-nav] >> text=Audit log');
  await page.waitForURL(url + '/admin/audit');
  await page.locator(`tr[data-audit="${newest[0].id}"]`).waitFor();
  await page.click('[data-testid=admin-nav] >> text=Groups');
  await page.waitForURL(url + '/admin/groups');
  await page.locator('text=No groups yet').or(page.locator('[data-testid=groups]')).first().waitFor();
  await page.click('[data-testid=admin-nav] >> text=Quotas');
  await page.locator('[data-testid=quotas] table.quota-editor tbody tr').first().waitFor();
});

test('the queue policy, limits and shares are set on their own page', async () => {
  await openLive(page, url + '/admin/queue');
  const form = page.locator('[data-testid=queue-settings] form');
  await form.locator('select[name=policy]').selectOption('backfill');
  await form.locator('input[name=max_time_limit]').fill('2d');
  // A limit without its unit is refused beside the form, and nothing is saved.
  await form.locator('input[name=half_life]').fill('7');
  await form.locator('button[type=submit]').click();
  await form.getByRole('alert').filter({ hasText: 'a duration with its unit' }).waitFor();
  await form.locator('input[name=half_life]').fill('3d');
  await form.locator('button[type=submit]').click();
  await form.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const saved = await (await page.request.get(url + '/api/v1/queue/settings')).json();
  assert.equal(saved.policy, 'backfill');
  assert.equal(saved.max_time_limit_s, 2 * 86400);
  assert.equal(saved.half_life_s, 3 * 86400);
  const shares = page.locator('[data-testid=queue-shares] form');
  await shares.locator('input[name=group_shares]').fill('vision = two');
  await shares.locator('button[type=submit]').click();
  await shares.getByRole('alert').filter({ hasText: 'is not NAME = SHARE' }).waitFor();
  await shares.locator('input[name=group_shares]').fill('vision = 2');
  await shares.locator('button[type=submit]').click();
  await shares.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  assert.deepEqual((await (await page.request.get(url + '/api/v1/shares')).json()).groups, { vision: 2 });
});

test('the settings panel saves as every admin panel does: with its button, then "Saved."', async () => {
  await openLive(page, url + '/admin/policy');
  const form = page.locator('[data-testid=portal-settings]');
  const before = await (await page.request.get(url + '/api/v1/settings')).json();
  // A change alone saves nothing (it once saved on every change, unlike its neighbours).
  await form.locator('input[name=booking_horizon_days]').fill(String(before.booking_horizon_days + 1));
  await form.locator('input[name=anonymous_dashboard]').setChecked(!before.anonymous_dashboard);
  await page.waitForTimeout(300);
  assert.deepEqual(await (await page.request.get(url + '/api/v1/settings')).json(), before);
  // A wrong value is said beside the form, and nothing is saved.
  await form.locator('input[name=energy_price_per_kwh]').fill('');
  await form.locator('input[name=booking_horizon_days]').fill('');
  await form.locator('button[type=submit]').click();
  await page.getByRole('alert').filter({ hasText: 'whole number of days' }).waitFor();
  await form.locator('input[name=booking_horizon_days]').fill(String(before.booking_horizon_days + 1));
  await form.locator('button[type=submit]').click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const after = await (await page.request.get(url + '/api/v1/settings')).json();
  assert.equal(after.booking_horizon_days, before.booking_horizon_days + 1);
  assert.equal(after.anonymous_dashboard, !before.anonymous_dashboard);
  // Put it back for the sections that follow.
  assert.equal((await page.request.put(url + '/api/v1/settings', { data: before })).status(), 200);
});

test('many browsers opening every section at once all get whole pages', async () => {
  const cookies = (await context.storageState()).cookies.map((c) => `${c.name}=${c.value}`).join('; ');
  const one = async (section) => {
    const answer = await fetch(`${url}/admin/${section}`, { headers: { cookie: cookies }, signal: AbortSignal.timeout(20_000) });
    assert.equal(answer.status, 200, section);
    const main = (await answer.text()).split('<main')[1] ?? '';
    assert.doesNotMatch(main, /Loading|Could not load/, section);
  };
  await Promise.all(Array.from({ length: 8 }, (_, b) => (async () => {
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < SECTIONS.length; i++) await one(SECTIONS[(i + b + round) % SECTIONS.length]);
    }
  })()));
  // 280 pages, each given 20 s: a wedged server fails here rather than hang the run.
  const me = await fetch(`${url}/api/v1/me`, { headers: { cookie: cookies } });
  assert.equal(me.status, 200);
});

test('no errors in the page', () => {
  assertOnlyProvokedErrors(failures, [], 0);
});
