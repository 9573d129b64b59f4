// Shared pieces of the browser tests: the release binary, a server on a random port with a
// fresh data dir and a simulated fleet, and Debian's headless Chromium.

import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after } from 'node:test';

export const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
// The release build, as `make run` serves it; LANES_BIN picks another (a debug build, say).
export const bin = process.env.LANES_BIN ?? join(root, 'target/release/lanes');

/** "Sat 5 Dec 22:35": the moment `ms` (epoch milliseconds) at `hours` east of UTC, as every
 * page writes a moment of this year (English). */
export function written(ms, hours) {
  const t = new Date(ms + hours * 3600e3);
  const pad = (n) => String(n).padStart(2, '0');
  const weekday = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'][t.getUTCDay()];
  const month = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'][t.getUTCMonth()];
  return `${weekday} ${t.getUTCDate()} ${month} ${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}`;
}

export function freshDataDir() {
  return mkdtempSync(join(tmpdir(), 'lanes-browser-'));
}

/** Creates an account the way an operator does, with `lanes user add`. */
export function addUser(dataDir, username, password, extra = []) {
  execFileSync(bin, ['user', 'add', '--username', username, '--password-stdin', '--data-dir', dataDir, ...extra],
    { input: `${password}\n`, stdio: ['pipe', 'ignore', 'inherit'] });
}

/**
 * Starts the server and resolves with `{child, url}` once it prints where it listens. `gpus`:
 * a number of simulated cards, or any `--gpus` value (`none`, `sim:4:0,1`).
 */
export function startServer({ dataDir, listen = '127.0.0.1:0', gpus = 4, poll = '250ms', extra = [], cwd = root }) {
  const source = typeof gpus === 'number' ? `sim:${gpus}` : gpus;
  // The web assets are the ones embedded in the binary, as an installed Lanes serves them.
  const child = spawn(bin, [
    'serve', '--gpus', source, '--listen', listen, '--data-dir', dataDir,
    '--poll-interval', poll, ...extra,
  ], { cwd, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, RUST_LOG: 'warn' } });
  return new Promise((resolveUrl, reject) => {
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolveUrl({ child, url: m[1] });
    });
    child.on('exit', (code) => reject(new Error(`lanes exited with ${code} before listening`)));
    setTimeout(() => reject(new Error('lanes did not start within 20 s')), 20_000);
  });
}

/**
 * Makes the Unix account `name` for jobs when running as root (as CI does) and it is missing;
 * not root, jobs run as the server's own user and no account is needed.
 */
export function ensureUnixAccount(name) {
  if (process.getuid() !== 0) return;
  try {
    execFileSync('id', [name], { stdio: 'ignore' });
  } catch {
    execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', name]);
  }
}

export function stopServer(child) {
  return new Promise((done) => {
    if (child.exitCode !== null) return done();
    child.once('exit', done);
    child.kill('SIGTERM');
  });
}

export function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
}

/** A page that records script errors into `failures`. */
export async function watchedPage(browser, failures) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') failures.push(`console error: ${m.text()}`); });
  return page;
}

/**
 * Opens `address` and waits until the page is live (hydrated: `<html data-live>`). A page
 * that arrives with its data shows it before its buttons answer; type and click after this.
 */
export async function openLive(page, address) {
  const response = await page.goto(address);
  await page.locator('html[data-live]').waitFor({ state: 'attached' });
  return response;
}

/** Logs in through the form on /login and waits to land on `landing`. */
export async function logIn(page, url, username, password, landing = '/') {
  await page.goto(url + '/login');
  await page.fill('input[name=username]', username);
  await page.fill('input[name=password]', password);
  await page.click('button[type=submit]');
  await page.waitForURL(url + landing);
}

/** Books `uuid` from now for `ms` milliseconds as the page's user; returns the booking. */
export async function bookNow(page, url, uuid, ms) {
  const start = new Date();
  const booked = await page.request.post(url + '/api/v1/bookings', {
    data: { gpus: [uuid], start: start.toISOString(), end: new Date(+start + ms).toISOString() },
  });
  assert.equal(booked.status(), 201, await booked.text());
  return booked.json();
}

/**
 * Fails unless the page logged nothing but the refused requests the test provoked on purpose:
 * Chromium logs each as "Failed to load resource … status of N"; `statuses` are the expected
 * codes and `count` how many such lines there must be.
 */
export function assertOnlyProvokedErrors(failures, statuses, count) {
  const provoked = new RegExp(`Failed to load resource: the server responded with a status of (${statuses.join('|')})`);
  assert.equal(failures.filter((f) => provoked.test(f)).length, count, failures.join('\n'));
  assert.deepEqual(failures.filter((f) => !provoked.test(f)), [], 'no page errors');
}

/**
 * One page's scenario: a fresh data dir with `users` (`[username, password, extra]`, added as an
 * operator would), a server on a simulated fleet of `gpus` cards, and the browser. All of it
 * is cleaned up after the file's tests. Resolves with `{dataDir, server, url, browser, failures}`.
 */
export async function scenario({ users, gpus, extra = [] }) {
  const dataDir = freshDataDir();
  for (const [username, password, more = []] of users) addUser(dataDir, username, password, more);
  const server = await startServer({ dataDir, gpus, extra });
  const browser = await launchBrowser();
  after(async () => {
    await browser.close();
    await stopServer(server.child);
    rmSync(dataDir, { recursive: true, force: true });
  });
  return { dataDir, server, url: server.url, browser, failures: [] };
}
