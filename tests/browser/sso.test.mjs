// Browser test of signing in through the lab's OpenID Connect provider, in Debian's headless
// Chromium against the release build and a real provider (npm's oidc-provider, started here).
//
// The admin lets directory accounts in at once. A member presses "Sign in with Test Lab SSO"
// on the login page, signs in on the provider's own page, and lands on the dashboard; their
// account page shows the Unix account the provider's claim named, and the admin sees them in
// the group the provider's groups claim gave. Their password form is replaced by a note, and
// they make a one-time code for the terminal.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { writeFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  root, freshDataDir, addUser, startServer, stopServer, launchBrowser, watchedPage, logIn,
  openLive, ensureUnixAccount,
} from './lib.mjs';

const port = await new Promise((done) => {
  const probe = createServer().listen(0, '127.0.0.1', () => {
    const { port: free } = probe.address();
    probe.close(() => done(free));
  });
});
const provider = spawn('node', [join(root, 'tests/browser/oidc/provider.mjs'), '--port', '0',
  '--redirect', `http://127.0.0.1:${port}/auth/oidc/callback`], { stdio: ['ignore', 'pipe', 'ignore'] });
const issuer = await new Promise((done, fail) => {
  let out = '';
  provider.stdout.on('data', (chunk) => {
    out += chunk;
    const m = out.match(/issuer=(\S+)/);
    if (m) done(m[1]);
  });
  provider.on('exit', (code) => fail(new Error(`the provider exited with ${code}`)));
});
const dataDir = freshDataDir();
writeFileSync(join(dataDir, 'oidc-secret'), 'lanes-client-secret-1\n');
addUser(dataDir, 'root-admin', 'admin passphrase', ['--admin']);
ensureUnixAccount('oidcalice');
const server = await startServer({
  dataDir,
  gpus: 2,
  listen: `127.0.0.1:${port}`,
  extra: [
    '--oidc-issuer', issuer, '--oidc-name', 'Test Lab SSO', '--oidc-client-id', 'lanes',
    '--oidc-client-secret-file', join(dataDir, 'oidc-secret'),
    '--oidc-scopes', 'profile,email,groups,unix', '--oidc-unix-user-claim', 'unix_user',
    '--directory-admin-group', 'lanes-admins',
  ],
});
const { url } = server;
const browser = await launchBrowser();
const failures = [];
after(async () => {
  await browser.close();
  await stopServer(server.child);
  provider.kill('SIGTERM');
  rmSync(dataDir, { recursive: true, force: true });
});
let admin, member;

test('the admin lets directory accounts in at once and makes the vision group', async () => {
  admin = await watchedPage(browser, failures);
  await logIn(admin, url, 'root-admin', 'admin passphrase');
  const made = await admin.request.post(url + '/api/v1/groups', { data: { name: 'vision' } });
  assert.equal(made.status(), 201, await made.text());
  await openLive(admin, url + '/admin/policy');
  const box = admin.locator('input[name=approve_directory_accounts]');
  assert.equal(await box.isChecked(), true, 'new directory accounts wait by default');
  await box.uncheck();
  await admin.click('button:text("Save settings")');
  await admin.getByRole('status').filter({ hasText: 'Saved' }).waitFor();
});

test('a member signs in through the provider\'s own page and lands on the dashboard', async () => {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  member = await context.newPage();
  member.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  await openLive(member, url + '/login');
  const sso = member.locator('[data-testid=sign-in-sso]');
  assert.equal((await sso.textContent()).trim(), 'Sign in with Test Lab SSO');
  await member.screenshot({ path: join(root, 'target/sso-login.png') });
  await sso.click();
  await member.waitForURL((u) => u.href.startsWith(issuer));
  await member.locator('h1', { hasText: 'Test Lab sign-in' }).waitFor();
  await member.fill('input[name=login]', 'oidc-alice');
  await member.fill('input[name=password]', 'alice-sso-password-1');
  await member.click('button:text("Sign in")');
  await member.waitForURL(url + '/');
  await member.locator('html[data-live]').waitFor({ state: 'attached' });
  await member.screenshot({ path: join(root, 'target/sso-dashboard.png') });
});

test('the account has the Unix account and group the provider gave, and no password here', async () => {
  await openLive(member, url + '/account');
  const facts = await member.locator('dl.facts').textContent();
  assert.match(facts, /oidc-alice/);
  assert.match(facts, /oidcalice/, 'jobs run as the claim\'s Unix account');
  await member.getByText('Your password is the lab directory\'s').waitFor();
  const users = await (await admin.request.get(url + '/api/v1/users')).json();
  const alice = users.find((u) => u.username === 'oidc-alice');
  assert.equal(alice.source, 'oidc');
  assert.deepEqual(alice.groups, ['vision']);
  await openLive(admin, url + '/admin/users');
  await admin.locator('tr[data-username=oidc-alice] [data-testid=account-source]', { hasText: 'OIDC' }).waitFor();
});

test('the member makes a one-time code for lanes login', async () => {
  await member.click('[data-testid=make-terminal-code]');
  const code = (await member.locator('[data-testid=terminal-code]').textContent()).trim();
  assert.match(code, /^[A-Z2-9]{5}-[A-Z2-9]{5}$/);
  assert.deepEqual(failures, []);
});
