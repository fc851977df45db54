// Counting semaphores and shared leases (docs/api.md, "Semaphores and shared leases") against
// a real server: limit and shared on acquire and lock, the holders of a resource, 409
// limit_mismatch, and break of one lease by its id.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  ConflictError,
  InvalidRequestError,
  LeaseHeldError,
  LeaseLostError,
  LimitMismatchError,
} from '../index.js';
import { startServer, uniqueName, rejection, eventually, sleep } from '../test-support/harness.mjs';

let server;
let client;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500', '--max-holders', '8'] });
  client = new Client(server.url);
});

after(async () => {
  client?.close();
  const status = await server?.stop();
  assert.deepEqual(status, { code: 0, signal: null });
});

const waiters = async (name) => (await client.get(name)).waiters;

test('a semaphore grants limit leases, then lease_held naming the lease that ends first', async () => {
  const name = uniqueName('sem');
  const leases = [];
  for (let i = 0; i < 3; i++) leases.push(await client.acquire(name, { owner: `w${i}`, ttlMs: 10_000 + i * 1000, limit: 3 }));
  assert.deepEqual(
    leases.map((l) => [l.limit, l.shared]),
    [
      [3, false],
      [3, false],
      [3, false],
    ],
  );
  assert.equal(new Set(leases.map((l) => l.leaseId)).size, 3);
  assert.ok(leases[0].fencingToken < leases[1].fencingToken && leases[1].fencingToken < leases[2].fencingToken);
  const err = await rejection(client.acquire(name, { owner: 'w3', limit: 3 }));
  assert.ok(err instanceof LeaseHeldError, String(err));
  assert.equal(err.holder.owner, 'w0');
  assert.equal(err.holder.fencingToken, leases[0].fencingToken);
  assert.ok(err.retryAfter > 0 && err.retryAfter <= 10);
  // Releasing one lease frees one place.
  await client.release(leases[1]);
  const fourth = await client.acquire(name, { owner: 'w3', limit: 3 });
  assert.equal(fourth.limit, 3);
  assert.ok(fourth.fencingToken > leases[2].fencingToken);
  // Each lease renews on its own, and keeps its limit.
  const renewed = await client.renew(leases[2], { ttlMs: 20_000 });
  assert.deepEqual([renewed.fencingToken, renewed.limit, renewed.ttlMs], [leases[2].fencingToken, 3, 20_000]);
  await client.breakLease(name);
});

test('limit_mismatch names the limit in force', async () => {
  const name = uniqueName('sem');
  const first = await client.acquire(name, { owner: 'w0', limit: 3, ttlMs: 10_000 });
  const err = await rejection(client.acquire(name, { owner: 'w1', limit: 2 }));
  assert.ok(err instanceof LimitMismatchError && err instanceof ConflictError, String(err));
  assert.deepEqual([err.status, err.code, err.limit], [409, 'limit_mismatch', 3]);
  // An acquire without a limit names 1: told at once, though a place is free; also when it
  // would wait.
  const started = performance.now();
  const err2 = await rejection(client.acquire(name, { owner: 'w1', waitMs: 5000 }));
  assert.ok(err2 instanceof LimitMismatchError);
  assert.equal(err2.limit, 3);
  assert.ok(performance.now() - started < 2000);
  // A retry with its own lease id gets its lease back only under the same limit.
  const again = await client.acquire(name, { owner: 'w0', limit: 3, ttlMs: 10_000, leaseId: first.leaseId });
  assert.equal(again.fencingToken, first.fencingToken);
  assert.ok((await rejection(client.acquire(name, { owner: 'w0', limit: 4, leaseId: first.leaseId }))) instanceof LimitMismatchError);
  // The limit belongs to the resource while it has holders only.
  await client.release(first);
  const next = await client.acquire(name, { limit: 2 });
  assert.equal(next.limit, 2);
  await client.release(next);
});

