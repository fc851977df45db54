// The dashboard in a real browser against one real server (authorization off): the page
// loads from its own origin alone and without an error, shows leases live (grants and
// releases within 2 s, no reload), every holder of a semaphore and of a shared resource,
// and stays within a few held requests, without polling, whatever the number of leases.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  Server, acquire, call, launch, listedResources, openPage, release, rowHolders, sleep, until,
} from "./harness.mjs";

let server;
let browser;

before(async () => {
  server = await new Server().start();
  browser = await launch();
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

// Chromium logs a failed fetch as a console error of its own ("Failed to load resource: ...
// 404"): on a page that works, there is none, nor any other console message of type error.
function unexpectedErrors(rec) {
  return rec.errors.map((e) => rec.consoleUrls.get(e) ? `${e} (${rec.consoleUrls.get(e)})` : e);
}

// The requests that got no answer, or an error status, so far.
function failedRequests(rec) {
  return rec.requests.filter((r) => r.failed || r.status >= 400).map((r) => `${r.method} ${r.url}: ${r.failed || r.status}`);
}

describe("the dashboard, one server", () => {
  test("loads from its own origin only, with no console or page error", async () => {
    const lease = await acquire(server.url, "load/one", "loader");
    const { context, page, rec } = await openPage(browser, server.url + "/ui/");
    try {
      await page.waitForSelector('tr[data-resource="load/one"]', { timeout: 5000 });
      await until(() => page.$eval("#fig-leases", (e) => e.textContent !== "—"), { what: "the figures" });
      await until(() => page.$eval("#servers-note", (e) => !e.hidden), { what: "the server group's note" });
      assert.equal(await page.$eval("#partition-map", (e) => e.hidden), true); // alone: no partitions
      const origin = new URL(server.url).origin;
      assert.ok(rec.requests.length >= 8, `the page, its files and its API calls: ${rec.requests.length}`);
      const foreign = rec.requests.filter((r) => new URL(r.url).origin !== origin);
      assert.deepEqual(foreign.map((r) => r.url), [], "requests that left the server's origin");
      // Its files, and the API calls that make it live, all went to the server.
      const paths = new Set(rec.requests.map((r) => new URL(r.url).pathname));
      for (const p of ["/ui/", "/ui/app.js", "/ui/api.js", "/ui/app.css", "/v1/whoami", "/v1/resources", "/metrics"])
        assert.ok(paths.has(p), `${p} was requested: ${[...paths].join(" ")}`);
      assert.deepEqual(unexpectedErrors(rec), []);
      assert.equal(await page.$eval("#conn", (e) => e.dataset.state), "live");
      assert.equal(await page.$eval("#banner", (e) => e.hidden), true);
    } finally {
      await context.close();
      await release(server.url, lease);
    }
  });

  test("on a server without --ha, loads with no console error and no failed request", async () => {
    const { context, page, rec } = await openPage(browser, server.url + "/ui/");
    try {
      await until(() => page.$eval("#list-count", (e) => e.textContent !== ""), { what: "the list" });
      await until(() => page.$eval("#servers-note", (e) => !e.hidden), { what: "the server group's note" });
      assert.equal(await page.$eval("#partition-map", (e) => e.hidden), true); // alone: no partitions
      assert.match(await page.$eval("#servers-note", (e) => e.textContent), /runs alone/);
      assert.equal(await page.$eval("#servers-table", (e) => e.hidden), true);
      await until(() => rec.requests.some((r) => new URL(r.url).pathname === "/v1/servers" && r.end !== null),
        { what: "the answer of /v1/servers" });
      await sleep(300); // a late console message of the load's would be in by now
      assert.deepEqual(unexpectedErrors(rec), []);
      assert.deepEqual(failedRequests(rec), []);
      assert.equal(await page.$eval("#conn", (e) => e.dataset.state), "live");
    } finally {
      await context.close();
    }
  });

  test("a lease appears within 2 s with its owner and token, and leaves within 2 s", async () => {
    const { context, page, rec } = await openPage(browser, server.url + "/ui/");
    try {
      await until(() => page.$eval("#list-count", (e) => e.textContent !== ""), { what: "the list" });
      await sleep(300); // the list watch is held now
      const loads = rec.requests.filter((r) => r.url.endsWith("/ui/")).length;

      const t0 = Date.now();
      const lease = await acquire(server.url, "jobs/nightly", "builder-7");
      const row = 'tr[data-resource="jobs/nightly"]';
      await page.waitForSelector(`${row} [data-owner="builder-7"][data-token="${lease.fencing_token}"]`, { timeout: 2000 });
      const shownIn = Date.now() - t0;
      assert.match(await page.$eval(`${row} .owner`, (e) => e.textContent), /builder-7/);
      assert.equal(await page.$eval(`${row} .token`, (e) => e.textContent), "#" + lease.fencing_token);
      assert.equal(await page.$eval(row, (e) => e.dataset.state), "held");

      const t1 = Date.now();
      await release(server.url, lease);
      await page.waitForSelector(row, { state: "detached", timeout: 2000 });
      const goneIn = Date.now() - t1;
      assert.equal(rec.requests.filter((r) => r.url.endsWith("/ui/")).length, loads, "no reload");
      assert.deepEqual(unexpectedErrors(rec), []);
      console.log(`# shown in ${shownIn} ms, gone in ${goneIn} ms`);
    } finally {
      await context.close();
    }
  });

  test("a semaphore shows every holder, its waiters and its limit; readers all show", async () => {
    const { context, page, rec } = await openPage(browser, server.url + "/ui/");
    const waiter = new AbortController();
    const leases = [];
    try {
      await until(() => page.$eval("#conn", (e) => e.dataset.state === "live"), { what: "the page to be live" });
      for (const owner of ["worker-a", "worker-b", "worker-c"])
        leases.push(await acquire(server.url, "pool/gpu", owner, { limit: 3 }));
      for (const owner of ["reader-1", "reader-2"])
        leases.push(await acquire(server.url, "site/index", owner, { shared: true }));
      // A fourth worker waits for a place.
      const waiting = fetch(server.url + "/v1/resources/pool/gpu/acquire", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ owner: "worker-d", ttl_ms: 30000, limit: 3, wait_ms: 60000 }),
        signal: waiter.signal,
      }).catch(() => null);
      await until(async () => (await call(server.url, "GET", "/v1/resources/pool/gpu")).body.waiters === 1,
        { what: "the waiter to queue" });
      // The waiter is counted at the next change of the resource: a holder renews.
      await call(server.url, "POST", "/v1/resources/pool/gpu/renew",
        { body: { lease_id: leases[0].lease_id, ttl_ms: 30000 } });

      const row = 'tr[data-resource="pool/gpu"]';
      await until(async () => (await rowHolders(page, "pool/gpu")).length === 3, { timeout: 2000, what: "three holders" });
      const holders = await rowHolders(page, "pool/gpu");
      assert.deepEqual(holders.map((h) => h.owner).sort(), ["worker-a", "worker-b", "worker-c"]);
      assert.deepEqual(holders.map((h) => h.token).sort(), leases.slice(0, 3).map((l) => l.fencing_token).sort());
      await until(() => page.$eval(`${row} td:nth-child(4)`, (e) => e.textContent.trim() === "1"),
        { timeout: 2000, what: "one waiter in the row" });
      assert.equal(await page.$eval(`${row} td:nth-child(5)`, (e) => e.textContent.trim()), "3");
      assert.match(await page.$eval(`${row} .badge`, (e) => e.textContent), /3\/3 held/);

      const readers = await rowHolders(page, "site/index");
      assert.deepEqual(readers.map((h) => [h.owner, h.shared]).sort(), [["reader-1", true], ["reader-2", true]]);
      assert.match(await page.$eval('tr[data-resource="site/index"] .badge', (e) => e.textContent), /shared ×2/);

      // The detail: every holder, the waiters, the limit, and the grants among its events.
      await page.click(`${row} button[data-action="select"]`);
      await until(async () => (await page.$$('#detail-holders tr[data-owner]')).length === 3, { what: "the detail's holders" });
      const facts = await page.$eval("#detail-facts", (e) => e.textContent);
      assert.match(facts, /Limit3 \(a semaphore\)/);
      assert.match(facts, /Waiters1/);
      await until(async () => (await page.$$('#events li[data-type="granted"]')).length === 3, { what: "three grants in the events" });
      assert.deepEqual(unexpectedErrors(rec), []);
      waiter.abort();
      await waiting;
    } finally {
      waiter.abort();
      await context.close();
      for (const l of leases) await release(server.url, l).catch(() => {});
    }
  });

  test("20 held resources cost a few requests in flight, and nothing polls", async () => {
    const leases = [];
    for (let i = 0; i < 20; i++)
      leases.push(await acquire(server.url, `many/r${String(i).padStart(2, "0")}`, `owner-${i}`, { ttl_ms: 120000 }));
    const { context, page, rec } = await openPage(browser, server.url + "/ui/#r=many/r03");
    try {
      await until(async () => (await listedResources(page)).length === 20, { what: "20 rows" });
      await until(async () => (await page.$$('#events li[data-type="granted"]')).length === 1, { what: "the chosen resource's events" });
      // At the start: three watches, /metrics and /v1/servers at once.
      assert.ok(rec.maxInFlight <= 5, `at most 5 API requests in flight at the start, saw ${rec.maxInFlight}: ${rec.peak.join(" ")}`);
      const atStart = rec.maxInFlight;
      rec.resetMax();
      // Changes while the page watches: every lease renewed twice, one after the other.
      for (let round = 0; round < 2; round++)
        for (const l of leases)
          await call(server.url, "POST", `/v1/resources/${l.resource}/renew`, { body: { lease_id: l.lease_id, ttl_ms: 120000 } });
      await until(async () => (await page.$$('#events li[data-type="renewed"]')).length === 2, { what: "the renewals in the events" });
      await sleep(1000);
      // The list watch, the chosen resource's watch and its events are held; /metrics may
      // be on its way at the same time (and /v1/servers, once, at the start).
      assert.ok(rec.maxHeld <= 3, `at most 3 held requests, saw ${rec.maxHeld}`);
      assert.ok(rec.maxInFlight <= 4, `at most 4 API requests in flight, saw ${rec.maxInFlight}: ${rec.peak.join(" ")}`);
      console.log(`# at most ${atStart} API requests in flight at the start, then ${rec.maxInFlight} API requests in flight while 40 renewals arrived, ${rec.requests.length} requests in all`);

      // 5.5 s with nothing changing: the three watches stay held (25 s each), and the
      // figures are read once (every 5 s), nothing else.
      const from = Date.now();
      await sleep(5500);
      const idle = rec.startedBetween(from, Date.now()).map((r) => new URL(r.url).pathname);
      const held = rec.requests.filter((r) => r.end === null).map((r) => new URL(r.url).pathname);
      console.log(`# idle 5.5 s: ${idle.join(" ") || "no request"}; held: ${held.join(" ")}`);
      assert.deepEqual(held.sort(), ["/v1/events", "/v1/resources", "/v1/resources/many/r03"]);
      const other = idle.filter((p) => p !== "/metrics");
      assert.deepEqual(other, [], "requests other than the 5 s figures while nothing changed");
      assert.ok(idle.filter((p) => p === "/metrics").length <= 2, `metrics: ${idle}`);
    } finally {
      await context.close();
      for (const l of leases) await release(server.url, l).catch(() => {});
    }
  });
});
