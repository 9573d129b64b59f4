// Browser test of a notebook in a booking, in Debian's headless Chromium, against the release
// build, as root (the notebook runs as its member, which needs it; CI runs as root).
//
// Ada's login profile activates a virtual environment with Jupyter Server (from PyPI's wheels,
// tests/notebook-member.sh). She books a card, and on the Jobs page presses JupyterLab: the tab
// goes to /sessions/ID/, shows that her notebook is starting, and reaches her Jupyter. From that
// page a cell runs in a new kernel over its websocket through the portal and prints the booked
// card's UUID and her uid. Bob, another member, is refused the session; its token is in no page.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { root, scenario, ensureUnixAccount, watchedPage, logIn, bookNow, openLive } from './lib.mjs';

const MEMBER = 'lanes-test-nb';
const isRoot = process.getuid() === 0;
let ctx;
if (isRoot) {
  execFileSync('bash', [join(root, 'tests/notebook-member.sh'), MEMBER], { stdio: ['ignore', 'ignore', 'inherit'] });
  ensureUnixAccount('lanes-test-job');
  const notices = mkdtempSync('/tmp/lanes-notebook-notices-');
  chmodSync(notices, 0o711);
  ctx = await scenario({
    users: [
      ['ada', 'ada passphrase', ['--unix-user', MEMBER]],
      ['bob', 'bob passphrase', ['--unix-user', 'lanes-test-job']],
    ],
    gpus: 2,
    extra: ['--sim-background', 'false', '--notice-dir', notices],
  });
}

test('one click on the Jobs page opens the member\'s notebook on the booked card', { skip: !isRoot && 'needs root' }, async () => {
  const { url, browser, failures, dataDir } = ctx;
  const ada = await watchedPage(browser, failures);
  await logIn(ada, url, 'ada', 'ada passphrase');
  const gpus = await (await ada.request.get(url + '/api/v1/gpus')).json();
  const card = gpus.sort((a, b) => a.pci_bus_id.localeCompare(b.pci_bus_id))[1];
  const booking = await bookNow(ada, url, card.uuid, 600_000);

  await openLive(ada, url + '/jobs');
  await ada.locator('[data-testid=submit-job] select').first().selectOption(String(booking.id));
  await ada.click('[data-testid=open-jupyter]');
  await ada.waitForURL(/\/sessions\/\d+\//, { timeout: 20_000 });
  const id = Number(ada.url().match(/\/sessions\/(\d+)\//)[1]);
  // The portal's "starting" page reloads itself until Jupyter answers.
  await ada.waitForFunction(() => !document.title.startsWith('Lanes'), null, { timeout: 60_000 });

  assert.equal(await ada.title(), 'Jupyter Server');
  // A cell, from the session's own page (its origin is the portal's), over the kernel's
  // websocket through the portal.
  const printed = await ada.evaluate(async (id) => {
    const base = `/sessions/${id}`;
    const made = await fetch(`${base}/api/kernels`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"python3"}',
    });
    if (!made.ok) return `kernel: ${made.status} ${await made.text()}`;
    const kernel = (await made.json()).id;
    const socket = new WebSocket(`${location.origin.replace('http', 'ws')}${base}/api/kernels/${kernel}/channels`);
    return await new Promise((resolve) => {
      let out = '';
      socket.onopen = () => socket.send(JSON.stringify({
        header: { msg_id: 'cell-1', username: 'ada', session: 'browser', msg_type: 'execute_request', version: '5.3' },
        parent_header: {}, metadata: {}, channel: 'shell', buffers: [],
        content: { code: "import os\nprint(os.environ.get('CUDA_VISIBLE_DEVICES'), os.getuid())", silent: false, store_history: false, user_expressions: {}, allow_stdin: false, stop_on_error: true },
      }));
      socket.onmessage = (event) => {
        const m = JSON.parse(event.data);
        if (m.parent_header.msg_id !== 'cell-1') return;
        if (m.header.msg_type === 'stream') out += m.content.text;
        if (m.header.msg_type === 'error') resolve(`error: ${m.content.evalue}`);
        if (m.header.msg_type === 'status' && m.content.execution_state === 'idle') resolve(out);
      };
      socket.onerror = () => resolve('websocket error');
    });
  }, id);
  const uid = execFileSync('id', ['-u', MEMBER]).toString().trim();
  assert.equal(printed.trim(), `${card.uuid} ${uid}`);

  // The Jobs page lists it with its link.
  await openLive(ada, url + '/jobs');
  const row = ada.locator(`tr[data-job="${id}"]`);
  await row.locator('[data-testid=open-session]').waitFor();
  assert.equal(await row.locator('[data-testid=open-session]').getAttribute('href'), `/sessions/${id}/`);

  // Jupyter's token is in no page the browser got; Bob may not open Ada's session.
  const runs = join(dataDir, 'jobs');
  const run = readdirSync(runs).find((d) => existsSync(join(runs, d, 'session-token')));
  const secret = readFileSync(join(runs, run, 'session-token'), 'utf8').trim();
  const page = await ada.request.get(`${url}/sessions/${id}/`);
  assert.ok(!(await page.text()).includes(secret), 'the session page shows Jupyter\'s token');
  const bob = await watchedPage(browser, []);
  await logIn(bob, url, 'bob', 'bob passphrase');
  const refused = await bob.goto(`${url}/sessions/${id}/`);
  assert.equal(refused.status(), 403);
  assert.match(await bob.textContent('body'), /another member's/);
  // Provoked: the starting page's 503s, and the favicon Jupyter Server's bare landing page
  // asks for (it ships none without a frontend).
  assert.deepEqual(failures.filter((f) => !/status of (503|404)/.test(f)), []);

  // Jobs outlive their server (it adopts them again when it comes back): end the booking, and
  // with it the notebook, before the server stops.
  assert.equal((await ada.request.delete(`${url}/api/v1/bookings/${booking.id}`)).status(), 200);
  for (let i = 0; i < 100; i++) {
    const job = await (await ada.request.get(`${url}/api/v1/jobs/${id}`)).json();
    if (!['running', 'queued'].includes(job.state)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const after = await ada.request.get(`${url}/sessions/${id}/api/status`);
  assert.equal(after.status(), 409);
});