test('get and list show every holder, oldest grant first', async () => {
  const name = uniqueName('sem');
  const free = await client.get(name);
  assert.deepEqual([free.limit, free.holders, free.holder], [1, [], null]);
  const leases = [];
  for (let i = 0; i < 3; i++) {
    leases.push(await client.acquire(name, { owner: `w${i}`, ttlMs: 5000 + i * 1000, limit: 3, metadata: { i } }));
  }
  const state = await client.get(name);
  assert.deepEqual([state.state, state.limit, state.waiters], ['held', 3, 0]);
  assert.deepEqual(
    state.holders.map((h) => [h.owner, h.fencingToken, h.ttlMs, h.shared, h.metadata]),
    leases.map((l, i) => [`w${i}`, l.fencingToken, 5000 + i * 1000, false, { i }]),
  );
  for (const h of state.holders) {
    assert.ok(h.expiresInMs > 0 && h.expiresInMs <= h.ttlMs);
    assert.equal(typeof h.acquiredAt, 'string');
    assert.ok(!('leaseId' in h));
  }
  assert.deepEqual(state.holder, state.holders[0]);
  const pages = [];
  for await (const page of client.list({ prefix: name })) pages.push(...page.resources);
  assert.equal(pages.length, 1);
  assert.equal(pages[0].limit, 3);
  assert.deepEqual(
    pages[0].holders.map((h) => h.fencingToken),
    leases.map((l) => l.fencingToken),
  );
  await client.release(leases[1]);
  assert.deepEqual(
    (await client.get(name)).holders.map((h) => h.owner),
    ['w0', 'w2'],
  );
  await client.breakLease(name);
});

test('readers hold together, a writer waits for them, a later reader waits for the writer', async () => {
  const name = uniqueName('rw');
  const r1 = await client.acquire(name, { owner: 'r1', shared: true, ttlMs: 10_000 });
  const r2 = await client.acquire(name, { owner: 'r2', shared: true, ttlMs: 10_000 });
  assert.deepEqual([r1.shared, r1.limit, r2.shared], [true, 1, true]);
  const state = await client.get(name);
  assert.deepEqual(
    state.holders.map((h) => [h.owner, h.shared]),
    [
      ['r1', true],
      ['r2', true],
    ],
  );
  assert.ok((await rejection(client.acquire(name, { owner: 'w', ttlMs: 10_000 }))) instanceof LeaseHeldError);
  let writer = null;
  const writing = client.acquire(name, { owner: 'w', ttlMs: 10_000, waitMs: 10_000 }).then((l) => (writer = l));
  await eventually(async () => (await waiters(name)) === 1, { message: 'the writer queued' });
  let reader = null;
  const reading = client.acquire(name, { owner: 'r3', shared: true, ttlMs: 10_000, waitMs: 10_000 }).then((l) => (reader = l));
  await eventually(async () => (await waiters(name)) === 2, { message: 'the late reader queued' });
  await client.release(r1);
  await sleep(200);
  assert.equal(writer, null, 'r2 still reads');
  await client.release(r2);
  await writing;
  assert.equal(writer.shared, false);
  const now = await client.get(name);
  assert.deepEqual(
    now.holders.map((h) => [h.owner, h.shared]),
    [['w', false]],
  );
  assert.equal(now.waiters, 1);
  assert.equal(reader, null, 'the late reader waits for the writer');
  await client.release(writer);
  await reading;
  assert.ok(reader.shared && reader.fencingToken > writer.fencingToken);
  await client.release(reader);
});

test('a writer holds alone', async () => {
  const name = uniqueName('rw');
  const w = await client.acquire(name, { owner: 'w', ttlMs: 10_000 });
  const err = await rejection(client.acquire(name, { owner: 'r', shared: true }));
  assert.ok(err instanceof LeaseHeldError);
  assert.equal(err.holder.owner, 'w');
  await client.release(w);
  const r = await client.acquire(name, { owner: 'r', shared: true });
  assert.equal(r.shared, true);
  await client.release(r);
});

