// Browser test of personal notifications in Debian's headless Chromium, against the release
// build and a real SMTP server (aiosmtpd, asking for a login).
//
// The admin sets up the mail server on the admin page and sends a test, which the outbox shows
// sent. Ada chooses her time zone on her account page and books a card starting in 70 s: a
// minute before it starts, the reminder reaches her mailbox, in her zone, with a "Release now"
// link. She opens it in the browser: a page asks; Confirm cancels the booking without a login;
// the same link opened again is refused.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { root, scenario, watchedPage, logIn, openLive, assertOnlyProvokedErrors } from './lib.mjs';

const python = process.env.LANES_TEST_PYTHON ?? join(homedir(), '.cache/lanes-tools/aiosmtpd-1.4.6/bin/python');
assert.ok(existsSync(python), `${python} is missing: run make tools-test (it installs aiosmtpd)`);
const mailDir = mkdtempSync(join(tmpdir(), 'lanes-mail-'));
const sink = spawn(python, [join(root, 'tests/notify/smtp_sink.py'), mailDir, 'mailer', 'mail passphrase'],
  { stdio: ['ignore', 'pipe', 'inherit'] });
const smtpPort = await new Promise((resolve, reject) => {
  sink.stdout.once('data', (chunk) => resolve(Number(String(chunk).trim().split(' ')[1])));
  sink.once('exit', (code) => reject(new Error(`the SMTP server exited: ${code}`)));
});
after(() => { sink.kill(); rmSync(mailDir, { recursive: true, force: true }); });

/** The messages received so far, decoded by the sink. */
function mails() {
  return readdirSync(mailDir).filter((f) => f.endsWith('.json')).sort()
    .map((f) => JSON.parse(readFileSync(join(mailDir, f), 'utf8')));
}

