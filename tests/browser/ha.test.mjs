// The dashboard on a server group (--ha) of three real servers over one real Azurite
// container, a page open on each standby: the active is SIGKILLed; each page says that the
// active server changed (after "a takeover is in progress"), names the new one, and keeps
// working: a lease granted after the takeover shows without a reload.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import {
  Azurite, SLOW, Server, acquire, call, freePort, launch, listedResources, openPage, rowHolders,
  sleep, stopAll, until,
} from "./harness.mjs";

let azurite;
let servers = [];
let browser;

// The server every live one names as active, once they agree.
async function active(live, timeout = 20000) {
  return until(async () => {
    const views = await Promise.all(live.map((s) =>
      call(s.url, "GET", "/v1/servers", { timeout: 2000 }).then((r) => (r.status === 200 ? r.body : null), () => null)));
    const urls = new Set(views.map((v) => (v && v.active ? v.active.url : null)));
    if (urls.size !== 1 || urls.has(null)) return null;
    if (views.filter((v) => v.self.role === "active").length !== 1) return null;
    const url = [...urls][0];
    return live.find((s) => s.url === url);
  }, { timeout, every: 100, what: "the servers to agree on an active one" });
}

before(async () => {
  azurite = new Azurite();
  const container = "ui" + randomUUID().replaceAll("-", "").slice(0, 20);
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const s = new Server({
      listen: `127.0.0.1:${port}`,
      args: ["--ha", "--advertise-url", url, "--mirror", "sync",
        "--blob-connection-string", azurite.connectionString, "--blob-container", container,
        "--failover-grace-ms", "3000"],
    });
    s.url = url;
    servers.push(s);
    await s.start();
    if (i === 0) await active([s]); // the first is the active
  }
  browser = await launch();
});

after(async () => {
  if (browser) await browser.close();
  try {
    await stopAll(servers.filter((s) => s.alive()));
  } finally {
    for (const s of servers) await s.cleanup();
    if (azurite) azurite.stop();
  }
});

// One page, opened on `server`, watched for the banners it shows.
async function watchedPage(server) {
  const opened = await openPage(browser, server.url + "/ui/");
  const { page } = opened;
  opened.server = server;
  opened.banners = [];
  await page.exposeFunction("sawBanner", (kind, text) => opened.banners.push({ kind, text, at: Date.now() }));
  await page.evaluate(() => {
    const b = document.getElementById("banner");
    new MutationObserver(() => { if (!b.hidden) window.sawBanner(b.dataset.kind, b.textContent); })
      .observe(b, { attributes: true, childList: true, characterData: true, subtree: true });
  });
  return opened;
}

// Runs `wait`; when it fails, adds what each page shows and asked since the kill.
async function explained(pages, killedAt, what, wait) {
  try {
    return await wait();
  } catch (e) {
    for (const { page, server, rec, banners } of pages) {
      const now = await page.evaluate(() => ({
        banner: document.getElementById("banner").hidden ? null : document.getElementById("banner").textContent,
        conn: document.getElementById("conn").textContent,
        servedBy: document.getElementById("served-by").textContent,
        rows: [...document.querySelectorAll("#resource-rows tr[data-resource]")].map((r) => r.dataset.resource),
      })).catch((x) => String(x));
      const asked = rec.requests.filter((r) => r.api && (r.end === null || r.end >= killedAt))
        .map((r) => `${r.url.replace(server.url, "")} ${r.start - killedAt}..${r.end === null ? "" : r.end - killedAt}`);
      e.message += `\n${what}; the page on ${server.url}: ${JSON.stringify(now)}; banners: `
        + `${JSON.stringify(banners.map((b) => [b.kind, b.at - killedAt]))}; requests (ms from the kill): ${asked.join(", ")}`;
    }
    throw e;
  }
}

