// `make screenshot`: the README's pictures of today's product, from a scripted scenario. A
// simulated 8-GPU node; ada and bob hold bookings and run on them, a queue job waits, and a
// process nobody booked sits on GPU 7 (red). After a minute of history (SCREENSHOT_WAIT
// seconds), the dashboard, the calendar and the queue are saved as dashboard.png,
// calendar.png and queue.png in docs/ (SCREENSHOT_DIR picks another folder).

import { mkdirSync, rmSync } from 'node:fs';
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
} finally {
  await browser.close();
  await stopServer(server.child);
  rmSync(dataDir, { recursive: true, force: true });
}
