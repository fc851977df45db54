// lock(): background renewal, loss (lease_lost, and the deadline after the server died), and
// cancellation of a waiting acquire.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  Client,
  LeaseHeldError,
  LeaseLostError,
  LeaseExpiredError,
  TransportError,
  Lock,
} from '../index.js';
import { safetyMarginMs } from '../src/lock.js';
import { startServer, uniqueName, rejection, sleep, eventually } from '../test-support/harness.mjs';

const TTL = 1500;
let server;
let client;
let other;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500'] });
  client = new Client(server.url);
  other = new Client(server.url, { owner: 'someone-else' });
});

after(async () => {
  client?.close();
  other?.close();
  await server?.stop();
});

test('lock() renews in the background across several TTLs, then releases', async () => {
  const name = uniqueName('lock');
  const lock = await client.lock(name, { ttlMs: TTL, metadata: { role: 'leader' } });
  assert.ok(lock instanceof Lock);
  assert.equal(lock.resource, name);
  assert.equal(lock.ttlMs, TTL);
  assert.equal(typeof lock.fencingToken, 'bigint');
  assert.equal(lock.lost, false);
  assert.equal(lock.signal.aborted, false);
  const firstRenewedAt = lock.lease.renewedAt;
  const t0 = Date.now();
  while (Date.now() - t0 < 3.5 * TTL) {
    const state = await other.get(name);
    assert.equal(state.state, 'held');
    assert.equal(state.holder.fencingToken, lock.fencingToken, 'the same lease all along');
    assert.ok(lock.remainingMs > 0 && lock.remainingMs <= TTL);
    await sleep(250);
  }
  await assert.rejects(other.acquire(name), LeaseHeldError);
  assert.equal(lock.lost, false);
  assert.notEqual(lock.lease.renewedAt, firstRenewedAt, 'renewed');
  assert.deepEqual(lock.lease.metadata, { role: 'leader' });
  assert.equal(await lock.release(), true);
  assert.equal(lock.released, true);
  assert.equal(lock.lost, false);
  assert.equal(lock.signal.aborted, true, 'the signal is aborted on release too');
  assert.equal(lock.remainingMs, 0);
  assert.equal((await other.get(name)).state, 'free');
  assert.equal(await lock.release(), true, 'release() again returns the same answer');
});

// What `await using` calls at the end of its block.
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

test('a lock is async-disposable: disposing releases it, as release() does', async () => {
  const name = uniqueName('lock');
  // `await using lock = await client.lock(name)`, spelled as the Node versions without the
  // syntax (18, 20) would.
  const lock = await client.lock(name, { ttlMs: TTL });
  try {
    assert.equal((await other.get(name)).holder.fencingToken, lock.fencingToken);
  } finally {
    assert.equal(await lock[asyncDispose](), undefined);
  }
  assert.equal(lock.released, true);
  assert.equal((await other.get(name)).state, 'free');
  // A lost lock disposes without an error, as release() resolves false for it.
  const lost = await client.lock(name, { ttlMs: TTL });
  await other.breakLease(name);
  await eventually(() => lost.lost, { message: 'lost' });
  await lost[asyncDispose]();
});

// The syntax itself, where this Node has it.
let usingBlock;
try {
  const AsyncFunction = (async () => {}).constructor;
  usingBlock = new AsyncFunction('client', 'name', 'await using lock = await client.lock(name); return lock;');
} catch {
  usingBlock = undefined;
}

const noUsing = !usingBlock && 'no `await using` in this Node';

test('`await using` releases the lock at the end of its block', { skip: noUsing }, async () => {
  const name = uniqueName('lock');
  const lock = await usingBlock(client, name);
  assert.equal(lock.released, true);
  assert.equal((await other.get(name)).state, 'free');
});

test('onLost fires once, at the first renewal answered lease_lost, when someone breaks the lease', async () => {
  const name = uniqueName('lock');
  const calls = [];
  const lock = await client.lock(name, { ttlMs: TTL, onLost: (err, l) => calls.push({ err, l, at: Date.now() }) });
  await sleep(200);
  const brokeAt = Date.now();
  assert.deepEqual(await other.breakLease(name, { reason: 'test' }), { resource: name, broken: true });
  await eventually(() => calls.length > 0, { message: 'onLost' });
  assert.ok(calls[0].at - brokeAt <= TTL / 3 + 300, 'at the next renewal');
  assert.ok(calls[0].err instanceof LeaseLostError);
  assert.equal(calls[0].l, lock);
  assert.equal(lock.lost, true);
  assert.equal(lock.signal.aborted, true);
  assert.equal(lock.signal.reason, calls[0].err);
  assert.equal(lock.remainingMs, 0);
  await sleep(TTL);
  assert.equal(calls.length, 1, 'once');
  assert.equal(await lock.release(), false);
});

