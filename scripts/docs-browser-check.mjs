// `npm run docs:browser`: the built docs site (built first when missing) in a real browser. Serves
// docs/.vitepress/dist/ on a loopback port and drives Debian's `chromium` (or CHROMIUM_PATH) through
// playwright-core: the home page renders with an install line and a connection sample per client library
// (code-group tabs, also on Getting started), the local search finds "fair lock", every sidebar link answers
// 200 with a non-empty page, no code block of any of those pages scrolls sideways at 1280 px, and no page
// logs a console error. Screenshots of the home page and of a primitive's
// page go to .docs-results/ (CI output).
import { execFileSync } from 'node:child_process';
import { createReadStream, existsSync, mkdirSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize } from 'node:path';
import { chromium } from 'playwright-core';

const root = join(import.meta.dirname, '..');
const site = join(root, 'docs', '.vitepress', 'dist');
const results = join(root, '.docs-results');

// On a fresh clone (no site built yet) it builds the site first, so that the script works by itself; CI runs
// `npm run docs:build` just before, and a site already built is checked as it is.
if (!existsSync(join(site, 'index.html'))) {
  console.log('docs:browser: no built site in docs/.vitepress/dist/: running npm run docs:build first');
  execFileSync('npm', ['run', 'docs:build'], { cwd: root, stdio: 'inherit' });
}

function findChromium() {
  if (process.env.CHROMIUM_PATH) return process.env.CHROMIUM_PATH;
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim();
    } catch {
      // not this one
    }
  }
  console.error('docs:browser needs Chromium: apt-get install -y chromium, or set CHROMIUM_PATH');
  process.exit(1);
}

const types = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
  '.svg': 'image/svg+xml',
  '.json': 'application/json',
  '.woff2': 'font/woff2',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain',
};