describe("the dashboard on a server group", () => {
  // A page on each standby: after the takeover one is on the new active and the other on a
  // standby still, which answers GET /v1/servers itself (without Mutexd-Served-By).
  test("shows a takeover after a SIGKILL of the active, and keeps working", async () => {
    const first = await active(servers);
    const standbys = servers.filter((s) => s !== first);
    const before = await acquire(first.url, "group/before", "worker-1");
    const pages = [];
    try {
      for (const s of standbys) pages.push(await watchedPage(s));
      for (const { page, server } of pages) {
        await page.waitForSelector('tr[data-resource="group/before"]', { timeout: 5000 });
        // The group: this server a standby, the first one active, three servers.
        await until(async () => (await page.$$("#server-rows tr[data-server]")).length === 3, { what: "three servers" });
        assert.equal(await page.$eval(`#server-rows tr[data-server="${first.url}"]`, (e) => e.dataset.role), "active");
        assert.equal(await page.$eval(`#server-rows tr[data-server="${server.url}"]`, (e) => e.dataset.role), "standby");
        assert.match(await page.innerText("#served-by"), new RegExp(first.url));
        // A group of one partition shows no partition map, and no share per server.
        assert.equal(await page.$eval("#partition-map", (e) => e.hidden), true);
        assert.equal(await page.$eval("#share-head", (e) => e.hidden), true);
        assert.equal(await page.$$eval("#server-rows tr[data-partitions]", (r) => r.length), 0);
      }
      await sleep(500);

      const killedAt = Date.now();
      await first.kill();
      const next = await active(servers.filter((s) => s.alive()), 30000);
      const tookOver = Date.now() - killedAt;
      const seen = [];
      for (const { page, server, rec, banners } of pages) {
        const where = server === next ? "on the new active" : "on a standby";
        // The page names the new active server in its banner, and in the group.
        await explained(pages, killedAt, `the page ${where}, new active ${next.url} after ${tookOver} ms`,
          () => page.waitForSelector('#banner[data-kind="info"]:not([hidden])', { timeout: 15000 * SLOW }));
        const text = await page.innerText("#banner");
        assert.match(text, /The active server changed/);
        assert.ok(text.includes(next.url) && text.includes(first.url), text);
        await until(() => page.$eval(`#server-rows tr[data-server="${next.url}"]`, (e) => e.dataset.role === "active").catch(() => false),
          { timeout: 10000, what: "the new active in the group's table" });
        assert.ok(["takeover", "info"].includes(banners[0] && banners[0].kind), JSON.stringify(banners));
        seen.push(`${where}: ${banners.map((b) => `${b.kind} +${b.at - killedAt} ms`).join(", ")}`);
      }

      // Both keep working: a lease granted now shows within 2 s, and the one from before is
      // still held (with its fencing token). A list watch held across the takeover is woken
      // once the grant is committed, and the list it reads then shows it.
      const t0 = Date.now();
      const lease = await acquire(standbys[0].url, "group/after", "worker-2");
      const grantIndex = (await call(next.url, "GET", "/v1/resources/group/after")).body.index;
      assert.ok(lease.fencing_token > before.fencing_token);
      const row = `tr[data-resource="group/after"] [data-owner="worker-2"][data-token="${lease.fencing_token}"]`;
      for (const { page } of pages)
        await explained(pages, killedAt, `the new lease (change index ${grantIndex}) on ${next.url}`,
          () => page.waitForSelector(row, { timeout: 2000 }));
      for (const { page, rec } of pages) {
        assert.deepEqual((await rowHolders(page, "group/before")).map((h) => h.token), [before.fencing_token]);
        assert.deepEqual((await listedResources(page)).sort(), ["group/after", "group/before"]);
        assert.equal(await page.$eval("#conn", (e) => e.dataset.state), "live");
        assert.deepEqual(rec.errors.filter((e) => e.startsWith("page error")), []);
      }
      const shownIn = Date.now() - t0;
      console.log(`# takeover in ${tookOver} ms; banners ${seen.join("; ")}; a new lease shown on both in ${shownIn} ms`);
    } finally {
      for (const { context } of pages) await context.close();
    }
  });
});
