// Browser test of the everyday pages in Debian's headless Chromium, against the release build:
// one way of naming cards and times, history on a server seconds old, compared cards, every
// metric charted live on the dashboard with a card's day behind it, and a phone.
//
// A member in Shanghai (UTC+08:00) books a card and queues a job on a simulated 4-card node
// that started seconds ago. History names the cards "GPU n · node" in card order, shows the
// last 24 hours from raw readings already, types its range in her zone and compares two cards;
// the report and its CSV name the booking's card. The queue names the job's card. The
// dashboard's temperature chart moves, and a card opens into its last 24 hours. On a 390 px
// phone in dark mode the calendar opens with the now-line on screen, a finger's drag books,
// and report rows read as cards.

import assert from 'node:assert/strict';
import {
  scenario, ensureUnixAccount, watchedPage, logIn, bookNow, assertOnlyProvokedErrors, written,
} from './lib.mjs';
import { test } from 'node:test';

const ACCOUNT = 'lanes-test-job';
ensureUnixAccount(ACCOUNT);
const { url, browser, failures } = await scenario({
  users: [['ada', 'ada passphrase', ['--unix-user', ACCOUNT, '--display-name', 'Ada']]],
  gpus: 4,
});
const ZONE = 'Asia/Shanghai';
// Shared by the steps below, which run in order.
let context, page, gpus, node, booking;

test('history names cards by index and node, in card order, with data from the first seconds', async () => {
  context = await browser.newContext({ timezoneId: ZONE, viewport: { width: 1400, height: 1000 } });
  page = await context.newPage();
  page.on('pageerror', (e) => failures.push(`pageerror: ${e.message}`));
  await logIn(page, url, 'ada', 'ada passphrase');
  gpus = await (await page.request.get(url + '/api/v1/gpus')).json();
  node = gpus[0].node;
  booking = await bookNow(page, url, gpus[2].uuid, 3_600_000);
  // One flush of the history writer: raw readings exist, no minute is rolled up yet.
  await page.waitForTimeout(6_000);
  await page.goto(url + '/history');
  const labels = page.locator('[data-testid=heatmap] text.heat-label');
  await labels.first().waitFor();
  const names = await labels.evaluateAll((all) => all.map((t) => t.firstChild.textContent.trim()));
  assert.deepEqual(names, [0, 1, 2, 3].map((i) => `GPU ${i} · ${node}`));
  // The default 24 h range reads minute rollups; the minutes not rolled up come from raw
  // readings, so every card has a mean at once, not "no readings".
  const captions = page.locator('.history-charts .history-chart figcaption');
  assert.equal(await captions.count(), 4);
  for (const caption of await captions.allTextContents()) assert.match(caption, /^GPU \d · .* · mean \d+ %$/);
  assert.equal(await page.locator('.history-chart figcaption').first().getAttribute('title'), gpus[0].uuid);
});