test('onLost fires when the server is killed and the lease deadline passes (client monotonic clock)', async () => {
  const own = await startServer({ args: ['--min-ttl-ms', '500'] });
  const c = new Client(own.url, { timeoutMs: 2000 });
  const name = uniqueName('lock');
  let lost;
  const lock = await c.lock(name, { ttlMs: TTL, onLost: (err) => (lost = { err, at: performance.now() }) });
  const first = lock.lease;
  await eventually(() => lock.lease !== first, { intervalMs: 5, message: 'a renewal' });
  const remaining = lock.remainingMs;
  const killedAt = performance.now();
  await own.kill();
  await eventually(() => lost, { timeoutMs: 3 * TTL, message: 'onLost' });
  const after = lost.at - killedAt;
  assert.ok(lost.err instanceof LeaseExpiredError, String(lost.err));
  assert.ok(lost.err.cause instanceof TransportError, 'the last renewal failure is the cause');
  assert.equal(lost.err.code, 'lease_expired');
  assert.ok(Math.abs(after - remaining) < 200, `fired ${after} ms after the kill, deadline was ${remaining} ms away`);
  assert.ok(after <= TTL + 100, `no later than a TTL after the kill (${after} ms)`);
  assert.ok(remaining > TTL / 2, `the kill came just after a renewal (${remaining} ms left)`);
  assert.equal(lock.lost, true);
  assert.equal(lock.signal.reason, lost.err);
  // The server, started again on its data, agrees: the lease runs out at most the client's
  // safety margin (a fiftieth of the TTL) after onLost, which fires that much early. A restart
  // can be quicker than the margin, and then the lease is still held for what is left of it.
  const again = await startServer({ dataDir: own.dataDir, args: ['--min-ttl-ms', '500'] });
  const c2 = new Client(again.url);
  try {
    const g = await c2.get(name);
    if (g.state === 'held') {
      assert.ok(g.holder.expiresInMs <= safetyMarginMs(TTL), `held ${g.holder.expiresInMs} ms more`);
    }
    await eventually(async () => (await c2.get(name)).state === 'free', {
      timeoutMs: safetyMarginMs(TTL) + 1000,
      intervalMs: 5,
      message: 'the restarted server to find the lease run out',
    });
  } finally {
    c2.close();
    await again.stop();
    await own.stop(); // removes the data directory
    c.close();
  }
});

test('an AbortSignal cancels a waiting acquire, and the server then grants the next waiter, not it', async () => {
  const name = uniqueName('abort');
  const holder = await client.acquire(name, { owner: 'A', ttlMs: 10_000 });
  const ac = new AbortController();
  const b = client.acquire(name, { owner: 'B', waitMs: 20_000, signal: ac.signal });
  await eventually(async () => (await other.get(name)).waiters === 1, { message: 'B queued' });
  const abortedAt = Date.now();
  ac.abort();
  const err = await rejection(b);
  assert.equal(err, ac.signal.reason);
  assert.equal(err.name, 'AbortError');
  assert.ok(Date.now() - abortedAt < 200, 'at once');
  await eventually(async () => (await other.get(name)).waiters === 0, { message: 'B dropped from the queue' });
  const c = other.acquire(name, { owner: 'C', waitMs: 20_000 });
  await eventually(async () => (await other.get(name)).waiters === 1, { message: 'C queued' });
  await client.release(holder);
  const granted = await c;
  assert.equal(granted.owner, 'C');
  assert.equal((await other.get(name)).holder.owner, 'C');
  await other.release(granted);
});

test('AbortSignal: already aborted, a custom reason, and lock() while waiting', async () => {
  const name = uniqueName('abort');
  const reason = new Error('stop now');
  const err = await rejection(client.get(name, { signal: AbortSignal.abort(reason) }));
  assert.equal(err, reason);
  const holder = await client.acquire(name, { ttlMs: 10_000 });
  const ac = new AbortController();
  const waiting = client.lock(name, { ttlMs: TTL, waitMs: 20_000, signal: ac.signal });
  await sleep(100);
  ac.abort(reason);
  assert.equal(await rejection(waiting), reason);
  const w = new AbortController();
  const watching = client.watch(name, (await client.get(name)).index, { waitMs: 20_000, signal: w.signal });
  await sleep(50);
  w.abort();
  assert.equal((await rejection(watching)).name, 'AbortError');
  const listing = client.list({ signal: AbortSignal.abort() });
  assert.equal((await rejection(listing.next())).name, 'AbortError');
  await client.release(holder);
});

