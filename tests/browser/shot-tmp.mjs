import { scenario, watchedPage, logIn, bookNow } from './lib.mjs';
const { server, url, browser, failures } = await scenario({
  users: [['ada', 'ada passphrase', ['--unix-user', 'lanes-test-job']], ['bob', 'bob passphrase', []]],
  gpus: 2, extra: ['--sim-background', 'false'],
});
const bob = await browser.newContext();
await bob.request.post(url + '/api/v1/auth/login', { data: { username: 'bob', password: 'bob passphrase' } });
const gpus = await (await bob.request.get(url + '/api/v1/gpus')).json();
await bookNow(await bob.newPage(), url, gpus[0].uuid, 600_000);
for (const lang of ['en', 'zh']) {
  const page = await watchedPage(browser, failures);
  await page.context().addCookies([{ name: 'lang', value: lang, url }]);
  await logIn(page, url, 'ada', 'ada passphrase');
  await page.goto(url + '/queue');
  const form = page.locator('[data-testid=submit-queue]');
  await form.locator('input').nth(0).fill('2');
  await form.locator('input').nth(1).fill('1h');
  await page.locator('[data-testid=forecast]').click();
  await page.locator('[data-testid=forecast-answer]').waitFor();
  console.log(lang, await page.locator('[data-testid=forecast-answer]').textContent());
  await page.locator('section.panel').first().screenshot({ path: `/tmp/forecast-${lang}.png` });
}
await browser.close(); server.kill();
process.exit(0);