/** A static server for the built site, as a host would serve it: `/a/` is `/a/index.html`, else 404. */
function serve() {
  const server = createServer((request, response) => {
    const path = decodeURIComponent(new URL(request.url ?? '/', 'http://localhost').pathname);
    let file = normalize(join(site, path));
    if (!file.startsWith(site)) {
      response.writeHead(403).end();
      return;
    }
    if (existsSync(file) && statSync(file).isDirectory()) file = join(file, 'index.html');
    if (!existsSync(file)) {
      response.writeHead(404, { 'content-type': types['.html'] });
      createReadStream(join(site, '404.html')).pipe(response);
      return;
    }
    response.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' });
    createReadStream(file).pipe(response);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const failures = [];

/** The code blocks of the page that scroll sideways: a line too long for the column (at most 3, shortened). */
function overflowingCode(page) {
  return page.locator('.vp-doc div[class*="language-"] pre').evaluateAll((blocks) =>
    blocks
      .filter((pre) => pre.scrollWidth > pre.clientWidth + 1)
      .slice(0, 3)
      .map((pre) => {
        const lines = [...pre.querySelectorAll('.line')].map((line) => line.textContent ?? '');
        const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
        return `${pre.scrollWidth - pre.clientWidth} px too wide: ${JSON.stringify(longest.slice(0, 60))}…`;
      }),
  );
}

/** The client libraries whose install line and connection sample the site must show, by tab label. */
const CLIENT_TABS = [
  { tab: 'ioredis', install: 'npm install flowlock ioredis', connect: "from 'ioredis'" },
  { tab: 'node-redis', install: 'npm install flowlock redis', connect: "from 'redis'" },
  { tab: 'iovalkey', install: 'npm install flowlock iovalkey', connect: "from 'iovalkey'" },
  { tab: 'Valkey GLIDE', install: 'npm install flowlock @valkey/valkey-glide', connect: "from '@valkey/valkey-glide'" },
];

/**
 * Clicks each client's tab in every code group of the page and checks that the install line and the
 * connection sample show (visible, not only in the DOM).
 */
async function checkClientTabs(page, path) {
  const groups = page.locator('.vp-code-group');
  const count = await groups.count();
  const seen = new Map(CLIENT_TABS.map((client) => [client.tab, { install: false, connect: false }]));
  for (let g = 0; g < count; g++) {
    const group = groups.nth(g);
    for (const client of CLIENT_TABS) {
      const label = group.locator('.tabs label', { hasText: new RegExp(`^${client.tab}$`) });
      if ((await label.count()) === 0) continue;
      await label.first().click();
      const shown = (await group.locator('div[class*="language-"].active').first().textContent()) ?? '';
      const found = seen.get(client.tab);
      if (shown.includes(client.install)) found.install = true;
      if (shown.includes(client.connect) && shown.includes('createLockClient')) found.connect = true;
    }
  }
  const missing = [...seen].flatMap(([tab, found]) => [
    ...(found.install ? [] : [`${tab} install line`]),
    ...(found.connect ? [] : [`${tab} connection sample`]),
  ]);
  if (missing.length) fail(`${path}: no tab shows ${missing.join(', ')}`);
  else
    ok(
      `${path}: an install line and a connection sample for each client (${CLIENT_TABS.map((c) => c.tab).join(', ')})`,
    );
}
const fail = (message) => {
  failures.push(message);
  console.error(`✖ ${message}`);
};
const ok = (message) => console.log(`✔ ${message}`);

const server = await serve();
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({ executablePath: findChromium(), args: ['--no-sandbox'] });
mkdirSync(results, { recursive: true });

try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  let current = '/';
  page.on('console', (message) => {
    // A failed load is reported below with its URL.
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) {
      fail(`console error on ${current}: ${message.text()}`);
    }
  });
  page.on('response', (response) => {
    if (response.status() >= 400) fail(`HTTP ${response.status()} for ${response.url()} (on ${current})`);
  });
  // A request the next navigation cancelled (net::ERR_ABORTED: VitePress prefetches linked pages' chunks, which
  // a loaded machine may not finish before the check moves on) is no broken site; an HTTP error status is
  // caught above, and any other failure (refused, reset, timed out) is one.
  page.on('requestfailed', (request) => {
    const why = request.failure()?.errorText ?? 'unknown';
    if (why !== 'net::ERR_ABORTED') fail(`request failed (${why}): ${request.url()} (on ${current})`);
  });
  page.on('pageerror', (error) => fail(`uncaught error on ${current}: ${error.message}`));

  // The home page renders: its hero and its feature cards.
  const home = await page.goto(`${base}/`, { waitUntil: 'networkidle' });
  if (home?.status() !== 200) fail(`home page: HTTP ${home?.status()}`);
  const hero = (await page.locator('.VPHero .name').first().textContent({ timeout: 10_000 }))?.trim();
  if (hero !== 'flowlock') fail(`home page: hero name is ${JSON.stringify(hero)}`);
  const features = await page.locator('.VPFeature').count();
  if (features < 3) fail(`home page: ${features} feature cards`);
  else ok(`home page renders (hero "${hero}", ${features} feature cards)`);
  await page.screenshot({ path: join(results, 'home.png'), fullPage: true });
  await checkClientTabs(page, '/');
  const homeOverflow = await overflowingCode(page);
  if (homeOverflow.length) fail(`/: code scrolls sideways at 1280 px: ${homeOverflow.join('; ')}`);

  // Dark mode: the appearance switch toggles the `dark` class on <html>.
  const wasDark = await page.evaluate(() => document.documentElement.classList.contains('dark'));
  await page.locator('.VPNavBarAppearance button, .VPSwitchAppearance').first().click();
  const isDark = await page.evaluate(() => document.documentElement.classList.contains('dark'));
  if (isDark === wasDark) fail('the appearance switch did not toggle dark mode');
  else ok(`dark mode toggles (${wasDark ? 'dark → light' : 'light → dark'})`);
  await page.locator('.VPNavBarAppearance button, .VPSwitchAppearance').first().click(); // back, for the screenshots

  // Local search finds "fair lock".
  await page.locator('#local-search button, .VPNavBarSearchButton').first().click();
  await page.locator('.VPLocalSearchBox input').fill('fair lock');
  const hit = page.locator('.VPLocalSearchBox .result').first();
  await hit.waitFor({ timeout: 10_000 });
  const hits = await page.locator('.VPLocalSearchBox .result').allTextContents();
  if (!hits.some((text) => /fair lock/i.test(text)))
    fail(`search "fair lock": no result names it (${hits.length} results)`);
  else
    ok(
      `search "fair lock": ${hits.length} results, the first ${JSON.stringify(hits[0].replace(/\s+/g, ' ').trim().slice(0, 60))}`,
    );
  await page.keyboard.press('Escape');

  // Every sidebar link resolves: HTTP 200 and a page with content.
  current = '/guide/getting-started.html';
  await page.goto(`${base}${current}`, { waitUntil: 'networkidle' });
  const links = [
    ...new Set(
      await page.locator('.VPSidebar a[href]').evaluateAll((anchors) => anchors.map((a) => a.getAttribute('href'))),
    ),
  ];
  if (links.length < 20) fail(`the sidebar has ${links.length} links`);
  const before = failures.length;
  for (const href of links) {
    const url = new URL(href, `${base}${current}`);
    if (url.origin !== base) continue;
    current = url.pathname;
    const response = await page.goto(url.href, { waitUntil: 'networkidle' });
    const status = response?.status();
    const text =
      (
        await page
          .locator('main .vp-doc')
          .first()
          .textContent({ timeout: 10_000 })
          .catch(() => '')
      )?.trim() ?? '';
    if (status !== 200) fail(`${url.pathname}: HTTP ${status}`);
    else if (text.length < 50) fail(`${url.pathname}: ${text.length} characters of content`);
    else if ((await page.title()).startsWith('404')) fail(`${url.pathname}: a 404 page`);
    const overflow = await overflowingCode(page);
    if (overflow.length) fail(`${url.pathname}: code scrolls sideways at 1280 px: ${overflow.join('; ')}`);
    if (url.pathname === '/guide/getting-started.html') await checkClientTabs(page, url.pathname);
  }
  if (failures.length === before) {
    ok(`${links.length} sidebar links resolve with content, and no code block among them scrolls sideways`);
  }
  for (const page of ['/operations/tls.html', '/operations/redis-data.html', '/guide/flows.html']) {
    if (!links.some((href) => new URL(href, `${base}/guide/`).pathname === page)) fail(`the sidebar lacks ${page}`);
  }

  // The benchmark charts (benchmarks/charts/*.svg, through the docs/benchmarks/charts link) are drawn.
  current = '/benchmarks/results.html';
  await page.goto(`${base}${current}`, { waitUntil: 'networkidle' });
  const charts = await page
    .locator('main img')
    .evaluateAll((images) => images.map((image) => ({ alt: image.getAttribute('alt'), width: image.naturalWidth })));
  const broken = charts.filter((chart) => chart.width === 0);
  if (charts.length < 9) fail(`benchmark results: ${charts.length} charts, expected one per scenario (a to i)`);
  else if (broken.length) fail(`benchmark results: charts not drawn: ${broken.map((chart) => chart.alt).join(', ')}`);
  else ok(`benchmark results: ${charts.length} charts drawn`);

  current = '/primitives/fair-lock.html';
  await page.goto(`${base}${current}`, { waitUntil: 'networkidle' });
  await page.screenshot({ path: join(results, 'primitive-fair-lock.png'), fullPage: true });
  ok(`screenshots in ${results}: home.png, primitive-fair-lock.png`);
} finally {
  await browser.close();
  server.close();
}

if (failures.length) {
  console.error(`\ndocs:browser: ${failures.length} problem(s)`);
  process.exit(1);
}
console.log('docs:browser: the site passes');
