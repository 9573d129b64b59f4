// Browser test of the interface in Simplified Chinese, in Debian's headless Chromium against
// the release build. A browser that asks for Chinese (Accept-Language zh-CN) gets every page
// in Chinese: no English text from app/locales/en.json shows in any page's text, titles,
// labels or placeholders, with data on the pages (a booking, a queue job, an unbooked process,
// an audit log). The API answers the page's calls in Chinese with the same code and rule. The
// top bar switches to English and back; the choice is the account's, so a new browser that
// logs in gets it. SCREENSHOT=/dir/prefix saves the pages at desktop and phone widths.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  root, scenario, ensureUnixAccount, logIn, bookNow, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const ACCOUNT = 'lanes-test-job';
ensureUnixAccount(ACCOUNT);
const { url, browser, failures } = await scenario({
  users: [['root', 'admin passphrase', ['--admin', '--unix-user', ACCOUNT, '--display-name', '王芳']]],
  gpus: 4,
});

const PAGES = [
  '/', '/calendar', '/jobs', '/queue', '/history', '/account',
  '/admin/users', '/admin/groups', '/admin/quotas', '/admin/policy', '/admin/queue', '/admin/notifications',
  '/admin/violations', '/admin/audit', '/admin/statements', '/usage',
];

/** Every English text of the translation files that the Chinese file says differently, cut
 * at its placeholders: none of these may show on a Chinese page. */
function englishTexts() {
  const load = (lang) => JSON.parse(readFileSync(join(root, `app/locales/${lang}.json`), 'utf8'));
  const [en, zh] = [load('en'), load('zh')];
  const out = new Set();
  const walk = (e, z, path) => {
    for (const [key, value] of Object.entries(e)) {
      if (typeof value === 'object') { walk(value, z[key], `${path}${key}.`); continue; }
      // Patterns for dates and the API's and mail's texts are not page text.
      if (value === z[key] || path.startsWith('date.') || path.startsWith('api.') || path.startsWith('mail.')) continue;
      for (const piece of value.split(/\{\{[^}]*\}\}/)) {
        const text = piece.trim().replace(/^[·.,:;()\s]+|[·.,:;()\s]+$/g, '');
        // Phrases, and capitalised words ("Dashboard", "GPU-hours"); a lone lower-case word
        // ("job", "user") is as likely the page's data (an audit code, a username).
        if (/[A-Za-z]{2,}/.test(text) && (/\s/.test(text) || /^[A-Z][A-Za-z-]{3,}$/.test(text))) out.add(text);
      }
    }
  };
  walk(en, zh, '');
  return [...out];
}
const ENGLISH = englishTexts();

/** The page's words: its text and the titles, labels and placeholders people meet. */
async function wordsOf(page) {
  return page.evaluate(() => {
    const attrs = [...document.querySelectorAll('[title],[aria-label],[placeholder],[alt]')]
      .flatMap((e) => ['title', 'aria-label', 'placeholder', 'alt'].map((a) => e.getAttribute(a)).filter(Boolean));
    // What the page itself marks as English (the audit log's records, written once in
    // English as a log is) is not the page's words, nor are codes (an audit action such as
    // auth.login, a command): they are identifiers.
    let text = document.body.innerText;
    for (const e of document.querySelectorAll('[lang=en], code')) text = text.replace(e.innerText, '');
    return [document.title, text, ...attrs].join('\n');
  });
}

/** English texts of the files found in `words`, as whole words (case as written). */
function englishIn(words) {
  return ENGLISH.filter((text) => {
    const escaped = text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    return new RegExp(`(^|[^A-Za-z])${escaped}($|[^A-Za-z])`).test(words);
  });
}

/** English that no translation file holds (a server's detail, a word written in the code):
 * the small words every English sentence has, and the words once found on Chinese pages. Data
 * on the pages (names, commands, cards) holds none of them. */
const STOP_WORDS = /(^|[^A-Za-z])(the|and|of|for|with|from|not|only|are|is|was|were|before|after|free|peak|observed|cancelled|started|found|environment|login|ago|until)($|[^A-Za-z])/i;
function strayEnglish(words) {
  return words.split('\n').filter((line) => STOP_WORDS.test(line));
}

let context, page;

