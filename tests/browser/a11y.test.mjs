// Accessibility of every page, checked by axe-core (from npm) in Debian's headless Chromium
// against the release build: no serious or critical violation, in light and dark mode, on
// pages with data in them (a booking, a queue job, an unbooked process, an audit log).
// Keyboard focus is visible, and the red unbooked row says so in words.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import {
  scenario, ensureUnixAccount, logIn, bookNow, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const axePath = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const ACCOUNT = 'lanes-test-job';
ensureUnixAccount(ACCOUNT);
const { url, browser, failures } = await scenario({
  users: [
    ['root', 'admin passphrase', ['--admin', '--unix-user', ACCOUNT]],
  ],
  gpus: 4,
});

const PAGES = [
  '/', '/calendar', '/jobs', '/queue', '/history', '/account',
  '/admin/users', '/admin/groups', '/admin/quotas', '/admin/policy', '/admin/queue', '/admin/notifications',
  '/admin/violations', '/admin/audit', '/admin/statements', '/usage',
];

/** Serious and critical violations on the page now, as "rule: target" lines. */
async function violations(page) {
  await page.addScriptTag({ path: axePath });
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .flatMap((v) => v.nodes.map((n) => `${v.id} (${v.impact}): ${n.target.join(' ')} — ${n.failureSummary.split('\n')[1] ?? ''}`));
  });
  return result;
}

let context, page;

test('set up: a booking, a queue job and a process nobody booked', async () => {
  context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  page = await context.newPage();
  page.on('pageerror', (e) => failures.push(`pageerror: ${e.message}`));
  await logIn(page, url, 'root', 'admin passphrase');
  const gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  await bookNow(page, url, gpus[0].uuid, 3_600_000);
  const queued = await page.request.post(url + '/api/v1/queue',
    { data: { gpus: 1, time_limit_s: 600, argv: ['sleep', '30'], name: 'a11y job' } });
  assert.equal(queued.status(), 201, await queued.text());
  const intruder = await page.request.post(url + '/api/v1/sim/processes',
    { data: { gpu: gpus[3].uuid, user: 'mallory', command: 'python3 mine.py' } });
  assert.equal(intruder.status(), 201, await intruder.text());
});

for (const scheme of ['light', 'dark']) {
  test(`every page has no serious or critical axe violation (${scheme})`, async () => {
    await page.emulateMedia({ colorScheme: scheme });
    const found = [];
    for (const path of PAGES) {
      await page.goto(url + path);
      // Data loads in the browser after hydration: wait for it to settle.
      await page.waitForLoadState('networkidle');
      await page.waitForTimeout(300);
      for (const v of await violations(page)) found.push(`${path}: ${v}`);
    }
    await page.goto(url + '/login');
    for (const v of await violations(page)) found.push(`/login: ${v}`);
    assert.deepEqual(found, []);
  });
}

test('keyboard focus is visible, and an unbooked process is named, not only red', async () => {
  await page.emulateMedia({ colorScheme: 'light' });
  await page.goto(url + '/');
  const row = page.locator('tr.unbooked').first();
  await row.waitFor();
  assert.match(await row.locator('td.lane').textContent(), /UNBOOKED/);
  await page.keyboard.press('Tab');
  const outline = await page.evaluate(() => {
    const s = getComputedStyle(document.activeElement);
    return { style: s.outlineStyle, width: parseFloat(s.outlineWidth), shadow: s.boxShadow };
  });
  assert.ok((outline.style !== 'none' && outline.width > 0) || outline.shadow !== 'none', JSON.stringify(outline));
});

test('no errors in the pages', async () => {
  await context.close();
  assertOnlyProvokedErrors(failures, [], 0);
});
