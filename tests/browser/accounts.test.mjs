// Browser test of accounts and access in Debian's headless Chromium, against the release build.
//
// The operator makes the first admin with `lanes user add --admin`. The admin logs in, creates
// a group and a user on /admin, puts the user in the group, and sees it all in the audit log.
// The new user logs in, sees no Admin link and is refused /admin, makes and revokes an API
// token on /account (the token works against the API while it lives), changes the password
// and logs in with the new one. Finally the admin disables the user, who can no longer log in.

import assert from 'node:assert/strict';
import {
  scenario, watchedPage, logIn, openLive, assertOnlyProvokedErrors,
} from './lib.mjs';
import { test } from 'node:test';

const { server, url, browser, failures } = await scenario({
  users: [
    ['root-admin', 'admin passphrase', ['--admin']],
  ],
  gpus: 2,
});
// Shared by the steps below, which run in order.
let page, form, bobRow, editor, audit, refused, secret, withToken, revoked, second, afterChange;

test('an admin reaches the admin page from the top bar', async () => {
  page = await watchedPage(browser, failures);

  await logIn(page, url, 'root-admin', 'admin passphrase');
  await page.click('nav >> text=Admin');
  await page.waitForURL(url + '/admin');
  await page.locator('[data-testid=users] tr[data-username=root-admin]').waitFor();
});

test('the admin creates a group', async () => {
  await page.click('[data-testid=admin-nav] >> text=Groups');
  await page.waitForURL(url + '/admin/groups');
  assert.equal(await page.locator('[data-testid=admin-nav] a[aria-current=page]').textContent(), 'Groups');
  await page.fill('input[name=group_name]', 'vision');
  await page.fill('input[name=group_description]', 'Vision team');
  await page.click('button:text("Create group")');
  await page.locator('td', { hasText: 'Vision team' }).waitFor();
});

test('a taken username is refused with the server\'s message', async () => {
  await page.click('[data-testid=admin-nav] >> text=Users');
  await page.waitForURL(url + '/admin/users');
  await page.click('summary:text("New user")');
  form = page.locator('[data-testid=create-user]');
  await form.locator('input[name=username]').fill('bob');
  await form.locator('input[name=display_name]').fill('Bob Builder');
  // A Unix account no host has (bob may have one here: other tests make it).
  await form.locator('input[name=unix_user]').fill('lanes-no-such-account');
  // The server's own message shows for what the form cannot check, such as a taken username.
  await form.locator('input[name=password]').fill('bob first passphrase');
  await form.locator('input[name=username]').fill('root-admin');
  await form.locator('button[type=submit]').click();
  await page.getByRole('alert').filter({ hasText: 'already exists' }).waitFor();
});

test('the admin creates a user', async () => {
  await form.locator('input[name=username]').fill('bob');
  await form.locator('button[type=submit]').click();
  await page.getByText('Created bob.').waitFor();
  bobRow = page.locator('[data-testid=users] tr[data-username=bob]');
  await bobRow.waitFor();
  // Accepted (the Unix account may come later, or live only on the nodes), but said: this
  // host, which runs the jobs, has no such account.
  await bobRow.getByTestId('unix-missing').filter({ hasText: 'No Unix account lanes-no-such-account on this server' }).waitFor();
  assert.equal(await page.locator('[data-testid=users] tr[data-username=root-admin] [data-testid=unix-missing]').count(), 0);
});

test('the admin puts the user in the group', async () => {
  await bobRow.locator('button:text("Edit")').click();
  editor = page.locator('tr.editor form');
  await editor.locator('input[name=groups]').fill('vision');
  await editor.locator('button[type=submit]').click();
  await bobRow.locator('td', { hasText: 'vision' }).waitFor();
  await page.locator('td', { hasText: 'bob' }).filter({ hasText: /^bob$/ }).first().waitFor();
  await page.click('[data-testid=admin-nav] >> text=Groups');
  const vision = page.locator('[data-testid=groups] tr', { hasText: 'Vision team' });
  await vision.waitFor();
  assert.match(await vision.textContent(), /bob/);
  // On the Groups page itself: take bob out, and put the admin in.
  await vision.locator('button[aria-label="Take bob out of vision"]').click();
  await vision.locator('.member', { hasText: 'bob' }).waitFor({ state: 'detached' });
  await vision.locator('select[name=member]').selectOption('root-admin');
  await vision.locator('button:text("Add")').click();
  await vision.locator('.member', { hasText: 'root-admin' }).waitFor();
  const users = await (await page.request.get(url + '/api/v1/users')).json();
  assert.deepEqual(users.find((u) => u.username === 'root-admin').groups, ['vision']);
  assert.deepEqual(users.find((u) => u.username === 'bob').groups, []);
});