test('a lock granted after waiting in the queue is renewed and kept', async () => {
  const name = uniqueName('queued');
  const holder = await other.acquire(name, { ttlMs: 10_000 });
  setTimeout(() => other.release(holder), 800);
  const lock = await client.lock(name, { ttlMs: TTL, waitMs: 10_000 });
  await sleep(2 * TTL);
  assert.equal(lock.lost, false);
  assert.equal((await other.get(name)).holder.fencingToken, lock.fencingToken);
  assert.equal(await lock.release(), true);
});

test('lock() without the lease: lease_held is thrown', async () => {
  const name = uniqueName('held');
  const holder = await other.acquire(name);
  await assert.rejects(client.lock(name, { ttlMs: TTL }), LeaseHeldError);
  await other.release(holder);
});

const childScript = fileURLToPath(new URL('../test-support/lock-child.mjs', import.meta.url));

function runChild(mode) {
  const child = spawn(process.execPath, [childScript, server.url, uniqueName('child'), mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited };
}

test('the process can exit after release (nothing of the lock or client keeps it alive)', async () => {
  const { exited } = runChild('release');
  const code = await Promise.race([exited, sleep(5000).then(() => 'still running')]);
  assert.equal(code, 0);
});

test('a held lock keeps the process alive (its renewal is work in progress)', async () => {
  const { child, exited } = runChild('hold');
  const code = await Promise.race([exited, sleep(2 * TTL).then(() => 'still running')]);
  assert.equal(code, 'still running');
  child.kill('SIGTERM');
  await exited;
});

// Blocks this thread (timers included) for `ms`, as a pause of the process would.
function freeze(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

test('a lock past its deadline is lost at the next check, before any timer runs', async () => {
  const name = uniqueName('lock');
  const lock = await client.lock(name, { ttlMs: 1000 });
  assert.equal(lock.lost, false);
  lock.check();
  assert.ok(lock.remainingMs <= 1000 - 20, 'the safety margin is taken off');
  freeze(1100);
  // No timer has had a chance to run: the answer comes from the clock, and the check aborts
  // the signal at once.
  assert.equal(lock.lost, true);
  assert.equal(lock.signal.aborted, true);
  assert.ok(lock.signal.reason instanceof LeaseExpiredError);
  assert.throws(() => lock.check(), LeaseExpiredError);
  assert.throws(() => lock.signal.throwIfAborted(), LeaseExpiredError);
  assert.equal(lock.remainingMs, 0);
  await other.release({ resource: name, leaseId: lock.leaseId }).catch(() => {});
});

test('check() and remainingMs past the deadline abort the signal at once', async () => {
  for (const check of ['check', 'remainingMs']) {
    const lock = await client.lock(uniqueName('lock'), { ttlMs: 1000 });
    freeze(1100);
    if (check === 'check') assert.throws(() => lock.check(), LeaseExpiredError);
    else assert.equal(lock.remainingMs, 0);
    assert.equal(lock.signal.aborted, true, check);
  }
});

test('without a check, the signal is aborted at the first turn of the event loop past the deadline', async () => {
  const lock = await client.lock(uniqueName('lock'), { ttlMs: 1000 });
  freeze(1100);
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(lock.signal.aborted, true);
  assert.ok(lock.signal.reason instanceof LeaseExpiredError);
  assert.equal(lock.lost, true);
});

test("runWhenLeader's signal follows the lock's: a check past the deadline aborts both", async () => {
  const name = uniqueName('lock');
  const seen = [];
  const stop = new AbortController();
  const run = client.runWhenLeader(
    name,
    async (signal, lock) => {
      seen.push(signal.aborted);
      freeze(1100);
      seen.push(lock.lost, signal.aborted, signal.reason instanceof LeaseExpiredError);
      stop.abort();
    },
    { ttlMs: 1000, retryMs: 100, signal: stop.signal },
  );
  await assert.rejects(run);
  assert.deepEqual(seen, [false, true, true, true]);
});

test('renewals to a silent server are cut short, and the loss names their error', async () => {
  const net = await import('node:net');
  const sockets = [];
  const silent = net.createServer((s) => sockets.push(s));
  await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const name = uniqueName('lock');
  const lease = await client.acquire(name, { ttlMs: 1500 });
  const quiet = new Client(`http://127.0.0.1:${silent.address().port}`, { timeoutMs: 10000 });
  let lost;
  const t0 = performance.now();
  const lock = new Lock(quiet, lease, { sentAt: t0, receivedAt: t0, onLost: (err) => (lost = err) });
  await eventually(() => lost !== undefined, { timeoutMs: 3000, message: "the loss" });
  assert.ok(lost instanceof LeaseExpiredError);
  assert.match(lost.message, /no answer within/);
  assert.equal(lock.lost, true);
  quiet.close();
  for (const s of sockets) s.destroy();
  silent.close();
  await client.release(lease).catch(() => {});
});