test('a browser that asks for Chinese gets the login page in Chinese', async () => {
  context = await browser.newContext({ locale: 'zh-CN', timezoneId: 'Asia/Shanghai', viewport: { width: 1400, height: 1000 } });
  page = await context.newPage();
  page.on('pageerror', (e) => failures.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') failures.push(`console error: ${m.text()}`); });
  await page.goto(url + '/login');
  assert.equal(await page.getAttribute('html', 'lang'), 'zh');
  assert.equal(await page.locator('button[type=submit]').textContent(), '登录');
  assert.deepEqual(englishIn(await wordsOf(page)), []);
  // A wrong password is said in Chinese.
  await page.fill('input[name=username]', 'root');
  await page.fill('input[name=password]', 'wrong');
  await page.click('button[type=submit]');
  await page.locator('.form-error', { hasText: '用户名或密码错误。' }).waitFor();
});

test('with data on them, no page shows English text from the translation files', async () => {
  await logIn(page, url, 'root', 'admin passphrase');
  const gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  const booking = await bookNow(page, url, gpus[0].uuid, 3_600_000);
  // A job that cannot start: why is said on the Jobs page (once "…not found on the PATH of the
  // login environment of …" in English).
  const missing = await page.request.post(url + '/api/v1/jobs',
    { data: { booking_id: booking.id, argv: ['no-such-program-lanes'] } });
  assert.equal(missing.status(), 201, await missing.text());
  const queued = await page.request.post(url + '/api/v1/queue',
    { data: { gpus: 1, time_limit_s: 600, argv: ['sleep', '30'], name: '训练' } });
  assert.equal(queued.status(), 201, await queued.text());
  const intruder = await page.request.post(url + '/api/v1/sim/processes',
    { data: { gpu: gpus[3].uuid, user: 'mallory', command: 'python3 mine.py' } });
  assert.equal(intruder.status(), 201, await intruder.text());
  const found = [];
  for (const path of PAGES) {
    await page.goto(url + path);
    await page.waitForLoadState('networkidle');
    await page.waitForTimeout(500);
    const words = await wordsOf(page);
    for (const text of englishIn(words)) found.push(`${path}: "${text}"`);
    for (const line of strayEnglish(words)) found.push(`${path}: stray English in "${line}"`);
  }
  assert.deepEqual(found, []);
  // And it is Chinese, not empty: the top bar, a table's heads, a date.
  await page.goto(url + '/calendar');
  await page.locator('nav.nav a', { hasText: '日历' }).waitFor();
  await page.locator('th', { hasText: '状态' }).first().waitFor();
  assert.match(await page.locator('.cal-title, h2, h3').allTextContents().then((t) => t.join(' ')), /\d+月\d+日|我的预约/);
  assert.equal(await page.locator('[data-testid=zone]').textContent(), '时间采用 UTC+08:00');
});

test('the API answers the page in Chinese, with the same code and rule', async () => {
  // Called from the page, as its forms do: the browser sends its Accept-Language.
  const call = (body) => page.evaluate(async (b) => {
    const r = await fetch('/api/v1/bookings', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
    return [r.status, await r.json()];
  }, body);
  const start = new Date(Date.now() + 3_600_000);
  const [status, body] = await call({ count: 1, start: start.toISOString(), end: new Date(+start - 60_000).toISOString() });
  assert.equal(status, 422);
  assert.deepEqual([body.error, body.rule, body.message], ['invalid', 'end_after_start', '结束时间必须晚于开始时间']);
  const gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  const [clash, taken] = await call({ gpus: [gpus[0].uuid], start: new Date().toISOString(), end: new Date(Date.now() + 600_000).toISOString() });
  assert.equal(clash, 409);
  assert.equal(taken.error, 'conflict');
  assert.match(taken.message, /在这段时间内已被预约或处于维护中/);
});

test('the top bar switches to English and back, and the account remembers the choice', async () => {
  // The switch acts once the page is live (hydrated): wait for its bundle and data.
  await page.goto(url + '/history');
  await page.waitForLoadState('networkidle');
  await page.selectOption('[data-testid=language]', 'en');
  await page.locator('nav.nav a', { hasText: 'History' }).waitFor();
  assert.equal(await page.getAttribute('html', 'lang'), 'en');
  await page.waitForLoadState('networkidle');
  await page.selectOption('[data-testid=language]', 'zh');
  await page.locator('nav.nav a', { hasText: '历史' }).waitFor();
  // A browser that asks for English, logging in to this account, gets Chinese.
  const other = await browser.newContext({ locale: 'en-US' });
  const p = await other.newPage();
  await logIn(p, url, 'root', 'admin passphrase');
  assert.equal(await p.getAttribute('html', 'lang'), 'zh');
  await p.locator('nav.nav a', { hasText: '仪表盘' }).waitFor();
  await other.close();
});

test('screenshots of history, admin and the dashboard in Chinese, desktop and phone', async () => {
  const prefix = process.env.SCREENSHOT;
  for (const [name, path] of [['history', '/history'], ['admin', '/admin/users'], ['dashboard', '/']]) {
    await page.setViewportSize({ width: 1400, height: 1000 });
    await page.goto(url + path);
    await page.waitForLoadState('networkidle');
    await page.waitForTimeout(1_500);
    if (prefix) await page.screenshot({ path: `${prefix}-zh-${name}-desktop.png`, fullPage: name !== 'dashboard' });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(500);
    if (prefix) await page.screenshot({ path: `${prefix}-zh-${name}-phone.png` });
    assert.deepEqual(englishIn(await wordsOf(page)), [], path);
  }
});

test('no errors in the pages but the refusals provoked', async () => {
  await context.close();
  // The wrong password (401 is a redirect, not a failed load), the refused booking and the clash.
  assertOnlyProvokedErrors(failures, [422, 409], 2);
});