test('times are shown and typed in the viewer\'s zone, which the top bar names', async () => {
  assert.equal(await page.locator('[data-testid=zone]').textContent(), 'Times in UTC+08:00');
  // The typed range follows the range shown, in Shanghai's wall time.
  const to = await page.locator('[data-testid=custom-range] input[name=to]').inputValue();
  const local = await page.evaluate(() => {
    const d = new Date();
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}`;
  });
  assert.ok(to.startsWith(local), `${to} is not local time ${local}`);
  const utcHour = new Date().getUTCHours();
  assert.equal(Number(to.slice(11, 13)), (utcHour + 8) % 24);
  // Typing two hours ago to now shows exactly that range.
  const from = new Date(Date.now() - 2 * 3_600_000);
  const p = (n) => String(n).padStart(2, '0');
  const shanghai = new Date(from.getTime() + 8 * 3_600_000);
  const typed = `${shanghai.getUTCFullYear()}-${p(shanghai.getUTCMonth() + 1)}-${p(shanghai.getUTCDate())}T${p(shanghai.getUTCHours())}:${p(shanghai.getUTCMinutes())}`;
  await page.locator('[data-testid=custom-range] input[name=from]').fill(typed);
  await page.locator('[data-testid=custom-range] button[type=submit]').click();
  await page.locator('main > p.muted', { hasText: written(Math.floor(from.getTime() / 60e3) * 60e3, 8) }).waitFor();
});

test('the report and its CSV name the booking\'s card', async () => {
  // (The typed range ended at the start of this minute, maybe before the booking began.)
  await page.click('[data-testid=range] button:text("24 h")');
  const row = page.locator('[data-testid=report-bookings] tbody tr', { hasText: `#${booking.id}` });
  await row.waitFor();
  assert.match(await row.textContent(), new RegExp(`GPU 2 · ${node}`));
  const csv = await page.request.get(url + `/api/v1/reports/usage.csv?table=bookings&from=${new Date(Date.now() - 3_600_000).toISOString()}&to=${new Date(Date.now() + 3_600_000).toISOString()}`);
  assert.equal(csv.status(), 200);
  const text = await csv.text();
  assert.match(text, /^booking_id,user,gpus,cards,start,end,/);
  assert.match(text, new RegExp(`\\r\\n${booking.id},ada,1,GPU 2 · ${node},`));
  // The same range per user and day: today's bar of booked hours is ada's.
  const byDay = page.locator('[data-testid=by-day] svg.by-day');
  await byDay.locator('rect.booked').first().waitFor();
  assert.match(await byDay.locator('rect.booked title').first().textContent(), /· ada · \d+\.\d+ GPU-hours booked$/);
  assert.match(await byDay.getAttribute('aria-label'), /^GPU-hours per day: .*\d+\.\d+ booked, \d+\.\d+ used/);
});

test('compare cards draws the chosen cards on one chart, named in its legend and its text', async () => {
  await page.click('[data-testid=range] button:text("1 h")');
  const compare = page.locator('[data-testid=compare]');
  await compare.locator(`input[data-compare="${gpus[1].uuid}"]`).check();
  await compare.locator(`input[data-compare="${gpus[3].uuid}"]`).check();
  const chart = page.locator('[data-testid=compare-chart]');
  await chart.waitFor();
  assert.equal(await chart.locator('path.line').count(), 2);
  assert.deepEqual(
    (await chart.locator('.legend li').allTextContents()).map((t) => t.split(' · mean')[0]),
    [`GPU 1 · ${node}`, `GPU 3 · ${node}`],
  );
  assert.match(await chart.locator('svg').getAttribute('aria-label'), new RegExp(`GPU 1 · ${node}: mean \\d+ %; GPU 3 · ${node}: mean \\d+ %`));
  if (process.env.SCREENSHOT) await page.screenshot({ path: `${process.env.SCREENSHOT}-history.png`, fullPage: true });
});

test('the queue names a running job\'s cards', async () => {
  const queued = await page.request.post(url + '/api/v1/queue',
    { data: { gpus: 1, time_limit_s: 600, argv: ['sleep', '60'], name: 'named cards' } });
  assert.equal(queued.status(), 201, await queued.text());
  await page.goto(url + '/queue');
  const row = page.locator('[data-testid=queue-live] tr', { hasText: 'named cards' });
  await row.locator('[data-testid=reason]', { hasText: /^GPU \d · / }).waitFor();
  assert.match(await row.locator('[data-testid=reason]').textContent(), new RegExp(`^GPU [0-3] · ${node}$`));
  await page.request.delete(url + `/api/v1/queue/${(await queued.json()).id}`);
});

test('the jobs list follows a queue job from waiting to its end without a reload', async () => {
  await page.goto(url + '/jobs');
  await page.locator('[data-testid=jobs], .panel p.muted').first().waitFor();
  const queued = await page.request.post(url + '/api/v1/queue',
    { data: { gpus: 1, time_limit_s: 600, argv: ['sh', '-c', 'sleep 1'], name: 'followed job' } });
  assert.equal(queued.status(), 201, await queued.text());
  // No Refresh click: the row appears, then says how it ended, from the server's events.
  const row = page.locator('[data-testid=jobs] tr', { hasText: 'followed job' });
  await row.waitFor();
  await row.locator('td.state', { hasText: 'completed' }).waitFor({ timeout: 20_000 });
});

test('the dashboard charts temperature live and a card opens into its last 24 hours', async () => {
  await page.goto(url + '/');
  const card = page.locator(`article.gpu-card[data-uuid="${gpus[0].uuid}"]`);
  const temp = card.locator('.series-temp path.line');
  await page.waitForFunction((el) => el.getAttribute('d')?.includes('L'), await temp.elementHandle());
  const first = await temp.getAttribute('d');
  await page.waitForFunction(([el, before]) => el.getAttribute('d') !== before, [await temp.elementHandle(), first]);
  for (const metric of ['temperature', 'power', 'sm-clock', 'mem-busy']) {
    assert.notEqual(await card.locator(`[data-testid=${metric}]`).textContent(), '—', metric);
  }
  assert.match(await card.locator('.series-temp svg').getAttribute('aria-label'), /^Temperature, last 5 min: from \d+ to \d+; now \d+ °C$/);
  await card.locator('[data-testid=card-day]').click();
  const day = card.locator('.day-charts figure');
  await day.nth(4).locator('svg').waitFor();
  assert.equal(await day.count(), 5);
  assert.match(await day.nth(0).locator('figcaption').textContent(), /^Utilization \(%\), last 24 h: from \d+ to \d+$/);
  if (process.env.SCREENSHOT) await page.screenshot({ path: `${process.env.SCREENSHOT}-dashboard.png` });
});

test('on a phone the calendar opens at now, a finger\'s drag books, and tables read as cards', async () => {
  const phone = await browser.newContext({
    timezoneId: ZONE, viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, colorScheme: 'dark',
  });
  const p = await phone.newPage();
  p.on('pageerror', (e) => failures.push(`pageerror: ${e.message}`));
  await logIn(p, url, 'ada', 'ada passphrase');
  // The pool at a glance: a card takes a few lines, not a screenful of charts (8 cards once
  // made a 6,209 px page, about 776 px a card).
  await p.goto(url + '/');
  await p.locator('article.gpu-card').first().waitFor();
  const tall = await p.evaluate(() => document.documentElement.scrollHeight);
  assert.ok(tall < 800 + 400 * gpus.length, `the dashboard is ${tall} px tall for ${gpus.length} cards`);
  await p.goto(url + '/calendar');
  const line = p.locator('.cal-now').first();
  await line.waitFor();
  // Scrolled so that now is in view (just after midnight that is no scroll at all).
  await p.waitForFunction(() => {
    const at = document.querySelector('.cal-now').getBoundingClientRect().x;
    return at > 0 && at < window.innerWidth;
  });
  const box = await line.boundingBox();
  assert.ok(box.x > 0 && box.x < 390, `the now-line is at x=${box.x}, off a 390 px screen`);
  // Scrolled to now, each row still says which card it is.
  const name = await p.locator('.cal-row:not(.cal-head) .cal-gpu').first().boundingBox();
  assert.ok(name.x >= 0 && name.x < 40, `the card name is at x=${name.x}, scrolled away`);

  // A finger drags over two later hours of GPU 1 (tomorrow's first ones late in the day).
  const cellsAt = (after) => p.evaluate((after) => {
    const now = after ? document.querySelector('.cal-now').getBoundingClientRect().left : -Infinity;
    const cells = [...document.querySelectorAll('.cal-row:not(.cal-head)')[1].querySelectorAll('.cal-cell')];
    const next = cells.findIndex((c) => c.getBoundingClientRect().left > now + 2);
    if (next < 0 || next + 2 >= cells.length) return null;
    // Centred: beside the card names that stay in view, not under them.
    cells[next + 1].scrollIntoView({ inline: 'center', block: 'nearest' });
    return [next + 1, next + 2].map((i) => {
      const r = cells[i].getBoundingClientRect();
      return { x: r.left + r.width / 2, y: r.top + r.height / 2 };
    });
  }, after);
  let later = await cellsAt(true);
  if (!later) {
    await p.click('button[aria-label="Later"]');
    later = await cellsAt(false);
  }
  const cdp = await phone.newCDPSession(p);
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: [later[0]] });
  for (let i = 1; i <= 4; i += 1) {
    const x = later[0].x + ((later[1].x - later[0].x) * i) / 4;
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchMove', touchPoints: [{ x, y: later[0].y }] });
  }
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
  const confirm = p.locator('[data-testid=confirm]');
  await confirm.waitFor();
  assert.match(await confirm.textContent(), /GPU 1/);
  assert.match(await confirm.textContent(), /2\.0 h/);
  await confirm.locator('button:text("Book")').click();
  await confirm.waitFor({ state: 'detached' });
  const mine = await (await p.request.get(url + `/api/v1/bookings?user=ada&from=${new Date().toISOString()}`)).json();
  assert.ok(mine.some((b) => b.gpus.length === 1 && b.gpus[0].uuid === gpus[1].uuid), JSON.stringify(mine));

  await p.goto(url + '/history');
  const cell = p.locator('[data-testid=report-bookings] tbody tr').first().locator('td').first();
  await cell.waitFor();
  await p.waitForFunction((el) => el.dataset.label === 'Booking', await cell.elementHandle());
  assert.equal(await cell.evaluate((el) => getComputedStyle(el).display), 'flex');
  assert.equal(await p.locator('[data-testid=report-bookings] thead').evaluate((el) => el.getBoundingClientRect().height <= 1), true);
  if (process.env.SCREENSHOT) await p.screenshot({ path: `${process.env.SCREENSHOT}-phone.png`, fullPage: true });
  await phone.close();
});

test('no errors in the pages', async () => {
  await context.close();
  assertOnlyProvokedErrors(failures, [], 0);
});
