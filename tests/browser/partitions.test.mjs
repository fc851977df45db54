// The dashboard on a partitioned group (--ha --partitions 16) of three real servers over one
// real Azurite container, a page open on the first: it shows the partition map and each
// server's share as GET /v1/servers gives them; the list follows its watch (a position,
// passed back as it came) and shows a lease of a partition another server owns at once; the
// event feed pages with the answers' `next` and shows each event once, for resources of
// partitions each server owns; a resource served by another server is no change of the
// server the page talks to.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import {
  Azurite, SLOW, Server, acquire, call, freePort, launch, openPage, release, stopAll, until,
} from "./harness.mjs";

const PARTITIONS = 16;

let azurite;
let servers = [];
let browser;

// CRC-32 (IEEE, as zlib's) of a name without a hash tag, modulo N: its partition.
function partitionOf(name, n = PARTITIONS) {
  let crc = 0xffffffff;
  for (const byte of Buffer.from(name, "utf8")) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
  }
  return ((crc ^ 0xffffffff) >>> 0) % n;
}

// The map every server gives once each has its share (5 or 6 of 16) and every partition
// has an owner; the same on all three.
async function balancedMap() {
  return until(async () => {
    const views = await Promise.all(servers.map((s) =>
      call(s.url, "GET", "/v1/servers", { timeout: 2000 }).then((r) => (r.status === 200 ? r.body : null), () => null)));
    if (views.some((v) => !v || !v.partitions || v.servers.length !== 3)) return null;
    const owners = views.map((v) => JSON.stringify(v.partitions.owners.map((o) => o.url)));
    if (new Set(owners).size !== 1 || views[0].partitions.owners.some((o) => !o.url)) return null;
    if (!views[0].servers.every((s) => s.partitions.length >= 5)) return null;
    return views[0];
  }, { timeout: 60000, every: 200, what: "a balanced partition map on every server" });
}

// A name under `prefix` whose partition `owner` owns, and none of `taken`.
function nameOwnedBy(map, prefix, owner, taken = []) {
  for (let i = 0; i < 10000; i++) {
    const name = `${prefix}${i}`;
    const p = partitionOf(name);
    if (map.partitions.owners[p].url === owner && !taken.includes(p)) return { name, partition: p };
  }
  throw new Error(`no name under ${prefix} in a partition of ${owner}`);
}

