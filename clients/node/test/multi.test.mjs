// Several resources at once (docs/api.md, "Several resources at once") against a real server:
// acquireMany() all or none, renewMany() and releaseMany(), lockMany() renewing the set in the
// background and lost when one lease of it is broken, and the ordered helper lockOrdered() (one
// lock per resource, in name order, what was taken released when one fails).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  InvalidRequestError,
  LeaseHeldError,
  LeaseLostError,
  LeaseExpiredError,
  TransportError,
  Lock,
  MultiLock,
  OrderedLock,
} from '../index.js';
import { startServer, uniqueName, rejection, sleep } from '../test-support/harness.mjs';

const TTL = 1500; // a renewal every 500 ms
let server;
let client;
let other;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500'] });
  client = new Client(server.url);
  other = new Client(server.url, { owner: 'someone-else' });
});

// Every lock a test takes: released at the end whatever the test did, so that a failed test
// leaves no renewal timer keeping the process alive.
const taken = [];
function kept(lock) {
  taken.push(lock);
  return lock;
}

after(async () => {
  await Promise.allSettled(taken.map((l) => l.release()));
  client?.close();
  other?.close();
  await server?.stop();
});

/** Three resource names of the test's own. */
function threeNames() {
  const base = uniqueName('multi');
  return ['alice', 'bob', 'carol'].map((n) => `${base}/${n}`);
}

