// Every method of Client against a real server.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { Client, LeaseHeldError, MutexdError, defaultOwner } from '../index.js';
import { startServer, uniqueName, rejection, sleep } from '../test-support/harness.mjs';

let server;
let client;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500'] });
  client = new Client(server.url);
});

after(async () => {
  client?.close();
  const status = await server?.stop();
  assert.deepEqual(status, { code: 0, signal: null });
});

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test('acquire grants a lease with a client-proposed id and the default owner', async () => {
  const name = uniqueName('jobs');
  const lease = await client.acquire(name, { ttlMs: 5000 });
  assert.equal(lease.resource, name);
  assert.match(lease.leaseId, UUID);
  assert.equal(lease.owner, `${hostname()}:${process.pid}`);
  assert.equal(lease.owner, defaultOwner());
  assert.equal(typeof lease.fencingToken, 'bigint');
  assert.ok(lease.fencingToken > 0n);
  assert.equal(lease.ttlMs, 5000);
  assert.ok(lease.expiresInMs > 4000 && lease.expiresInMs <= 5000);
  assert.match(lease.acquiredAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(lease.metadata, null);
  await client.release(lease);
});

test('acquire with owner, metadata and a proposed lease id; repeating it is idempotent', async () => {
  const name = uniqueName('jobs');
  const leaseId = 'ABCDEF01-2345-4678-9ABC-DEF012345678';
  const first = await client.acquire(name, { owner: 'worker-1', ttlMs: 3000, leaseId, metadata: { address: 'a:1' } });
  assert.equal(first.leaseId, leaseId.toLowerCase());
  assert.equal(first.owner, 'worker-1');
  assert.deepEqual(first.metadata, { address: 'a:1' });
  const again = await client.acquire(name, { owner: 'worker-1', ttlMs: 4000, leaseId, metadata: { address: 'a:2' } });
  assert.equal(again.fencingToken, first.fencingToken);
  assert.equal(again.leaseId, first.leaseId);
  assert.equal(again.ttlMs, 4000);
  assert.deepEqual(again.metadata, { address: 'a:2' });
  await client.release(again);
});

test('fencing tokens increase across grants of every resource', async () => {
  const a = await client.acquire(uniqueName('tok'));
  const b = await client.acquire(uniqueName('tok'));
  await client.release(a);
  const c = await client.acquire(a.resource);
  assert.ok(b.fencingToken > a.fencingToken);
  assert.ok(c.fencingToken > b.fencingToken);
  await client.release(b);
  await client.release(c);
});

test('acquire on a held resource rejects with lease_held, at once or when the wait runs out', async () => {
  const name = uniqueName('held');
  const lease = await client.acquire(name, { owner: 'holder', ttlMs: 4000 });
  const err = await rejection(client.acquire(name, { owner: 'other' }));
  assert.ok(err instanceof LeaseHeldError);
  assert.ok(err instanceof MutexdError);
  assert.equal(err.holder.owner, 'holder');
  assert.equal(err.holder.fencingToken, lease.fencingToken);
  const t0 = Date.now();
  const waited = await rejection(client.acquire(name, { owner: 'other', waitMs: 300 }));
  assert.ok(waited instanceof LeaseHeldError);
  assert.ok(Date.now() - t0 >= 250, 'the wait was honoured');
  await client.release(lease);
});

test('a waiting acquire is granted when the holder releases', async () => {
  const name = uniqueName('queue');
  const lease = await client.acquire(name, { owner: 'first' });
  const waiting = client.acquire(name, { owner: 'second', waitMs: 10_000 });
  await sleep(100);
  assert.equal((await client.get(name)).waiters, 1);
  const released = await client.release(lease);
  assert.deepEqual(released, { resource: name, released: true });
  const granted = await waiting;
  assert.equal(granted.owner, 'second');
  assert.ok(granted.fencingToken > lease.fencingToken);
  await client.release(granted);
});

test('renew keeps the token, takes a new ttl and replaces metadata; it also accepts { resource, leaseId }', async () => {
  const name = uniqueName('renew');
  const lease = await client.acquire(name, { ttlMs: 2000, metadata: { v: 1 } });
  const renewed = await client.renew(lease, { ttlMs: 6000, metadata: { v: 2 } });
  assert.equal(renewed.fencingToken, lease.fencingToken);
  assert.equal(renewed.ttlMs, 6000);
  assert.deepEqual(renewed.metadata, { v: 2 });
  const again = await client.renew({ resource: name, leaseId: lease.leaseId });
  assert.equal(again.ttlMs, 6000, 'default: the lease own ttl');
  assert.deepEqual(again.metadata, { v: 2 });
  await client.release({ resource: name, leaseId: lease.leaseId });
});

test('renew after expiry succeeds while nothing else was granted', async () => {
  const name = uniqueName('expired');
  const lease = await client.acquire(name, { ttlMs: 500 });
  await sleep(700);
  assert.equal((await client.get(name)).state, 'free');
  const renewed = await client.renew(lease);
  assert.equal(renewed.fencingToken, lease.fencingToken);
  assert.equal((await client.get(name)).state, 'held');
  await client.release(renewed);
});

test('release, then breakLease reports whether there was a lease', async () => {
  const name = uniqueName('break');
  const lease = await client.acquire(name, { owner: 'x' });
  const waiting = client.acquire(name, { owner: 'y', waitMs: 10_000 });
  await sleep(100);
  assert.deepEqual(await client.breakLease(name, { reason: 'failing over by hand' }), { resource: name, broken: true });
  const next = await waiting;
  assert.equal(next.owner, 'y', 'the next waiter is granted');
  assert.deepEqual(await client.breakLease(name), { resource: name, broken: true });
  assert.deepEqual(await client.breakLease(name), { resource: name, broken: false });
  assert.equal(lease.owner, 'x');
});

test('get: a name never used is free; a held one shows its holder and never the lease id', async () => {
  const name = uniqueName('get');
  const free = await client.get(name);
  assert.ok(Number.isInteger(free.index) && free.index >= 0);
  assert.deepEqual(free, { resource: name, state: 'free', index: free.index, holder: null, waiters: 0, limit: 1, holders: [] });
  const lease = await client.acquire(name, { owner: 'reader', ttlMs: 3000, metadata: { a: [1, 2] } });
  const held = await client.get(name);
  assert.equal(held.state, 'held');
  assert.ok(held.index > free.index);
  assert.equal(held.holder.owner, 'reader');
  assert.equal(held.holder.fencingToken, lease.fencingToken);
  assert.equal(held.holder.ttlMs, 3000);
  assert.ok(held.holder.expiresInMs <= 3000);
  assert.deepEqual(held.holder.metadata, { a: [1, 2] });
  assert.equal(held.waiters, 0);
  assert.deepEqual(held.holders, [held.holder]);
  assert.ok(!JSON.stringify(held, (k, v) => (typeof v === 'bigint' ? String(v) : v)).includes(lease.leaseId));
  await client.release(lease);
});

test('resource names with every allowed character, and with characters that must not change the URL', async () => {
  const name = `${uniqueName('chars')}/A-z_0.9~:@x`;
  const lease = await client.acquire(name);
  assert.equal(lease.resource, name);
  assert.equal((await client.get(name)).state, 'held');
  await client.release(lease);
  // "jobs/acquire" is a resource for GET (the whole rest of the path).
  const odd = `${uniqueName('chars')}/acquire`;
  assert.equal((await client.get(odd)).resource, odd);
  for (const bad of ['a?b', 'a#b', 'a b', 'a%2Fb', 'a/../b', '/a', 'a/', 'a//b', 'é']) {
    const err = await rejection(client.get(bad));
    assert.equal(err.code, 'invalid_resource', bad);
    const err2 = await rejection(client.acquire(bad));
    assert.equal(err2.code, 'invalid_resource', bad);
  }
  await assert.rejects(client.get(''), TypeError);
  await assert.rejects(client.renew({ resource: 'a' }), TypeError);
});

test('watch returns when the index changes, or unchanged when the wait runs out', async () => {
  const name = uniqueName('watch');
  const start = await client.get(name);
  const t0 = Date.now();
  const unchanged = await client.watch(name, start.index, { waitMs: 300 });
  assert.ok(Date.now() - t0 >= 250);
  assert.equal(unchanged.index, start.index);
  assert.equal(unchanged.state, 'free');
  const watching = client.watch(name, start.index, { waitMs: 10_000 });
  await sleep(100);
  const lease = await client.acquire(name, { owner: 'leader-1' });
  const changed = await watching;
  assert.equal(changed.state, 'held');
  assert.ok(changed.index > start.index);
  assert.equal(changed.holder.owner, 'leader-1');
  // A watch with the current index, answered by the next change (release).
  const next = client.watch(name, changed.index);
  await sleep(100);
  await client.release(lease);
  const released = await next;
  assert.equal(released.state, 'free');
  assert.ok(released.index > changed.index);
});

test('list iterates over pages of held resources in name order', async () => {
  const prefix = `${uniqueName('list')}/`;
  const names = ['e', 'a', 'c', 'b', 'd'].map((n) => prefix + n);
  const leases = [];
  for (const n of names) leases.push(await client.acquire(n, { owner: n }));
  await client.release(leases[3]); // prefix + 'b' is free again: not listed
  const pages = [];
  for await (const page of client.list({ prefix, limit: 2 })) pages.push(page);
  assert.ok(pages.length >= 2);
  for (const p of pages.slice(0, -1)) assert.equal(typeof p.nextCursor, 'string');
  assert.equal(pages.at(-1).nextCursor, null);
  const listed = pages.flatMap((p) => p.resources);
  assert.deepEqual(
    listed.map((r) => r.resource),
    ['a', 'c', 'd', 'e'].map((n) => prefix + n),
  );
  for (const r of listed) {
    assert.equal(r.state, 'held');
    assert.equal(r.holder.owner, r.resource);
    assert.equal(typeof r.holder.fencingToken, 'bigint');
  }
  // Start from a cursor.
  const rest = [];
  for await (const page of client.list({ prefix, limit: 1000, cursor: prefix + 'c' })) rest.push(...page.resources);
  assert.deepEqual(
    rest.map((r) => r.resource),
    ['d', 'e'].map((n) => prefix + n),
  );
  // Without a prefix the list holds them too; it is lazy: breaking out stops the requests.
  let seen = 0;
  for await (const page of client.list({ limit: 1 })) {
    seen += page.resources.length;
    if (seen >= 2) break;
  }
  assert.equal(seen, 2);
  for (const l of leases) await client.breakLease(l.resource);
});

test('request() reaches the operations endpoints', async () => {
  assert.deepEqual(await client.request('GET', '/healthz'), { status: 'ok' });
  assert.equal((await client.request('GET', '/readyz')).status, 'ready');
  const metrics = await client.request('GET', '/metrics');
  assert.equal(typeof metrics, 'string');
  assert.match(metrics, /^mutexd_/m);
});

test('a base URL with a trailing slash, and a URL object', async () => {
  const c1 = new Client(`${server.url}/`);
  const c2 = new Client(new URL(server.url));
  assert.equal(c1.url, server.url);
  assert.equal((await c1.get('x')).resource, 'x');
  assert.equal((await c2.get('x')).resource, 'x');
  c1.close();
  c2.close();
  assert.throws(() => new Client('ftp://example'), TypeError);
  assert.throws(() => new Client('not a url'), TypeError);
  assert.throws(() => new Client(server.url, { timeoutMs: 0 }), TypeError);
});

test('the client-level owner is the default of acquire', async () => {
  const c = new Client(server.url, { owner: 'configured-owner' });
  assert.equal(c.owner, 'configured-owner');
  const lease = await c.acquire(uniqueName('owner'));
  assert.equal(lease.owner, 'configured-owner');
  await c.release(lease);
  c.close();
});
