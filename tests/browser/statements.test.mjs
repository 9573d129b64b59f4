// Browser test of statements, "my usage" and chat channels, in Debian's headless Chromium
// against the server: an admin defines projects, a GPU-hour price and what members see in the
// settings form; a member's bookings (one for a named project, one that takes the group's
// default) show on the admin's statement page per project, group and member with the cost, and
// its CSV downloads; the member reads their own month on /usage in English and in Chinese; both
// pages are axe-clean (no serious or critical violation) in both languages. A member points
// their notifications at a Feishu bot (a local stand-in that checks the signature) and "Send a
// test" shows Feishu's answer.

import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { scenario, logIn, watchedPage, assertOnlyProvokedErrors, openLive } from './lib.mjs';
import { test, after } from 'node:test';

const axePath = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const { url, browser, failures } = await scenario({
  users: [
    ['root', 'admin passphrase', ['--admin']],
    ['mei', 'mei passphrase', []],
  ],
  gpus: 4,
});

/** Serious and critical axe violations on the page now. */
async function violations(page) {
  await page.addScriptTag({ path: axePath });
  return page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(' ')}`));
  });
}

const SECRET = 'SEC-feishu-bot';
// A Feishu bot's stand-in: checks the signature as Feishu documents it and answers as it does.
const feishu = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    const b = JSON.parse(body);
    const sign = createHmac('sha256', `${b.timestamp}\n${SECRET}`).update('').digest('base64');
    const fresh = Math.abs(Date.now() / 1000 - Number(b.timestamp)) < 3600;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(sign === b.sign && fresh && b.msg_type === 'interactive'
      ? { code: 0, msg: 'success', data: {} }
      : { code: 19021, msg: 'sign match fail or timestamp is not within one hour from current time', data: {} }));
  });
});
await new Promise((resolve) => feishu.listen(0, '127.0.0.1', resolve));
after(() => feishu.close());
const hookUrl = `http://127.0.0.1:${feishu.address().port}/open-apis/bot/v2/hook/abc`;

let admin, mei;

test('the admin defines projects, a GPU-hour price and what members see', async () => {
  admin = await watchedPage(browser, failures);
  await logIn(admin, url, 'root', 'admin passphrase');
  // A group for mei, with its default project.
  const group = await admin.request.post(url + '/api/v1/groups', { data: { name: 'cv' } });
  assert.equal(group.status(), 201, await group.text());
  const users = await (await admin.request.get(url + '/api/v1/users')).json();
  const meiId = users.find((u) => u.username === 'mei').id;
  const joined = await admin.request.patch(`${url}/api/v1/users/${meiId}`, { data: { groups: ['cv'] } });
  assert.equal(joined.status(), 200, await joined.text());
  // Notifications may go to this machine in this test.
  const lab = await admin.request.put(url + '/api/v1/notifications/settings', { data: { allow_private_webhooks: true } });
  assert.equal(lab.status(), 200, await lab.text());
  await openLive(admin, url + '/admin/policy');
  const form = admin.locator('[data-testid=portal-settings]');
  await form.locator('textarea[name=projects]').fill('vision: Vision grant\nnlp-grant');
  await form.locator('textarea[name=group_projects]').fill('cv = vision');
  await form.locator('input[name=gpu_hour_price]').fill('2');
  await form.locator('select[name=usage_visibility]').selectOption('group');
  await form.locator('button[type=submit]').click();
  await admin.locator('[role=status]', { hasText: 'Saved' }).first().waitFor();
  const settings = await (await admin.request.get(url + '/api/v1/settings')).json();
  assert.deepEqual(settings.projects.map((p) => p.name), ['vision', 'nlp-grant']);
  assert.deepEqual(settings.group_projects, { cv: 'vision' });
  assert.equal(settings.gpu_hour_price, 2);
  assert.equal(settings.usage_visibility, 'group');
  // A line the form cannot read is said beside the form, and nothing is saved.
  await form.locator('textarea[name=group_projects]').fill('cv vision');
  await form.locator('button[type=submit]').click();
  await admin.locator('[role=alert]', { hasText: 'is not group = project' }).waitFor();
});

test('the statement shows the month per project, group and member, and its CSV', async () => {
  mei = await watchedPage(browser, failures);
  await logIn(mei, url, 'mei', 'mei passphrase');
  const gpus = await (await mei.request.get(url + '/api/v1/gpus')).json();
  const start = new Date(Date.now() + 60_000);
  const book = async (cards, hours, project) => {
    const made = await mei.request.post(url + '/api/v1/bookings', {
      data: { gpus: cards, start: start.toISOString(), end: new Date(+start + hours * 3_600_000).toISOString(), ...(project ? { project } : {}) },
    });
    assert.equal(made.status(), 201, await made.text());
    return made.json();
  };
  const a = await book([gpus[0].uuid, gpus[1].uuid], 1, null);
  const b = await book([gpus[2].uuid], 2, 'nlp-grant');
  assert.equal(a.project, 'vision');
  assert.equal(b.project, 'nlp-grant');
  // The month these bookings fall in, in the lab's zone (UTC here); a run late on a month's
  // last day could see them cross into the next: the page is read for the month they start.
  const month = start.toISOString().slice(0, 7);
  await openLive(admin, url + '/admin/statements');
  const page = admin.locator('[data-testid=statement]');
  await page.locator('input[name=month]').fill(month);
  await page.locator('input[name=month]').dispatchEvent('change');
  await page.locator('[data-testid=statement-period]', { hasText: month }).waitFor();
  const projects = page.locator('[data-testid=statement-projects]');
  await projects.locator('tr', { hasText: 'vision' }).locator('td', { hasText: '2.0' }).first().waitFor();
  const row = async (table, name) => (await page.locator(`[data-testid=${table}] tr`, { hasText: name }).first().innerText()).split('\t');
  assert.deepEqual((await row('statement-projects', 'vision')).slice(0, 2), ['vision', '2.0']);
  assert.deepEqual((await row('statement-projects', 'nlp-grant')).slice(0, 2), ['nlp-grant', '2.0']);
  assert.deepEqual((await row('statement-groups', 'cv')).slice(0, 2), ['cv', '4.0']);
  const meiRow = await row('statement-users', 'mei');
  assert.equal(meiRow[1], '4.0');
  assert.equal(meiRow[5], '8.00', 'cost: 4 GPU-hours at 2');
  await page.locator('[data-testid=statement-total]', { hasText: '4.0' }).waitFor();
  const csvLink = page.locator('a', { hasText: 'CSV' }).first();
  const download = await admin.request.get(url + await csvLink.getAttribute('href'));
  assert.equal(download.status(), 200);
  const csv = await download.text();
  assert.match(csv, new RegExp(`^month,project,gpu_hours_booked`));
  assert.match(csv, new RegExp(`${month},vision,2\\.000,`));
  if (process.env.SCREENSHOT) await admin.screenshot({ path: process.env.SCREENSHOT.replace('.png', '-statement.png'), fullPage: true });
  assert.deepEqual(await violations(admin), []);
});

