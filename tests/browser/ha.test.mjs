// The dashboard on a server group (--ha) of three real servers over one real Azurite
// container, opened on a standby: the active is SIGKILLed, the page says that the active
// server changed (or that a takeover is in progress, then that it changed), and keeps
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

describe("the dashboard on a server group", () => {
  test("shows a takeover after a SIGKILL of the active, and keeps working", async () => {
    const first = await active(servers);
    const standby = servers.find((s) => s !== first);
    const before = await acquire(first.url, "group/before", "worker-1");

    const { context, page, rec } = await openPage(browser, standby.url + "/ui/");
    try {
      await page.waitForSelector('tr[data-resource="group/before"]', { timeout: 5000 });
      // The group: this server a standby, the first one active, three servers.
      await until(async () => (await page.$$("#server-rows tr[data-server]")).length === 3, { what: "three servers" });
      assert.equal(await page.$eval(`#server-rows tr[data-server="${first.url}"]`, (e) => e.dataset.role), "active");
      assert.equal(await page.$eval(`#server-rows tr[data-server="${standby.url}"]`, (e) => e.dataset.role), "standby");
      assert.match(await page.innerText("#served-by"), new RegExp(first.url));
      await sleep(500);

      const banners = [];
      await page.exposeFunction("sawBanner", (kind, text) => banners.push({ kind, text, at: Date.now() }));
      await page.evaluate(() => {
        const b = document.getElementById("banner");
        new MutationObserver(() => { if (!b.hidden) window.sawBanner(b.dataset.kind, b.textContent); })
          .observe(b, { attributes: true, childList: true, characterData: true, subtree: true });
      });

      const killedAt = Date.now();
      await first.kill();
      const live = servers.filter((s) => s.alive());
      const next = await active(live, 30000);
      const tookOver = Date.now() - killedAt;

      // The page names the new active server in its banner, and in the group.
      await page.waitForSelector('#banner[data-kind="info"]:not([hidden])', { timeout: 15000 * SLOW });
      const text = await page.innerText("#banner");
      assert.match(text, /The active server changed/);
      assert.ok(text.includes(next.url) && text.includes(first.url), text);
      await until(() => page.$eval(`#server-rows tr[data-server="${next.url}"]`, (e) => e.dataset.role === "active").catch(() => false),
        { timeout: 10000, what: "the new active in the group's table" });
      const seenIn = Date.now() - killedAt;
      assert.ok(["takeover", "info"].includes(banners[0] && banners[0].kind), JSON.stringify(banners));

      // It keeps working: a lease granted now shows within 2 s, and the one from before is
      // still held (with its fencing token).
      const t0 = Date.now();
      const lease = await acquire(standby.url, "group/after", "worker-2");
      await page.waitForSelector(`tr[data-resource="group/after"] [data-owner="worker-2"][data-token="${lease.fencing_token}"]`, { timeout: 2000 });
      const shownIn = Date.now() - t0;
      assert.ok(lease.fencing_token > before.fencing_token);
      assert.deepEqual((await rowHolders(page, "group/before")).map((h) => h.token), [before.fencing_token]);
      assert.deepEqual((await listedResources(page)).sort(), ["group/after", "group/before"]);
      assert.equal(await page.$eval("#conn", (e) => e.dataset.state), "live");
      assert.deepEqual(rec.errors.filter((e) => e.startsWith("page error")), []);
      console.log(`# takeover in ${tookOver} ms; the page showed it ${seenIn} ms after the kill; `
        + `banners: ${banners.map((b) => `${b.kind} +${b.at - killedAt} ms`).join(", ")}; `
        + `a new lease shown in ${shownIn} ms`);
    } finally {
      await context.close();
    }
  });
});