async function mailWhere(predicate, timeout) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const found = mails().find(predicate);
    if (found) return found;
    assert.ok(Date.now() < deadline, `no such message within ${timeout} ms; got ${JSON.stringify(mails().map((m) => m.subject))}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const { url, browser, failures } = await scenario({
  users: [
    ['boss', 'boss passphrase', ['--admin', '--email', 'boss@lab.example']],
    ['ada', 'ada passphrase', ['--display-name', 'Ada', '--email', 'ada@lab.example']],
  ],
  gpus: 1,
  extra: ['--sim-background', 'false'],
});
let boss, ada, booking, reminder;

test('the admin sets up the mail server on the admin page, and a test message is sent', async () => {
  boss = await watchedPage(browser, failures);
  await logIn(boss, url, 'boss', 'boss passphrase');
  await openLive(boss, url + '/admin/notifications');
  const panel = boss.locator('[data-testid=notify-settings]');
  await panel.locator('input[name=lab_name]').fill('Vision Lab');
  await panel.locator('input[name=smtp_host]').fill('127.0.0.1');
  await panel.locator('input[name=smtp_port]').fill(String(smtpPort));
  await panel.locator('select[name=smtp_security]').selectOption('none');
  await panel.locator('input[name=smtp_username]').fill('mailer');
  await panel.locator('input[name=smtp_password]').fill('mail passphrase');
  await panel.locator('input[name=smtp_from]').fill('Vision Lab GPUs <gpus@lab.example>');
  await panel.locator('input[name=starts_soon_min]').fill('1');
  await panel.locator('button', { hasText: 'Save notification settings' }).click();
  await panel.locator('[role=status]', { hasText: 'Saved.' }).waitFor();
  const saved = await (await boss.request.get(url + '/api/v1/notifications/settings')).json();
  assert.equal(saved.smtp.password, undefined, 'the password is never read back');
  assert.equal(saved.smtp.password_set, true);
  assert.equal(saved.starts_soon_min, 1);

  await panel.locator('input[name=test_email]').fill('ops@lab.example');
  await panel.locator('button', { hasText: 'Send test' }).click();
  await panel.locator('[role=status]', { hasText: 'Queued as message' }).waitFor();
  const test = await mailWhere((m) => m.to.includes('ops@lab.example'), 20_000);
  assert.equal(test.subject, '[Vision Lab] Test message');
  await panel.locator('[data-testid=outbox] tr.outbox-sent', { hasText: 'test' }).first().waitFor({ timeout: 15_000 });
  if (process.env.SCREENSHOT) await panel.screenshot({ path: process.env.SCREENSHOT.replace('.png', '-admin.png') });
});

test('Ada chooses her time zone on her account page', async () => {
  ada = await watchedPage(browser, failures);
  await logIn(ada, url, 'ada', 'ada passphrase');
  await ada.goto(url + '/account');
  const mine = ada.locator('[data-testid=my-notifications]');
  await mine.locator('text=Email goes to ada@lab.example.').waitFor();
  // No webhook saved: that column is not ticked and cannot be (it once showed ticks for a
  // channel that could not reach her).
  const hook = mine.locator('input[name=job_failed_webhook]');
  assert.equal(await hook.isChecked(), false);
  assert.equal(await hook.isDisabled(), true);
  await mine.locator('input[name=time_zone]').fill('Europe/Berlin');
  // A failed job by webhook only: she has none, so failures stop reaching her by email.
  await mine.locator('input[name=job_failed_email]').uncheck();
  await mine.locator('button', { hasText: 'Save notifications' }).click();
  await mine.locator('[role=status]', { hasText: 'Saved.' }).waitFor();
  if (process.env.SCREENSHOT) await mine.screenshot({ path: process.env.SCREENSHOT.replace('.png', '-account.png') });
  const prefs = await (await ada.request.get(url + '/api/v1/me/notifications')).json();
  assert.equal(prefs.time_zone, 'Europe/Berlin');
  assert.deepEqual(prefs.events.job_failed, { email: false, webhook: true });
  // A zone that is none is refused in words.
  await mine.locator('input[name=time_zone]').fill('Mars/Olympus');
  await mine.locator('button', { hasText: 'Save notifications' }).click();
  await mine.locator('[role=alert]', { hasText: 'not a time zone' }).waitFor();
});

test('the reminder comes a minute before the start, in her zone, with a link that works once', async () => {
  const gpus = await (await ada.request.get(url + '/api/v1/gpus')).json();
  const start = new Date(Date.now() + 70_000);
  const made = await ada.request.post(url + '/api/v1/bookings', {
    data: { gpus: [gpus[0].uuid], start: start.toISOString(), end: new Date(+start + 3_600_000).toISOString() },
  });
  assert.equal(made.status(), 201, await made.text());
  booking = await made.json();
  reminder = await mailWhere((m) => m.to.includes('ada@lab.example'), 60_000);
  assert.ok(Date.now() < +start, 'the reminder came before the start');
  const berlin = start.toLocaleTimeString('en-GB', { timeZone: 'Europe/Berlin', hour: '2-digit', minute: '2-digit' });
  assert.equal(reminder.subject, `[Vision Lab] Booking #${booking.id} starts at ${berlin} CET`);
  assert.match(reminder.text, /\(UTC\+01:00\)/);
  assert.match(reminder.text, /GPU 0 · /);
  assert.match(reminder.html, /Release now/);
  const link = reminder.text.match(/Release now: (\S+)/)[1];
  if (process.env.SCREENSHOT) writeFileSync(process.env.SCREENSHOT.replace('.png', '-mail.json'), JSON.stringify(reminder, null, 1));

  // A fresh browser, logged in as nobody, as a mail program opens it.
  const stranger = await browser.newPage();
  const first = await stranger.goto(link);
  assert.equal(first.status(), 200);
  await stranger.locator('text=Cancel booking #' + booking.id).waitFor();
  if (process.env.SCREENSHOT) await stranger.screenshot({ path: process.env.SCREENSHOT.replace('.png', '-confirm.png') });
  await stranger.locator('button', { hasText: 'Confirm' }).click();
  await stranger.locator('[role=status]', { hasText: `Booking #${booking.id} was cancelled.` }).waitFor();
  if (process.env.SCREENSHOT) await stranger.screenshot({ path: process.env.SCREENSHOT });
  const after = await (await ada.request.get(url + `/api/v1/bookings/${booking.id}`)).json();
  assert.equal(after.state, 'cancelled');
  const again = await stranger.goto(link);
  assert.equal(again.status(), 410);
  await stranger.locator('[role=alert]', { hasText: 'already used' }).waitFor();
  const altered = await stranger.goto(link.slice(0, -1) + (link.endsWith('0') ? '1' : '0'));
  assert.equal(altered.status(), 404);
  await stranger.close();
  // Only the refusals this test provoked: none in the logged-in pages.
  assertOnlyProvokedErrors(failures, [422], 1);
});