test('the audit log shows the changes and who made them', async () => {
  // A deep link opens the section itself, server-routed.
  await openLive(page, url + '/admin/audit');
  audit = page.locator('[data-testid=audit]');
  await audit.locator('code', { hasText: 'user.create' }).first().waitFor();
  await audit.locator('code', { hasText: 'group.create' }).first().waitFor();
  await audit.locator('td', { hasText: 'groups [vision]' }).first().waitFor();
});

test('the audit log filters by who and what', async () => {
  const filter = page.locator('[data-testid=audit-filter]');
  await filter.locator('input[name=actor]').fill('root-admin');
  await filter.locator('input[name=action]').fill('group.create');
  await filter.locator('button[type=submit]').click();
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=audit] code')].every((c) => c.textContent === 'group.create'));
  assert.equal(await audit.locator('tbody tr').count(), 1);
  assert.match(await audit.locator('tbody tr').textContent(), /root-admin.*group\.create.*vision/);
  await filter.locator('input[name=action]').fill('no.such.action');
  await filter.locator('button[type=submit]').click();
  await page.locator('[data-testid=audit-empty]').waitFor();
  assert.equal(await page.locator('[data-testid=audit-page]').textContent(), 'Page 1');
});

test('the new user logs in, and is kept out of the admin page', async () => {
  await page.click('form.logout button');
  await page.waitForURL(/\/login$/);

  // The new user.
  await logIn(page, url, 'bob', 'bob first passphrase');
  await page.locator('[data-testid=whoami]', { hasText: 'Bob Builder' }).waitFor();
  assert.equal(await page.locator('nav >> text=Admin').count(), 0, 'no Admin link for users');
  refused = await page.request.get(url + '/admin');
  assert.equal(refused.status(), 403);
});

test('the user creates an API token, shown once, that acts as them', async () => {
  await page.click('[data-testid=whoami]');
  await page.waitForURL(url + '/account');
  await page.getByText('No tokens.').waitFor();
  await page.fill('input[name=token_name]', 'laptop CLI');
  await page.click('button:text("Create token")');
  secret = (await page.locator('[data-testid=token-secret]').textContent()).trim();
  assert.match(secret, /^lanes_/);
  withToken = await page.request.get(url + '/api/v1/me', {
    headers: { authorization: `Bearer ${secret}` },
  });
  assert.equal((await withToken.json()).username, 'bob');
  await page.locator('td', { hasText: 'laptop CLI' }).waitFor();
});

test('revoking the token stops it', async () => {
  await page.click('button:text("Revoke")');
  await page.getByText('No tokens.').waitFor();
  revoked = await page.request.get(url + '/api/v1/me', {
    headers: { authorization: `Bearer ${secret}` },
  });
  assert.equal(revoked.status(), 401);
});

test('changing the password logs the user out and revokes their tokens; the new one works', async () => {
  // A second token lives until the password changes (the revoke box is checked by default).
  await page.fill('input[name=token_name]', 'old laptop');
  await page.click('button:text("Create token")');
  second = (await page.locator('[data-testid=token-secret]').textContent()).trim();
  assert.ok(await page.locator('input[name=revoke_tokens]').isChecked(), 'revoking is the default');

  await page.fill('input[name=current_password]', 'not my password');
  await page.fill('input[name=new_password]', 'bob second passphrase');
  await page.fill('input[name=new_password_again]', 'bob second passphrase');
  await page.click('button:text("Change password")');
  await page.getByRole('alert').filter({ hasText: 'current password is wrong' }).waitFor();
  await page.fill('input[name=current_password]', 'bob first passphrase');
  await page.click('button:text("Change password")');
  await page.waitForURL(/\/login\?notice=password$/);
  await page.getByText('Your password was changed').waitFor();
  await logIn(page, url, 'bob', 'bob second passphrase');
  afterChange = await page.request.get(url + '/api/v1/me', {
    headers: { authorization: `Bearer ${second}` },
  });
  assert.equal(afterChange.status(), 401, 'a new password revokes the tokens');
});

test('a disabled user cannot log in', async () => {
  await page.click('form.logout button');
  await page.waitForURL(/\/login$/);

  // The admin disables the user.
  await logIn(page, url, 'root-admin', 'admin passphrase');
  await openLive(page, url + '/admin');
  await bobRow.locator('button:text("Disable")').click();
  await bobRow.locator('td', { hasText: 'disabled' }).waitFor();
  await page.click('form.logout button');
  await page.waitForURL(/\/login$/);
  await page.fill('input[name=username]', 'bob');
  await page.fill('input[name=password]', 'bob second passphrase');
  await page.click('button[type=submit]');
  await page.getByText('Wrong username or password.').waitFor();
});

test('no errors in the page', async () => {
  // Chromium logs each refused request; the test provoked exactly two (a taken username: 409,
  // a wrong current password: 403).
  assertOnlyProvokedErrors(failures, [409, 403], 2);
});