test('the member reads their own month on /usage, in English and in Chinese', async () => {
  await openLive(mei, url + '/usage');
  const mine = mei.locator('[data-testid=my-usage]');
  await mine.locator('[data-testid=usage-me]', { hasText: '4.0 GPU-hours booked' }).waitFor();
  await mine.locator('[data-testid=usage-me]', { hasText: 'cost 8.00' }).waitFor();
  await mine.locator('text=The admins show members their groups\' usage.').waitFor();
  // Her group's total (the admins chose "group").
  await mine.locator('[data-testid=usage-groups] tr', { hasText: 'cv' }).waitFor();
  assert.deepEqual(await violations(mei), []);
  if (process.env.SCREENSHOT) await mei.screenshot({ path: process.env.SCREENSHOT.replace('.png', '-usage-en.png'), fullPage: true });
  // Chinese: the page in Chinese, and still axe-clean.
  const chose = await mei.request.put(url + '/api/v1/me/language', { data: { language: 'zh' } });
  assert.ok(chose.ok(), await chose.text());
  await openLive(mei, url + '/usage');
  await mei.locator('h2', { hasText: '我的用量' }).waitFor();
  await mine.locator('[data-testid=usage-me]', { hasText: '预订 4.0 GPU 小时' }).waitFor();
  await mine.locator('text=管理员向成员显示其所在组的用量。').waitFor();
  assert.deepEqual(await violations(mei), []);
  if (process.env.SCREENSHOT) await mei.screenshot({ path: process.env.SCREENSHOT.replace('.png', '-usage-zh.png'), fullPage: true });
  // The admin's statement page in Chinese, axe-clean too.
  const zh = await admin.request.put(url + '/api/v1/me/language', { data: { language: 'zh' } });
  assert.ok(zh.ok());
  await openLive(admin, url + '/admin/statements');
  await admin.locator('[data-testid=statement] h3', { hasText: '月度账单' }).waitFor();
  await admin.locator('[data-testid=statement-projects] caption', { hasText: '按项目' }).waitFor();
  assert.deepEqual(await violations(admin), []);
  await mei.request.put(url + '/api/v1/me/language', { data: { language: 'en' } });
});

test('a member points their messages at a Feishu bot and "Send a test" shows its answer', async () => {
  await openLive(mei, url + '/account');
  const form = mei.locator('[data-testid=my-notifications]');
  const hook = form.locator('[data-testid=chat-hook]');
  await hook.locator('input[name=webhook_url]').fill(hookUrl);
  await hook.locator('select[name=webhook_format]').selectOption('feishu');
  // A wrong secret first: Feishu's own refusal is shown.
  await hook.locator('input[name=webhook_secret]').fill('wrong');
  await hook.locator('button', { hasText: 'Send a test' }).click();
  await hook.locator('[data-testid=chat-answer]', { hasText: '19021' }).waitFor();
  await hook.locator('input[name=webhook_secret]').fill(SECRET);
  await hook.locator('button', { hasText: 'Send a test' }).click();
  await hook.locator('[data-testid=chat-answer]', { hasText: 'Delivered: the service answered 200' }).waitFor();
  await form.locator('button', { hasText: 'Save notifications' }).click();
  await form.locator('[role=status]', { hasText: 'Saved.' }).waitFor();
  const prefs = await (await mei.request.get(url + '/api/v1/me/notifications')).json();
  assert.equal(prefs.webhook_format, 'feishu');
  assert.equal(prefs.webhook_secret_set, true);
  assert.equal(prefs.webhook_secret, undefined);
  // The page after saving: the secret is not in it, and the saved one is used by the test.
  await mei.reload();
  const html = await mei.content();
  assert.ok(!html.includes(SECRET), 'the secret is not on the page');
  await hook.locator('input[name=webhook_secret]').waitFor();
  assert.equal(await hook.locator('input[name=webhook_secret]').inputValue(), '');
  await hook.locator('button', { hasText: 'Send a test' }).click();
  await hook.locator('[data-testid=chat-answer]', { hasText: 'Delivered' }).waitFor();
  if (process.env.SCREENSHOT) await form.screenshot({ path: process.env.SCREENSHOT.replace('.png', '-chat.png') });
  assertOnlyProvokedErrors(failures, [], 0);
});
