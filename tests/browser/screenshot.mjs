// `make screenshots`: docs/dashboard.png, the dashboard of a real server holding a few
// leases (a semaphore with 3 holders and a waiter, a resource with 2 readers, exclusive
// leases), taken by headless Chromium at 1280x800 in the light scheme.
//
//   node tests/browser/screenshot.mjs [OUT.png]     (MUTEXD_BIN: the server, default build/mutexd)

import { relative, resolve } from "node:path";
import { statSync } from "node:fs";
import { ROOT, Server, acquire, call, launch, sleep, until } from "./harness.mjs";

const out = resolve(process.argv[2] || resolve(ROOT, "docs", "dashboard.png"));
const server = await new Server().start();
const browser = await launch();
const waiter = new AbortController();
try {
  const base = server.url;
  await acquire(base, "jobs/nightly-report", "report-worker-1", { ttl_ms: 60000 });
  await acquire(base, "deploy/production", "ci-deploy-7", { ttl_ms: 600000 });
  const gpu = [];
  for (const [i, ttl] of [[1, 30000], [2, 45000], [3, 20000]])
    gpu.push(await acquire(base, "pool/gpu", `gpu-worker-${i}`, { limit: 3, ttl_ms: ttl }));
  for (const owner of ["web-1", "web-2"])
    await acquire(base, "config/site", owner, { shared: true, ttl_ms: 15000 });
  // A fourth GPU worker waits for a place.
  fetch(base + "/v1/resources/pool/gpu/acquire", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ owner: "gpu-worker-4", ttl_ms: 30000, limit: 3, wait_ms: 120000 }),
    signal: waiter.signal,
  }).catch(() => {});
  await until(async () => (await call(base, "GET", "/v1/resources/pool/gpu")).body.waiters === 1,
    { what: "the waiter" });

  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light", deviceScaleFactor: 1 });
  const page = await context.newPage();
  await page.goto(base + "/ui/#r=pool/gpu");
  await page.waitForSelector('tr[data-resource="pool/gpu"]');
  await page.waitForSelector('#events li[data-type="granted"]');
  // A renewal and a release among the events, and the figures' second sample (5 s on) for
  // grants a second.
  await sleep(1500);
  await call(base, "POST", "/v1/resources/pool/gpu/renew", { body: { lease_id: gpu[0].lease_id, ttl_ms: 30000 } });
  const once = await acquire(base, "jobs/cleanup", "cleanup-1", { ttl_ms: 5000 });
  await call(base, "POST", "/v1/resources/jobs/cleanup/release", { body: { lease_id: once.lease_id } });
  await page.waitForSelector('#events li[data-type="renewed"]');
  await sleep(4500);
  await page.mouse.move(0, 799);
  await page.screenshot({ path: out });
  await context.close();
  console.log(`${relative(process.cwd(), out)}: ${Math.round(statSync(out).size / 1024)} KB`);
} finally {
  waiter.abort();
  await browser.close();
  await server.stop();
}