/** Resolves when `signal` is aborted; rejects when it is not within `ms`. */
function abortedWithin(signal, ms) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const timer = setTimeout(() => reject(new Error(`not aborted within ${ms} ms`)), ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

async function holderToken(name) {
  const state = await other.get(name);
  return state.state === 'held' ? state.holder.fencingToken : null;
}

// -- the low-level calls ---------------------------------------------------------------------

test('acquireMany() grants every lease under one id, each with its own token', async () => {
  const names = threeNames();
  const leases = await client.acquireMany(names, { owner: 'mover', ttlMs: 10_000, metadata: { job: 7 } });
  assert.deepEqual(
    leases.map((l) => l.resource),
    names,
    'in the order given',
  );
  assert.equal(new Set(leases.map((l) => l.leaseId)).size, 1);
  const tokens = leases.map((l) => l.fencingToken);
  assert.ok(tokens.every((t) => typeof t === 'bigint'));
  assert.equal(new Set(tokens).size, 3);
  assert.ok(leases.every((l) => l.owner === 'mover' && l.ttlMs === 10_000 && l.metadata.job === 7));
  assert.deepEqual(await Promise.all(names.map(holderToken)), tokens);
  // Retried with the same lease id and names: the same leases back.
  const again = await client.acquireMany(names, { owner: 'mover', ttlMs: 10_000, leaseId: leases[0].leaseId });
  assert.deepEqual(
    again.map((l) => l.fencingToken),
    tokens,
  );
  // Each is a lease of its own too.
  assert.equal((await client.renew(leases[1])).fencingToken, tokens[1]);
  await client.release(leases[2]);
  assert.equal((await other.get(names[2])).state, 'free');
  await client.releaseMany(leases.slice(0, 2));
});

test('acquireMany() is all or none: lease_held names the first held, nothing is granted', async () => {
  const names = threeNames();
  const held = await other.acquire(names[1], { ttlMs: 10_000 });
  const err = await rejection(client.acquireMany(names, { ttlMs: 10_000 }));
  assert.ok(err instanceof LeaseHeldError, String(err));
  assert.equal(err.resource, names[1]);
  assert.equal(err.holder.fencingToken, held.fencingToken);
  assert.ok(err.retryAfter > 0 && err.retryAfter <= 10);
  assert.equal((await other.get(names[0])).state, 'free');
  assert.equal((await other.get(names[2])).state, 'free');
  assert.equal(await holderToken(names[1]), held.fencingToken);
  await other.release(held);
});

test('acquireMany() with waitMs waits for every resource', async () => {
  const names = threeNames().slice(0, 2);
  const held = await other.acquire(names[0], { ttlMs: 10_000 });
  setTimeout(() => other.release(held), 500);
  const t0 = performance.now();
  const leases = await client.acquireMany(names, { ttlMs: 10_000, waitMs: 5000 });
  const took = performance.now() - t0;
  assert.ok(took > 300 && took < 4000, `took ${took} ms`);
  assert.ok(leases[0].fencingToken > held.fencingToken);
  await client.releaseMany(leases);
});

test('renewMany() and releaseMany(): a lost lease is named, the others are renewed or released', async () => {
  const names = threeNames();
  const leases = await client.acquireMany(names, { ttlMs: 2000 });
  const tokens = leases.map((l) => l.fencingToken);
  await sleep(500);
  const renewed = await client.renewMany(leases, { ttlMs: 10_000 });
  assert.deepEqual(
    renewed.map((l) => l.fencingToken),
    tokens,
  );
  assert.ok(renewed.every((l) => l.ttlMs === 10_000 && l.expiresInMs > 9000));
  assert.equal((await other.breakLease(names[1])).broken, true);
  const lost = await rejection(client.renewMany({ resources: names, leaseId: leases[0].leaseId }, { ttlMs: 20_000 }));
  assert.ok(lost instanceof LeaseLostError, String(lost));
  assert.deepEqual(lost.resources, [names[1]]);
  assert.equal(lost.resource, names[1]);
  for (const n of [names[0], names[2]]) assert.equal((await other.get(n)).holder.ttlMs, 20_000);
  const notAll = await rejection(client.releaseMany(leases));
  assert.ok(notAll instanceof LeaseLostError);
  assert.deepEqual(notAll.resources, [names[1]]);
  for (const n of names) assert.equal((await other.get(n)).state, 'free');
  const again = await client.acquireMany(names.slice(0, 2));
  assert.deepEqual(await client.releaseMany(again), [
    { resource: names[0], released: true },
    { resource: names[1], released: true },
  ]);
});

test('the names are checked', async () => {
  const names = threeNames();
  await assert.rejects(client.acquireMany('multi/one-name'), TypeError);
  await assert.rejects(client.acquireMany([]), TypeError);
  const twice = await rejection(client.acquireMany([names[0], names[0]]));
  assert.ok(twice instanceof InvalidRequestError);
  assert.equal(twice.field, 'resources');
  const a = await client.acquireMany(names.slice(0, 2));
  const b = await client.acquireMany([names[2], `${names[0]}x`]);
  await assert.rejects(client.renewMany([a[0], b[0]]), TypeError, 'two lease ids');
  await client.releaseMany(a);
  await client.releaseMany(b);
});

// -- lockMany() ---------------------------------------------------------------------------------

test('lockMany() renews the set in the background across several TTLs, then releases it', async () => {
  const names = threeNames().slice(0, 2);
  const lock = kept(await client.lockMany(names, { ttlMs: TTL }));
  assert.ok(lock instanceof MultiLock);
  assert.deepEqual(lock.resources, names);
  assert.equal(typeof lock.leaseId, 'string');
  const tokens = lock.fencingTokens;
  assert.deepEqual([...tokens.keys()], names);
  assert.deepEqual(
    lock.leases.map((l) => l.fencingToken),
    [...tokens.values()],
  );
  const firstRenewedAt = lock.leases.map((l) => l.renewedAt);
  const t0 = Date.now();
  while (Date.now() - t0 < 3.5 * TTL) {
    for (const n of names) assert.equal(await holderToken(n), tokens.get(n), 'the same lease all along');
    assert.ok(lock.remainingMs > 0 && lock.remainingMs <= TTL);
    assert.equal(lock.lost, false);
    await sleep(250);
  }
  for (const n of names) await assert.rejects(other.acquire(n), LeaseHeldError);
  assert.notDeepEqual(
    lock.leases.map((l) => l.renewedAt),
    firstRenewedAt,
    'renewed',
  );
  lock.check();
  assert.equal(await lock.release(), true);
  assert.equal(lock.released, true);
  assert.equal(lock.signal.aborted, true);
  for (const n of names) assert.equal((await other.get(n)).state, 'free');
});

test('lockMany() is lost when one lease of the set is broken', async () => {
  const names = threeNames();
  const calls = [];
  const lock = kept(await client.lockMany(names, { ttlMs: TTL, onLost: (err, l) => calls.push([err, l]) }));
  await sleep(200);
  assert.equal((await other.breakLease(names[2], { reason: 'test' })).broken, true);
  const brokenAt = performance.now();
  // The next renewal of the set (at most a third of the TTL away) is answered lease_lost.
  await abortedWithin(lock.signal, TTL / 3 + 700);
  assert.ok(performance.now() - brokenAt < TTL / 3 + 700);
  assert.equal(lock.lost, true);
  const reason = lock.signal.reason;
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.deepEqual(reason.resources, [names[2]]);
  assert.throws(() => lock.check(), LeaseLostError);
  assert.equal(lock.remainingMs, 0);
  assert.equal(calls.length, 1);
  assert.equal(calls[0][0], reason);
  assert.equal(calls[0][1], lock);
  const theirs = await other.acquire(names[2], { ttlMs: 5000 });
  assert.equal((await other.get(names[0])).state, 'held', 'the others are still held until release');
  // Released: false (the set was lost), but what it still held is released, the other's lease
  // left alone.
  assert.equal(await lock.release(), false);
  assert.equal((await other.get(names[0])).state, 'free');
  assert.equal((await other.get(names[1])).state, 'free');
  assert.equal(await holderToken(names[2]), theirs.fencingToken);
});

test('lockMany() is lost when the server dies and the deadline passes', async () => {
  const own = await startServer({ args: ['--min-ttl-ms', '500'] });
  const c = new Client(own.url, { timeoutMs: 2000 });
  try {
    const lock = kept(await c.lockMany(threeNames().slice(0, 2), { ttlMs: TTL }));
    await sleep(700);
    await own.kill();
    const killedAt = performance.now();
    await abortedWithin(lock.signal, TTL + 500);
    const after = performance.now() - killedAt;
    assert.ok(after < TTL + 500, `lost ${after} ms after the kill`);
    assert.ok(lock.signal.reason instanceof LeaseExpiredError, String(lock.signal.reason));
    assert.ok(lock.signal.reason.cause instanceof TransportError);
    assert.equal(await lock.release(), false);
  } finally {
    c.close();
    await own.stop();
  }
});

test('lockMany() whose wait runs out holds nothing', async () => {
  const names = threeNames();
  const held = await other.acquire(names[1], { ttlMs: 10_000 });
  const t0 = performance.now();
  const err = await rejection(client.lockMany(names, { ttlMs: TTL, waitMs: 500 }));
  const took = performance.now() - t0;
  assert.ok(err instanceof LeaseHeldError);
  assert.ok(took > 400 && took < 3000, `took ${took} ms`);
  assert.equal(err.resource, names[1]);
  assert.equal((await other.get(names[0])).state, 'free');
  assert.equal((await other.get(names[2])).state, 'free');
  await other.release(held);
});

// -- lockOrdered() ------------------------------------------------------------------------------

test('lockOrdered() takes the resources in name order and renews each', async () => {
  const names = threeNames();
  const given = [names[2], names[0], names[1]];
  const lock = kept(await client.lockOrdered(given, { ttlMs: TTL, waitMs: 1000 }));
  assert.ok(lock instanceof OrderedLock);
  assert.deepEqual(lock.resources, [...given].sort());
  assert.ok(lock.locks.every((l) => l instanceof Lock));
  assert.equal(new Set(lock.locks.map((l) => l.leaseId)).size, 3, 'each lease its own');
  // Taken one by one in that order: each grant's token is larger than the one before.
  const tokens = lock.leases.map((l) => l.fencingToken);
  assert.ok(tokens[0] < tokens[1] && tokens[1] < tokens[2]);
  await sleep(3 * TTL);
  assert.equal(lock.lost, false);
  for (const n of given) assert.equal(await holderToken(n), lock.fencingTokens.get(n));
  assert.ok(lock.remainingMs > 0 && lock.remainingMs <= TTL);
  lock.check();
  assert.equal(await lock.release(), true);
  assert.equal(lock.signal.aborted, true);
  for (const n of given) assert.equal((await other.get(n)).state, 'free');
});

test('lockOrdered() releases what it took when one fails', async () => {
  const names = threeNames();
  // names[1] is the second in order: names[0] is taken first, then names[1] fails.
  const held = await other.acquire(names[1], { ttlMs: 10_000 });
  const c = new Client(server.url);
  const granted = [];
  const acquire = c.acquire.bind(c);
  c.acquire = async (resource, options) => {
    const lease = await acquire(resource, options);
    granted.push(resource);
    return lease;
  };
  try {
    const t0 = performance.now();
    const err = await rejection(c.lockOrdered(names, { ttlMs: TTL, waitMs: 500 }));
    assert.ok(err instanceof LeaseHeldError, String(err));
    assert.ok(performance.now() - t0 < 3000, 'the wait bounds the whole');
    assert.deepEqual(granted, [names[0]]);
    assert.equal(err.holder.fencingToken, held.fencingToken);
    assert.equal((await other.get(names[0])).state, 'free', 'given back');
    assert.equal((await other.get(names[2])).state, 'free', 'never taken');
    assert.equal(await holderToken(names[1]), held.fencingToken);
  } finally {
    c.close();
    await other.release(held);
  }
});

test('lockOrdered() is lost when any of its locks is', async () => {
  const names = threeNames();
  const calls = [];
  const lock = kept(await client.lockOrdered(names, { ttlMs: TTL, onLost: (err, l) => calls.push([err, l]) }));
  await sleep(200);
  assert.equal((await other.breakLease(names[1])).broken, true);
  await abortedWithin(lock.signal, TTL / 3 + 700);
  assert.ok(lock.signal.reason instanceof LeaseLostError);
  assert.equal(lock.lost, true);
  assert.equal(lock.locks[1].lost, true);
  assert.equal(lock.locks[0].lost, false);
  assert.throws(() => lock.check(), LeaseLostError);
  assert.equal(lock.remainingMs, 0);
  assert.equal(calls.length, 1);
  assert.equal(calls[0][1], lock);
  assert.equal(await lock.release(), false);
  for (const n of names) assert.equal((await other.get(n)).state, 'free');
});

test('lockOrdered() checks its names', async () => {
  const names = threeNames();
  await assert.rejects(client.lockOrdered([names[0], names[0]]), TypeError);
  await assert.rejects(client.lockOrdered(names[0]), TypeError);
});