test('bad limits, and shared with a limit, are invalid_field', async () => {
  const name = uniqueName('bad');
  for (const [options, field] of [
    [{ shared: true, limit: 2 }, 'shared'],
    [{ limit: 0 }, 'limit'],
    [{ limit: -1 }, 'limit'],
    [{ limit: 9 }, 'limit'], // above --max-holders 8
  ]) {
    const err = await rejection(client.acquire(name, options));
    assert.ok(err instanceof InvalidRequestError, `${JSON.stringify(options)}: ${err}`);
    assert.deepEqual([err.code, err.field], ['invalid_field', field]);
  }
  const max = await client.acquire(name, { limit: 8 });
  assert.equal(max.limit, 8);
  await client.release(max);
});

test('break ends only the lease named by leaseId, or every lease without', async () => {
  const name = uniqueName('brk');
  const leases = [];
  for (let i = 0; i < 3; i++) leases.push(await client.acquire(name, { owner: `w${i}`, ttlMs: 10_000, limit: 3 }));
  assert.deepEqual(await client.breakLease(name, { leaseId: leases[1].leaseId, reason: 'stuck' }), {
    resource: name,
    broken: true,
  });
  assert.deepEqual(
    (await client.get(name)).holders.map((h) => h.owner),
    ['w0', 'w2'],
  );
  assert.ok((await rejection(client.renew(leases[1]))) instanceof LeaseLostError);
  assert.equal((await client.renew(leases[0])).fencingToken, leases[0].fencingToken);
  // That lease holds nothing now, nor does a lease id never granted.
  assert.equal((await client.breakLease(name, { leaseId: leases[1].leaseId })).broken, false);
  assert.equal((await client.breakLease(name, { leaseId: '00000000-0000-4000-8000-000000000000' })).broken, false);
  assert.equal((await client.breakLease(name)).broken, true);
  const state = await client.get(name);
  assert.deepEqual([state.state, state.holders, state.holder], ['free', [], null]);
});

test('breaking the last reader grants the waiting writer', async () => {
  const name = uniqueName('brk');
  const r = await client.acquire(name, { owner: 'r', shared: true, ttlMs: 30_000 });
  const writing = client.acquire(name, { owner: 'w', ttlMs: 10_000, waitMs: 10_000 });
  await eventually(async () => (await waiters(name)) === 1, { message: 'the writer queued' });
  assert.equal((await client.breakLease(name, { leaseId: r.leaseId })).broken, true);
  const w = await writing;
  assert.equal(w.owner, 'w');
  await client.release(w);
});

test('lock takes a place of a semaphore and renews it on its own', async () => {
  const name = uniqueName('lock');
  const a = await client.lock(name, { limit: 2, ttlMs: 1500 });
  const b = await client.lock(name, { limit: 2, ttlMs: 1500 });
  try {
    assert.deepEqual([a.limit, a.shared, b.limit], [2, false, 2]);
    assert.ok((await rejection(client.lock(name, { limit: 2, waitMs: 200 }))) instanceof LeaseHeldError);
    const err = await rejection(client.lock(name, { waitMs: 200 }));
    assert.ok(err instanceof LimitMismatchError);
    assert.equal(err.limit, 2);
    const tokens = [a.fencingToken, b.fencingToken];
    await sleep(2000); // more than a TTL: each is renewed
    assert.ok(!a.lost && !b.lost);
    assert.deepEqual([a.fencingToken, b.fencingToken], tokens);
    assert.equal(a.lease.limit, 2);
    assert.equal((await client.get(name)).holders.length, 2);
  } finally {
    await a.release();
    await b.release();
  }
  assert.equal((await client.get(name)).state, 'free');
});

test('lock with shared: true', async () => {
  const name = uniqueName('lock');
  const a = await client.lock(name, { shared: true });
  const b = await client.lock(name, { shared: true, waitMs: 1000 });
  try {
    assert.deepEqual([a.shared, b.shared, a.limit], [true, true, 1]);
    assert.deepEqual(
      (await client.get(name)).holders.map((h) => h.shared),
      [true, true],
    );
  } finally {
    await a.release();
    await b.release();
  }
  assert.equal((await client.get(name)).state, 'free');
});
