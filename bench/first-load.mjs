// A first visit on a slow network: how long until a page is interactive, and what it fetched.
//
// For each build given (LANES_BINS, space-separated; default target/release/lanes), starts
// `lanes serve --gpus sim:8` with a fresh data dir and one member, signs the member in through
// the API, then opens each page RUNS times (5) in a fresh browser context (an empty cache) in
// Debian's headless Chromium, the network throttled through the DevTools protocol to
// 1.6 Mbit/s down, 750 kbit/s up and 150 ms of round trip, the CPU at its own speed. For each
// visit it records the time from the navigation's start until the page is live (`<html
// data-live>`, set once hydration ends: the page answers clicks from then on), and the bytes of
// script and wasm the page fetched over the wire, by file. Then, per build, the move from the
// dashboard to the calendar by its link (a page loaded when visited), clicked as soon as the
// dashboard is live and after 5 s on it: time until the calendar's first row of cells is drawn.
//
// The bytes on the wire are what Chromium was sent (brotli: it asks for it from loopback as
// from HTTPS); the brotli column sums the `.br` copies of the same files in SITES (default
// target/site, one per build, in the same order), which must be the sites the builds embed.
// Needs Debian's chromium and the browser tests' packages (`make tools-test`). Prints Markdown.
// Usage:
//   LANES_BINS="old/lanes target/release/lanes" node bench/first-load.mjs
import { chromium } from '../tests/browser/node_modules/playwright-core/index.mjs';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname, basename } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const bins = (process.env.LANES_BINS ?? join(root, 'target/release/lanes')).split(/\s+/).filter(Boolean);
const sites = (process.env.SITES ?? join(root, 'target/site')).split(/\s+/).filter(Boolean);
const RUNS = Number(process.env.RUNS ?? 5);
const PAGES = (process.env.PAGES ?? '/ /calendar /history').split(/\s+/);
const NETWORK = { offline: false, latency: 150, downloadThroughput: 1.6e6 / 8, uploadThroughput: 750e3 / 8 };

function start(bin, dataDir) {
  const child = spawn(bin, ['serve', '--gpus', 'sim:8', '--listen', '127.0.0.1:0', '--data-dir', dataDir],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, RUST_LOG: 'warn' } });
  return new Promise((done, fail) => {
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) done({ child, url: m[1] });
    });
    child.on('exit', (code) => fail(new Error(`${bin} exited with ${code} before listening`)));
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** One cold visit of `path`: ms until live, and bytes of script and wasm by file name. */
async function visit(browser, url, cookies, path) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.addCookies(cookies);
  // The moment hydration marks the page live, on the page's own clock (0 = navigation start).
  await context.addInitScript(() => {
    new MutationObserver((_, observer) => {
      if (document.documentElement?.hasAttribute('data-live')) {
        window.__live = performance.now();
        observer.disconnect();
      }
    }).observe(document, { attributes: true, subtree: true, attributeFilter: ['data-live'] });
  });
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', NETWORK);
  const names = new Map();
  const bytes = new Map();
  cdp.on('Network.responseReceived', (e) => names.set(e.requestId, new URL(e.response.url).pathname));
  cdp.on('Network.loadingFinished', (e) => {
    const name = names.get(e.requestId);
    if (name && /\.(js|wasm)$/.test(name)) bytes.set(basename(name), e.encodedDataLength);
  });
  await page.goto(url + path);
  await page.waitForFunction(() => window.__live !== undefined, null, { timeout: 120_000, polling: 50 });
  const live = await page.evaluate(() => window.__live);
  // What the page needed to go live: a live page then prefetches the pages it links to.
  const needed = new Map(bytes);
  await context.close();
  return { live, bytes: needed };
}

/** From the dashboard, `wait` ms after it is live, the calendar by its link: ms until its
 * first row of cells is drawn. */
async function navigate(browser, url, cookies, wait) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.addCookies(cookies);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.emulateNetworkConditions', NETWORK);
  await page.goto(url + '/');
  await page.locator('html[data-live]').waitFor({ state: 'attached', timeout: 120_000 });
  await page.waitForTimeout(wait);
  const started = Date.now();
  await page.click('nav a[href="/calendar"]');
  await page.locator('[data-testid=calendar] .cal-cell').first().waitFor({ timeout: 120_000 });
  const took = Date.now() - started;
  await context.close();
  return took;
}

function brotliOf(site, files) {
  let total = 0;
  for (const file of files) {
    const br = join(site, 'pkg', `${file}.br`);
    if (!existsSync(br)) throw new Error(`${br} is missing: is SITES the site the build embeds?`);
    total += statSync(br).size;
  }
  return total;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic'],
});
const kb = (b) => (b / 1024).toFixed(1);
console.log(`| build | page | live after (median of ${RUNS}, ms) | runs (ms) | script + wasm on the wire | same files, brotli | files |`);
console.log('|---|---|---:|---|---:|---:|---|');
const moves = [];
for (const [i, bin] of bins.entries()) {
  const site = sites[Math.min(i, sites.length - 1)];
  const dataDir = mkdtempSync(join(tmpdir(), 'lanes-first-load-'));
  execFileSync(bin, ['user', 'add', '--username', 'member', '--password-stdin', '--data-dir', dataDir],
    { input: 'member passphrase\n', stdio: ['pipe', 'ignore', 'inherit'] });
  const { child, url } = await start(bin, dataDir);
  try {
    const login = await fetch(url + '/api/v1/auth/login', {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'member', password: 'member passphrase' }),
    });
    if (!login.ok) throw new Error(`login: ${login.status} ${await login.text()}`);
    const cookies = login.headers.getSetCookie().map((c) => {
      const [pair] = c.split(';');
      const at = pair.indexOf('=');
      return { name: pair.slice(0, at), value: pair.slice(at + 1), url };
    });
    for (const path of PAGES) {
      const runs = [];
      let last;
      for (let r = 0; r < RUNS; r++) {
        last = await visit(browser, url, cookies, path);
        runs.push(Math.round(last.live));
      }
      const wire = [...last.bytes.values()].reduce((a, b) => a + b, 0);
      const files = [...last.bytes.keys()].sort();
      console.log(`| ${bin} | \`${path}\` | ${median(runs)} | ${runs.join(', ')} | ${kb(wire)} KiB | ${kb(brotliOf(site, files))} KiB | ${files.join(', ')} |`);
    }
    for (const wait of [0, 5000]) {
      const took = [];
      for (let r = 0; r < RUNS; r++) took.push(await navigate(browser, url, cookies, wait));
      moves.push(`| ${bin} | ${wait / 1000} s | ${median(took)} | ${took.join(', ')} |`);
    }
  } finally {
    // Gone before its files go: a server that outlived its database would say it was lost.
    const exited = child.exitCode !== null || new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
}
console.log();
console.log(`| build | clicked after the dashboard was live for | dashboard → calendar by its link, until the calendar is drawn (median of ${RUNS}, ms) | runs (ms) |`);
console.log('|---|---:|---:|---|');
for (const line of moves) console.log(line);
await browser.close();