before(async () => {
  assert.equal(partitionOf("jobs/nightly-report"), 9); // tests/vectors/partitions.json
  azurite = new Azurite();
  const container = "uip" + randomUUID().replaceAll("-", "").slice(0, 20);
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const s = new Server({
      listen: `127.0.0.1:${port}`,
      args: ["--ha", "--partitions", String(PARTITIONS), "--advertise-url", url, "--mirror", "sync",
        "--blob-connection-string", azurite.connectionString, "--blob-container", container,
        "--failover-grace-ms", "3000"],
    });
    s.url = url;
    servers.push(s);
    await s.start(30000);
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

// A page on `server`, with every banner it shows recorded.
async function watchedPage(server) {
  const opened = await openPage(browser, server.url + "/ui/");
  const { page } = opened;
  opened.banners = [];
  await page.exposeFunction("sawBanner", (kind, text) => opened.banners.push({ kind, text }));
  await page.evaluate(() => {
    const b = document.getElementById("banner");
    new MutationObserver(() => { if (!b.hidden) window.sawBanner(b.dataset.kind, b.textContent); })
      .observe(b, { attributes: true, childList: true, characterData: true, subtree: true });
  });
  return opened;
}

// What the page shows of the group: the map's rows and the servers' shares.
function shownGroup(page) {
  return page.evaluate(() => ({
    mapHidden: document.getElementById("partition-map").hidden,
    count: document.querySelector("#partition-count")?.dataset.count ?? null,
    facts: document.getElementById("group-facts").textContent,
    owners: [...document.querySelectorAll("#partition-rows tr[data-partition]")].map((r) => ({
      partition: Number(r.dataset.partition), url: r.dataset.owner, generation: Number(r.dataset.generation),
      since: r.cells[3].title,
    })),
    shares: [...document.querySelectorAll("#server-rows tr[data-server]")].map((r) => ({
      url: r.dataset.server, partitions: r.dataset.partitions,
      text: r.querySelector(".share") ? r.querySelector(".share").textContent : null,
    })),
    shareHead: !document.getElementById("share-head").hidden,
  }));
}

describe("the dashboard on a partitioned group", () => {
  test("shows the partition map and each server's share, as GET /v1/servers gives them", async () => {
    const map = await balancedMap();
    const { context, page, rec, banners } = await watchedPage(servers[0]);
    try {
      const shown = await until(async () => {
        const g = await shownGroup(page);
        return g.owners.length === PARTITIONS ? g : null;
      }, { timeout: 10000, what: "the partition map on the page" });
      assert.equal(shown.mapHidden, false);
      assert.equal(shown.count, String(PARTITIONS));
      assert.ok(shown.shareHead, "the servers' table has a Partitions column");
      // A partitioned group has no one active server: the page says no takeover.
      assert.doesNotMatch(shown.facts, /takeover/);
      assert.match(shown.facts, new RegExp(`${PARTITIONS} over 3 servers`));
      assert.deepEqual(shown.owners.map(({ partition, url, generation, since }) => ({ partition, url, generation, since })),
        map.partitions.owners.map(({ partition, url, generation, since }) => ({ partition, url, generation, since })));
      const byUrl = new Map(shown.shares.map((s) => [s.url, s]));
      assert.equal(byUrl.size, 3);
      for (const s of map.servers) {
        const row = byUrl.get(s.url);
        assert.ok(row, `a row for ${s.url}`);
        assert.equal(row.partitions, s.partitions.join(","));
        // The count first, then the partitions as ranges ("6: 0, 2, 5, 7–8, 11").
        assert.ok(row.text.startsWith(`${s.partitions.length}: `), row.text);
        const listed = row.text.slice(row.text.indexOf(": ") + 2).split(", ").flatMap((part) => {
          const [a, b] = part.split("–").map(Number);
          return b === undefined ? [a] : Array.from({ length: b - a + 1 }, (_, i) => a + i);
        });
        assert.deepEqual(listed, s.partitions);
      }
      // Every partition has exactly one owner, among the three servers.
      assert.deepEqual(map.servers.flatMap((s) => s.partitions).sort((a, b) => a - b),
        Array.from({ length: PARTITIONS }, (_, i) => i));
      assert.deepEqual(banners, []);
      assert.deepEqual(rec.errors.filter((e) => e.startsWith("page error")), []);
      console.log(`# shares: ${map.servers.map((s) => s.partitions.length).join(", ")} of ${PARTITIONS}`);
    } finally {
      await context.close();
    }
  });

  test("the list follows its watch, and shows a lease of another server's partition at once", async () => {
    const map = await balancedMap();
    const seed = await acquire(servers[0].url, "plist/seed", "seeder");
    const other = servers[1].url;
    const { name, partition } = nameOwnedBy(map, "plist/x", other);
    const { context, page, rec, banners } = await watchedPage(servers[0]);
    let lease;
    try {
      await page.waitForSelector('tr[data-resource="plist/seed"]', { timeout: 5000 * SLOW });
      // The list watch is held, with the position the last list gave.
      const held = await until(() => rec.requests.find((r) => r.end === null
        && new URL(r.url).pathname === "/v1/resources" && /[?&]index=v[\d.]+&/.test(decodeURIComponent(r.url)) && /wait_ms=/.test(r.url)),
      { timeout: 5000, what: "a held list watch with a position as its index" });
      assert.equal(await page.$eval("#conn", (e) => e.dataset.state), "live");
      const t0 = Date.now();
      lease = await acquire(servers[2].url, name, "worker-p");
      await page.waitForSelector(`tr[data-resource="${name}"] [data-owner="worker-p"][data-token="${lease.fencing_token}"]`,
        { timeout: 2000 * SLOW });
      const shownIn = Date.now() - t0;
      // The held watch woke for it: it ended after the grant, and no list was read meanwhile
      // but by a watch.
      assert.ok(held.end !== null && held.end >= t0, "the held watch ended after the grant");
      const lists = rec.requests.filter((r) => new URL(r.url).pathname === "/v1/resources" && r.start >= held.start);
      assert.ok(lists.every((r) => /[?&]index=v/.test(decodeURIComponent(r.url)) || /cursor=/.test(r.url)),
        lists.map((r) => r.url).join(" "));
      assert.deepEqual(rec.requests.filter((r) => r.api && r.status >= 400).map((r) => `${r.url} ${r.status}`), []);
      assert.equal(await page.$eval("#conn", (e) => e.dataset.state), "live");
      assert.equal(await page.$$eval('#notes [data-note="list-watch"]', (n) => n.length), 0);
      assert.deepEqual(banners, []);
      console.log(`# a lease of partition ${partition} (owned by another server) shown in ${shownIn} ms`);
    } finally {
      await context.close();
      if (lease) await release(servers[2].url, lease);
      await release(servers[0].url, seed);
    }
  });

  test("the event feed pages by positions, and shows the events of each partition once", async () => {
    const map = await balancedMap();
    const { context, page, rec, banners } = await watchedPage(servers[0]);
    const taken = [];
    const seen = [];
    try {
      await page.waitForSelector("#resource-rows", { state: "attached" });
      for (const owner of servers) {
        // A resource in a partition this server owns, and a neighbour under its name (the
        // feed's prefix) in another partition, whose events the page is sent but must not show.
        const r = nameOwnedBy(map, "pev/", owner.url, taken);
        taken.push(r.partition);
        let n = 0;
        let near;
        do near = `${r.name}/n${n++}`; while (partitionOf(near) === r.partition);
        const t0 = Date.now();
        const lease = await acquire(owner.url, r.name, `w-${r.partition}`);
        await page.click(`tr[data-resource="${r.name}"] [data-action="select"]`, { timeout: 10000 * SLOW });
        await page.waitForSelector('#events li[data-type="granted"]', { timeout: 5000 * SLOW });
        // The feed's request is held, after the position the first answer gave.
        await until(() => rec.requests.find((x) => x.end === null && new URL(x.url).pathname === "/v1/events"
          && new URL(x.url).searchParams.get("prefix") === r.name && /^v[\d.]+$/.test(new URL(x.url).searchParams.get("after") || "")),
        { timeout: 5000, what: `a held events request for ${r.name} after a position` });
        // The detail names its partition and the server that owns it.
        const fact = await page.$eval("#detail-facts [data-partition]", (e) => ({ p: e.dataset.partition, text: e.textContent }));
        assert.equal(fact.p, String(r.partition));
        assert.ok(fact.text.includes(owner.url), fact.text);

        const neighbour = await acquire(servers[0].url, near, "neighbour");
        const renewed = await call(owner.url, "POST", `/v1/resources/${r.name}/renew`, { body: { lease_id: lease.lease_id } });
        assert.equal(renewed.status, 200, renewed.text);
        await release(servers[0].url, neighbour);
        await release(servers[1].url, lease);
        const types = await until(async () => {
          const t = await page.$$eval("#events li[data-type]", (li) => li.map((e) => e.dataset.type));
          return t.length >= 3 ? t : null;
        }, { timeout: 5000, what: `the renewal and the release of ${r.name} in its feed` }).catch(async (e) => {
          // What the page asked, and what the server has now, to tell the page from the server.
          const feed = rec.requests.filter((x) => new URL(x.url).pathname === "/v1/events")
            .map((x) => `${x.url.replace(servers[0].url, "")} ${x.start - t0}..${x.end === null ? "" : x.end - t0} ${x.status}`);
          const now = await call(servers[0].url, "GET", `/v1/events?prefix=${r.name}`);
          e.message += `\nrequests (ms from the grant): ${feed.join(", ")}\nthe server's events now: ${now.text}`
            + `\nthe feed shows: ${await page.innerText("#events")}`;
          throw e;
        });
        await new Promise((res) => setTimeout(res, 500)); // nothing comes twice, or late
        const events = await page.$$eval("#events li[data-type]", (li) => li.map((e) => ({
          type: e.dataset.type, owner: e.dataset.owner, token: Number(e.dataset.token), partition: e.dataset.partition,
        })));
        assert.deepEqual(types, ["released", "renewed", "granted"]);
        assert.deepEqual(events, ["released", "renewed", "granted"].map((type) => ({
          type, owner: `w-${r.partition}`, token: lease.fencing_token, partition: String(r.partition),
        })));
        seen.push(`${r.name} in partition ${r.partition}`);
      }
      assert.equal(new Set(taken).size, 3);
      // Each feed request after the first named a position the server gave.
      const feed = rec.requests.filter((x) => new URL(x.url).pathname === "/v1/events");
      const afters = feed.map((x) => new URL(x.url).searchParams.get("after")).filter((a) => a !== null);
      assert.ok(afters.length >= 3 && afters.every((a) => /^v[\d.]+$/.test(a)), afters.join(" "));
      assert.deepEqual(feed.filter((x) => x.status >= 400).map((x) => `${x.url} ${x.status}`), []);
      assert.equal(await page.$eval("#events-note", (e) => e.hidden), true);
      // Resources served by each server in turn: the page's own server has not changed, and
      // no other is named as the one serving the page.
      assert.deepEqual(banners, []);
      const servedBy = await page.innerText("#served-by");
      assert.ok(servedBy === "" || servedBy === `served by ${servers[0].url}`, servedBy);
      assert.deepEqual(rec.errors.filter((e) => e.startsWith("page error")), []);
      console.log(`# feeds of ${seen.join(", ")}: each event once`);
    } finally {
      await context.close();
    }
  });
});
