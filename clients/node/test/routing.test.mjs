// A partitioned group: three real servers of one group (--partitions 16) on a real Azurite.
// The client sends each request about a resource to its partition's owner, so that no server
// forwards one, and follows a partition whose owner stops; lists, list watches and events span
// the partitions, with positions (strings) for their index and next. Stand-ins on loopback
// check what a real group does not show on demand: the map asked for again at most once a
// second, a map request that fails failing nothing, and an owner that is not among the URLs
// given.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Client, partitionOf } from '../index.js';
import { startServer, startAzurite, freePort, eventually, sleep, rejection } from '../test-support/harness.mjs';

const PARTITIONS = 16;

let azurite;
let servers = [];

/** GET `path` of a server directly (not through the client): { status, text }. */
function plainGet(url, path) {
  return new Promise((resolve, reject) => {
    const req = http.get(url + path, { agent: false, timeout: 10_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}${path}: no answer`)));
    req.on('error', reject);
  });
}

/** A server's partition owners (URLs, by partition), or null when it does not answer. */
async function owners(server) {
  try {
    const { status, text } = await plainGet(server.url, '/v1/servers');
    if (status !== 200) return null;
    const p = JSON.parse(text).partitions;
    if (!p || p.count !== PARTITIONS) return null;
    const out = new Array(PARTITIONS).fill(null);
    for (const o of p.owners) out[o.partition] = o.url;
    return out;
  } catch {
    return null;
  }
}

/** Waits until every server of `live` names an owner among `live` for every partition, they
 * agree, and each owns its even share (the floor or the ceiling of the count / servers): a
 * map still being balanced moves on under the test. Resolves with those owners. */
async function settled(live) {
  const urls = new Set(live.map((s) => s.url));
  const floor = Math.floor(PARTITIONS / live.length);
  return eventually(
    async () => {
      const views = await Promise.all(live.map(owners));
      if (views.some((v) => v === null || v.some((u) => !urls.has(u)))) return null;
      if (!views.every((v) => JSON.stringify(v) === JSON.stringify(views[0]))) return null;
      const shares = [...urls].map((u) => views[0].filter((o) => o === u).length);
      return shares.every((n) => n >= floor && n <= floor + 1) ? views[0] : null;
    },
    { timeoutMs: 60_000, intervalMs: 200, message: 'the partitions settled, the shares even' },
  );
}

/** Requests forwarded by the servers of `live`, all together (mutexd_forwarded_requests_total). */
async function forwarded(live) {
  let sum = 0;
  for (const s of live) {
    const { status, text } = await plainGet(s.url, '/metrics');
    assert.equal(status, 200);
    for (const m of text.matchAll(/^mutexd_forwarded_requests_total(?:\{[^}]*\})? (\d+)$/gm)) sum += Number(m[1]);
  }
  return sum;
}

/** Two resource names in each partition. */
function namesInEveryPartition(prefix) {
  const byPartition = Array.from({ length: PARTITIONS }, () => []);
  for (let i = 0; byPartition.some((l) => l.length < 2); i++) {
    const name = `${prefix}/${process.pid}-${i}`;
    const l = byPartition[partitionOf(name, PARTITIONS)];
    if (l.length < 2) l.push(name);
  }
  return byPartition;
}

before(
  async () => {
    azurite = startAzurite();
    const container = `n${randomUUID().replaceAll('-', '').slice(0, 20)}`;
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const args = [
        '--ha', '--advertise-url', url, '--mirror', 'sync',
        '--blob-connection-string', azurite.connectionString, '--blob-container', container,
        '--partitions', String(PARTITIONS),
      ];
      servers.push(await startServer({ listen: `127.0.0.1:${port}`, args }));
    }
    await settled(servers);
  },
  { timeout: 120_000 },
);

after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  azurite?.stop();
});

test('in steady state each request goes straight to its partition\'s owner', { timeout: 120_000 }, async () => {
  const map = await settled(servers);
  const c = new Client(servers.map((s) => s.url), { timeoutMs: 20_000 });
  try {
    const byPartition = namesInEveryPartition('routing/steady');
    // The first answer shows a partitioned group: the client learns its map.
    await c.get(byPartition[0][0]);
    await eventually(() => c.partitions !== null, { timeoutMs: 20_000, message: 'the map learned' });
    assert.deepEqual(c.partitions, { count: PARTITIONS, owners: map });

    const start = await forwarded(servers);
    // Round the partitions, so that consecutive requests are mostly for different owners.
    for (const round of [0, 1]) {
      for (const names of byPartition) {
        const name = names[round];
        const lease = await c.acquire(name, { ttlMs: 30_000 });
        const state = await c.get(name);
        assert.equal(state.holder.fencingToken, lease.fencingToken);
        assert.equal(Number(lease.fencingToken % 256n), partitionOf(name, PARTITIONS));
        await c.watch(name, 0, { waitMs: 1000 });
        const renewed = await c.renew(lease);
        assert.equal(renewed.fencingToken, lease.fencingToken);
        assert.equal((await c.release(lease)).released, true);
      }
    }
    const name = byPartition[5][0];
    const lock = await c.lock(name, { ttlMs: 30_000 });
    assert.equal((await c.breakLease(byPartition[6][0])).broken, false);
    await lock.release();
    assert.equal(await forwarded(servers), start, 'no request was forwarded');
    // Nothing was a surprise: the map is the one learned.
    assert.deepEqual(c.partitions, { count: PARTITIONS, owners: map });
  } finally {
    c.close();
  }
});

/** A hash tag whose partition each owner of `map` owns, by owner URL. */
function tagsByOwner(map, prefix) {
  const found = new Map();
  for (let i = 0; found.size < new Set(map).size; i++) {
    const tag = `${prefix}-${i}`;
    const owner = map[partitionOf(`{${tag}}`, PARTITIONS)];
    if (!found.has(owner)) found.set(owner, tag);
  }
  return found;
}

test('several resources at once go to their partition\'s owner, ordered locks to each one\'s', { timeout: 120_000 }, async () => {
  const map = await settled(servers);
  const c = new Client(servers.map((s) => s.url), { timeoutMs: 20_000 });
  try {
    const base = `routing/many/${process.pid}-${randomUUID().slice(0, 8)}`;
    await c.get(`${base}/first`);
    await eventually(() => c.partitions !== null, { timeoutMs: 20_000, message: 'the map learned' });
    const start = await forwarded(servers);
    for (const tag of tagsByOwner(map, base.replaceAll('/', '-')).values()) {
      const names = [`{${tag}}/acct/alice`, `{${tag}}/acct/bob`];
      const leases = await c.acquireMany(names, { ttlMs: 30_000 });
      assert.deepEqual(
        leases.map((l) => l.resource),
        names,
      );
      for (const l of leases) assert.equal(Number(l.fencingToken % 256n), partitionOf(names[0], PARTITIONS));
      await c.renewMany(leases);
      await c.releaseMany(leases);
      const lock = await c.lockMany(names, { ttlMs: 1500 });
      await sleep(800); // renewed as a set, at the owner too
      assert.equal(lock.lost, false);
      assert.equal(await lock.release(), true);
    }
    const spread = [...tagsByOwner(map, `${base.replaceAll('/', '-')}-o`).values()].map((t) => `{${t}}/stock`);
    const ordered = await c.lockOrdered(spread, { ttlMs: 3000, waitMs: 5000 });
    assert.deepEqual(ordered.resources, [...spread].sort());
    assert.equal(await ordered.release(), true);
    assert.equal(await forwarded(servers), start, 'no request was forwarded');
    assert.deepEqual(c.partitions, { count: PARTITIONS, owners: map }, 'no surprise');
    // Names of different partitions in one request: refused.
    const err = await rejection(c.acquireMany(spread.slice(0, 2)));
    assert.equal(err.code, 'invalid_field');
    assert.equal(err.field, 'resources');
    assert.equal(err.details.reason, 'partitions_differ');
  } finally {
    c.close();
  }
});

// Lists, list watches and events span the partitions: their index and next are positions
// (strings), passed back unchanged. These run before the test that stops a server.
test('a list\'s index and the events\' next are positions, passed back unchanged', { timeout: 120_000 }, async () => {
  const c = new Client(servers.map((s) => s.url), { timeoutMs: 20_000 });
  try {
    const prefix = `positions/${randomUUID().slice(0, 8)}/`;
    const byPartition = namesInEveryPartition(`${prefix}n`);
    const held = [0, 5, 11].map((p) => byPartition[p][0]);
    for (const name of held) await c.acquire(name, { ttlMs: 30_000 });
    const pages = [];
    for await (const page of c.list({ prefix })) pages.push(page);
    assert.equal(pages.length, 1);
    const page = pages[0];
    assert.deepEqual(page.resources.map((r) => r.resource), [...held].sort());
    assert.equal(typeof page.index, 'string');
    assert.match(page.index, /^v/);
    // A list watch from it, answered when its wait runs out.
    const now = await c.watchList({ prefix, index: page.index, waitMs: 300 });
    assert.equal(now.index, page.index);
    // The list at once, on any group; another number is the server's to refuse.
    assert.equal((await c.watchList({ prefix, index: 0n, waitMs: 0 })).index, page.index);
    assert.equal((await c.watchList({ prefix, index: null })).index, page.index);
    await assert.rejects(c.watchList({ prefix, index: 3n, waitMs: 0 }), { status: 400 });
    const events = await c.eventsPage({ prefix });
    assert.equal(typeof events.next, 'string');
    assert.deepEqual(
      events.events.map((e) => [e.type, e.partition]),
      events.events.map((e) => ['granted', partitionOf(e.resource, PARTITIONS)]),
    );
    assert.deepEqual(events.events.map((e) => e.resource).sort(), [...held].sort());
    assert.deepEqual((await c.eventsPage({ prefix, after: events.next })).events, []);
  } finally {
    c.close();
  }
});

test('a list watch asked of one server wakes on a change in a partition another owns', { timeout: 120_000 }, async () => {
  const map = await settled(servers);
  const asked = servers[0];
  const prefix = `positions/${randomUUID().slice(0, 8)}/`;
  const byPartition = namesInEveryPartition(`${prefix}n`);
  const elsewhere = byPartition.filter((_, p) => map[p] !== asked.url).map((l) => l[0]);
  assert.ok(elsewhere.length >= 2);
  const watcher = new Client(asked.url, { timeoutMs: 20_000 });
  const writer = new Client(servers.map((s) => s.url), { timeoutMs: 20_000 });
  try {
    const it = watcher.watchPrefix(prefix, { waitMs: 20_000 });
    const first = (await it.next()).value;
    assert.deepEqual(first.resources, []);
    assert.equal(typeof first.index, 'string');
    setTimeout(() => writer.acquire(elsewhere[0], { ttlMs: 30_000 }), 500);
    let started = performance.now();
    const second = (await it.next()).value;
    assert.ok(performance.now() - started < 10_000);
    assert.deepEqual(second.resources.map((r) => r.resource), [elsewhere[0]]);
    assert.notEqual(second.index, first.index);
    await it.return();
    // And from the position it gave, the next change, in another partition.
    setTimeout(() => writer.acquire(elsewhere[1], { ttlMs: 30_000 }), 500);
    started = performance.now();
    const third = await watcher.watchList({ prefix, index: second.index, waitMs: 20_000 });
    assert.ok(performance.now() - started < 10_000);
    assert.deepEqual(third.resources.map((r) => r.resource), elsewhere.slice(0, 2).sort());
  } finally {
    watcher.close();
    writer.close();
  }
});

test('the events helper pages through every event of several partitions, each once', { timeout: 120_000 }, async () => {
  const c = new Client(servers.map((s) => s.url), { timeoutMs: 20_000 });
  try {
    const prefix = `positions/${randomUUID().slice(0, 8)}/`;
    const byPartition = namesInEveryPartition(`${prefix}n`);
    const used = [1, 4, 7, 9, 14].flatMap((p) => byPartition[p]);
    const done = [];
    for (const name of used) {
      const lease = await c.acquire(name, { ttlMs: 30_000 });
      await c.release(lease);
      done.push(`${name} granted`, `${name} released`);
    }
    const truncated = [];
    const seen = [];
    for await (const ev of c.events({ prefix, limit: 3, onTruncated: (at) => truncated.push(at) })) seen.push(ev);
    assert.deepEqual(truncated, []);
    // Every event once, oldest first (by time, then partition); a resource's in order.
    assert.deepEqual(seen.map((e) => `${e.resource} ${e.type}`).sort(), [...done].sort());
    assert.equal(new Set(seen.map((e) => `${e.partition}/${e.index}`)).size, done.length);
    for (const e of seen) assert.equal(e.partition, partitionOf(e.resource, PARTITIONS));
    const order = seen.map((e) => [e.at, e.partition]);
    const sorted = [...order].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
    assert.deepEqual(order, sorted);
    for (const name of used) {
      assert.deepEqual(seen.filter((e) => e.resource === name).map((e) => e.type), ['granted', 'released']);
    }
    // Followed: a change after them, in yet another partition, comes next.
    const it = c.events({ prefix, follow: true, waitMs: 5000, limit: 3 });
    for (let i = 0; i < seen.length; i++) await it.next();
    const last = byPartition[12][0];
    setTimeout(() => c.acquire(last, { ttlMs: 30_000 }), 500);
    const ev = (await it.next()).value;
    assert.deepEqual([ev.resource, ev.type, ev.partition], [last, 'granted', 12]);
    await it.return();
  } finally {
    c.close();
  }
});

test('a partition whose owner stops is followed to its new owner', { timeout: 180_000 }, async () => {
  const map = await settled(servers);
  const c = new Client(servers.map((s) => s.url), { timeoutMs: 20_000 });
  try {
    const byPartition = namesInEveryPartition('routing/move');
    const victim = servers[1];
    const p = map.indexOf(victim.url);
    assert.ok(p >= 0, 'the server to stop owns a partition');
    const name = byPartition[p][0];
    const lease = await c.acquire(name, { ttlMs: 60_000 });
    await eventually(() => c.partitions !== null, { timeoutMs: 20_000, message: 'the map learned' });
    assert.equal(c.partitions.owners[p], victim.url);

    // SIGTERM: it hands its partitions to the others and exits 0.
    assert.deepEqual(await victim.stop(), { code: 0, signal: null });
    const live = servers.filter((s) => s !== victim);
    const moved = await settled(live);
    const owner = moved[p];
    // A resource of another owner, asked about between the renewals: a client that sent each
    // request to the server that answered last would send the renewals there.
    const q = moved.findIndex((u) => u !== owner);
    const other = byPartition[q][0];

    const renewed = await c.renew(lease);
    assert.equal(renewed.fencingToken, lease.fencingToken);
    // The client learns the new map (again at most once a second, on a surprise).
    await eventually(
      async () => {
        await c.renew(lease);
        await c.get(other);
        return c.partitions?.owners[p] === owner && c.partitions.owners[q] === moved[q];
      },
      { timeoutMs: 30_000, intervalMs: 300, message: 'the client learning the new owner' },
    );
    const start = await forwarded(live);
    for (let i = 0; i < 5; i++) {
      assert.equal((await c.renew(lease)).fencingToken, lease.fencingToken);
      assert.equal((await c.get(other)).state, 'free');
    }
    assert.equal((await c.release(lease)).released, true);
    assert.equal(await forwarded(live), start, 'no request was forwarded after the move was learned');
  } finally {
    c.close();
  }
});

/**
 * A stand-in server: answers GET /v1/servers with `map()` (a [status, body] pair) and any
 * other request with a free resource's state and `headers`; counts the requests of each.
 */
async function standIn({ map, headers = {} }) {
  const s = { servers: 0, others: 0 };
  s.srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/v1/servers') {
        s.servers += 1;
        const [status, body] = map();
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
        return;
      }
      s.others += 1;
      const resource = decodeURIComponent(req.url.split('?')[0].replace('/v1/resources/', ''));
      res.writeHead(200, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify({ resource, state: 'free', index: 0, holder: null, waiters: 0 }));
    });
  });
  await new Promise((resolve) => s.srv.listen(0, '127.0.0.1', resolve));
  s.url = `http://127.0.0.1:${s.srv.address().port}`;
  s.close = () =>
    new Promise((resolve) => {
      s.srv.closeAllConnections?.();
      s.srv.close(resolve);
    });
  return s;
}

const noOwners = () => [200, { partitions: { count: 4, owners: [0, 1, 2, 3].map((partition) => ({ partition, url: null })) } }];

test('surprises ask for the map again at most once a second', async () => {
  // Every answer was served by another server: each one is a surprise.
  const s = await standIn({ map: noOwners, headers: { 'mutexd-partition': '1', 'mutexd-served-by': 'http://127.0.0.1:1' } });
  const c = new Client(s.url);
  try {
    const started = performance.now();
    await Promise.all(Array.from({ length: 50 }, (_, i) => c.get(`herd/${i}`)));
    for (let i = 0; i < 50; i++) await c.get(`herd/${i}`);
    await sleep(100);
    if (performance.now() - started < 900) assert.equal(s.servers, 1);
    assert.ok(s.servers <= Math.ceil((performance.now() - started) / 1000) + 1, `${s.servers} map requests`);
    assert.deepEqual(c.partitions, { count: 4, owners: [null, null, null, null] });
    await sleep(1100);
    const before = s.servers;
    await c.get('herd/again');
    await eventually(() => s.servers === before + 1, { message: 'the map asked for again after a second' });
  } finally {
    c.close();
    await s.close();
  }
});

test('a map request that fails fails no request, and is tried again later', async () => {
  let fail = true;
  const owner = await standIn({ map: noOwners, headers: { 'mutexd-partition': '2' } });
  const s = await standIn({
    map: () =>
      fail
        ? [500, { error: { code: 'internal', message: 'no' } }]
        : [200, { partitions: { count: 4, owners: [0, 1, 2, 3].map((partition) => ({ partition, url: owner.url })) } }],
    headers: { 'mutexd-partition': '2' },
  });
  const c = new Client(s.url);
  try {
    for (let i = 0; i < 5; i++) assert.equal((await c.get(`fail/${i}`)).state, 'free');
    await eventually(() => s.servers === 1, { message: 'the map asked for' });
    await sleep(50);
    assert.equal(c.partitions, null);
    fail = false;
    await sleep(1100);
    await c.get('fail/again');
    await eventually(() => c.partitions !== null, { message: 'the map learned on the next try' });
    // The owner is an advertised URL not among those given: requests about resources go
    // there as it is, the others to the server given.
    assert.deepEqual(c.partitions.owners, [owner.url, owner.url, owner.url, owner.url]);
    const sent = s.others;
    for (let i = 0; i < 5; i++) await c.get(`fail/${i}`);
    assert.equal(s.others, sent);
    assert.equal(owner.others, 5);
    await c.request('GET', '/v1/resources/fail/0');
    assert.equal(s.others, sent + 1);
  } finally {
    c.close();
    await s.close();
    await owner.close();
  }
});

test('a server whose map has one partition, or none, is never asked again', async () => {
  const s = await standIn({ map: () => [200, { self: { url: null, role: 'alone' }, active: null, servers: [] }], headers: { 'mutexd-partition': '0' } });
  const c = new Client(s.url);
  try {
    await c.get('flat/0');
    await eventually(() => s.servers === 1, { message: 'the map asked for' });
    await sleep(1100);
    for (let i = 0; i < 5; i++) await c.get(`flat/${i}`);
    await sleep(100);
    assert.equal(s.servers, 1);
    assert.equal(c.partitions, null);
  } finally {
    c.close();
    await s.close();
  }
});
