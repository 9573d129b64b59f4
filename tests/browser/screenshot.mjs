// `make screenshot`: the README's pictures of today's product, from a scripted scenario. A
// simulated 8-GPU node; ada and bob hold bookings and run on them, a queue job waits, and a
// process nobody booked sits on GPU 7 (red). After a minute of history (SCREENSHOT_WAIT
// seconds), the dashboard, the calendar and the queue are saved as dashboard.png,
// calendar.png and queue.png in docs/ (SCREENSHOT_DIR picks another folder).
//
// SCREENSHOT_TOUR=DIR also takes the tour of every page, as the admin, in four looks that
// cover each width, scheme and language: desktop light English, desktop dark Chinese, phone
// light Chinese and phone dark English (DIR/LOOK/PAGE.png, whole pages), and one contact sheet
// per look (DIR/LOOK.png) to look them over.

import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';
import assert from 'node:assert/strict';
import { root, freshDataDir, addUser, startServer, stopServer, launchBrowser, logIn, ensureUnixAccount } from './lib.mjs';

const outDir = resolve(root, process.env.SCREENSHOT_DIR || 'docs');
const wait = Number(process.env.SCREENSHOT_WAIT || 60) * 1000;
const dataDir = freshDataDir();
for (const name of ['ada', 'bob']) ensureUnixAccount(name);
addUser(dataDir, 'root', 'admin passphrase', ['--admin', '--unix-user', 'nobody']);
addUser(dataDir, 'ada', 'ada passphrase', ['--unix-user', 'ada', '--display-name', 'Ada']);
addUser(dataDir, 'bob', 'bob passphrase', ['--unix-user', 'bob', '--display-name', 'Bob']);
const server = await startServer({ dataDir, gpus: 8, poll: '1s' });
const browser = await launchBrowser();
try {
  const context = async (user, password) => {
    const c = await browser.newContext();
    assert.equal((await c.request.post(server.url + '/api/v1/auth/login', { data: { username: user, password } })).status(), 200);
    return c;
  };
  const admin = await context('root', 'admin passphrase');
  const gpus = await (await admin.request.get(server.url + '/api/v1/gpus')).json();
  const uuid = (i) => gpus[i].uuid;
  const hours = (h) => new Date(Date.now() + h * 3600_000).toISOString();
  const book = async (c, cards, from, to, note) => {
    const r = await c.request.post(server.url + '/api/v1/bookings',
      { data: { gpus: cards.map(uuid), start: from, end: to, note } });
    assert.equal(r.status(), 201, await r.text());
    return r.json();
  };
  const ada = await context('ada', 'ada passphrase');
  const bob = await context('bob', 'bob passphrase');
  const now = new Date().toISOString();
  await book(ada, [0, 1], now, hours(3), 'llama fine-tune');
  await book(bob, [2], now, hours(1.5), 'ablation');
  await book(bob, [3, 4], hours(2), hours(6), 'sweep');
  // Work in the bookings: simulated processes of their own users on their cards.
  for (const [card, user, command] of [[0, 'ada', 'python3 train.py'], [1, 'ada', 'python3 train.py'], [2, 'bob', 'python3 ablate.py']]) {
    const r = await admin.request.post(server.url + '/api/v1/sim/processes', { data: { gpu: uuid(card), user, command } });
    assert.equal(r.status(), 201, await r.text());
  }
  const intruder = await admin.request.post(server.url + '/api/v1/sim/processes',
    { data: { gpu: uuid(7), user: 'mallory', command: 'python3 mine.py' } });
  assert.equal(intruder.status(), 201, await intruder.text());
  const queued = await bob.request.post(server.url + '/api/v1/queue',
    { data: { gpus: 4, time_limit_s: 7200, argv: ['python3', 'pretrain.py'] } });
  assert.ok(queued.ok(), await queued.text());

  // The tour: every page, as the admin (who sees them all), in each look.
  const tour = async (dir) => {
    const pages = ['/', '/calendar', '/jobs', '/queue', '/history', '/account', '/admin/users', '/admin/groups',
      '/admin/quotas', '/admin/policy', '/admin/queue', '/admin/notifications', '/admin/violations', '/admin/audit'];
    const looks = [
      ['desktop-light-en', { width: 1400, height: 1000 }, 'light', 'en-GB'],
      ['desktop-dark-zh', { width: 1400, height: 1000 }, 'dark', 'zh-CN'],
      ['phone-light-zh', { width: 390, height: 844 }, 'light', 'zh-CN'],
      ['phone-dark-en', { width: 390, height: 844 }, 'dark', 'en-GB'],
    ];
    for (const [look, viewport, colorScheme, locale] of looks) {
      const c = await browser.newContext({ viewport, colorScheme, locale, timezoneId: 'Europe/Berlin' });
      const p = await c.newPage();
      await logIn(p, server.url, 'root', 'admin passphrase');
      // The account keeps the language last chosen: choose this look's.
      const lang = locale.slice(0, 2);
      assert.equal((await p.request.put(server.url + '/api/v1/me/language', { data: { language: lang } })).status(), 204);
      mkdirSync(resolve(dir, look), { recursive: true });
      const shots = [];
      for (const path of pages) {
        await p.goto(server.url + path);
        await p.waitForLoadState('networkidle');
        await p.waitForTimeout(1000);
        const file = resolve(dir, look, (path === '/' ? 'dashboard' : path.slice(1).replace('/', '-')) + '.png');
        await p.screenshot({ path: file, fullPage: true });
        shots.push(file);
      }
      await c.close();
      // One sheet per look: the pages side by side, drawn by the browser itself.
      const sheet = resolve(dir, `${look}.png`);
      const column = viewport.width > 500 ? 460 : 230;
      const cells = shots.map((file) => `<figure><img src="data:image/png;base64,${readFileSync(file).toString('base64')}"><figcaption>${file.split('/').pop()}</figcaption></figure>`).join('');
      const s = await browser.newPage({ viewport: { width: column * 7 + 80, height: 600 } });
      await s.setContent(`<style>body{margin:8px;font:12px sans-serif;display:grid;grid-template-columns:repeat(7,${column}px);gap:8px;align-items:start}figure{margin:0}img{width:100%;border:1px solid #999}</style>${cells}`);
      await s.screenshot({ path: sheet, fullPage: true });
      await s.close();
      console.log(`tour: ${shots.length} pages in ${resolve(dir, look)}, sheet ${sheet}`);
    }
  };

  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, colorScheme: 'light' });
  await logIn(page, server.url, 'ada', 'ada passphrase');
  await page.locator('[data-testid=link-status]', { hasText: 'live' }).waitFor({ timeout: 30_000 });
  await page.waitForTimeout(wait);
  mkdirSync(outDir, { recursive: true });
  const save = async (name) => {
    const path = resolve(outDir, name);
    await page.screenshot({ path });
    console.log(`screenshot saved to ${path}`);
  };
  await save('dashboard.png');
  await page.goto(server.url + '/calendar');
  await page.locator('[data-testid=calendar] .cal-bar').first().waitFor();
  await save('calendar.png');
  await page.goto(server.url + '/queue');
  await page.locator('[data-queue-job]').first().waitFor();
  await save('queue.png');
  if (process.env.SCREENSHOT_TOUR) await tour(resolve(process.env.SCREENSHOT_TOUR));
} finally {
  await browser.close();
  await stopServer(server.child);
  rmSync(dataDir, { recursive: true, force: true });
}
