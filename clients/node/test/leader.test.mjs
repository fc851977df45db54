// runWhenLeader(), and the leader-election example program.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { hostname } from 'node:os';
import { Client, LeaseHeldError, LeaseLostError, InvalidRequestError } from '../index.js';
import { startServer, uniqueName, rejection, sleep, eventually, repoRoot } from '../test-support/harness.mjs';

const TTL = 1500;
let server;
let client;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500'] });
  client = new Client(server.url);
});

after(async () => {
  client?.close();
  await server?.stop();
});

test('runWhenLeader hands over between two callers', async () => {
  const name = uniqueName('leader');
  const leading = new Set();
  const history = [];
  const retries = { X: 0, Y: 0 };
  const runner = (id) => {
    const stop = new AbortController();
    const c = new Client(server.url, { owner: id });
    const done = c
      .runWhenLeader(
        name,
        async (signal, lock) => {
          assert.equal(leading.size, 0, `${id} leads while ${[...leading]} does`);
          leading.add(id);
          history.push({ id, token: lock.fencingToken });
          await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
          leading.delete(id);
          return 'unreachable';
        },
        {
          ttlMs: TTL,
          retryMs: 200,
          signal: stop.signal,
          onRetry: (err) => {
            assert.ok(err instanceof LeaseHeldError, String(err));
            retries[id] += 1;
          },
        },
      )
      .finally(() => c.close());
    return { stop, done };
  };
  const x = runner('X');
  await eventually(() => leading.has('X'), { message: 'X leads' });
  const y = runner('Y');
  await eventually(() => retries.Y >= 2, { message: 'Y retries' });
  assert.equal((await client.get(name)).holder.owner, 'X');
  await sleep(TTL); // X keeps leading across renewals
  assert.deepEqual([...leading], ['X']);
  const reason = new Error('X stops');
  x.stop.abort(reason);
  assert.equal(await rejection(x.done), reason);
  await eventually(() => leading.has('Y'), { timeoutMs: 2000, message: 'Y takes over' });
  assert.equal((await client.get(name)).holder.owner, 'Y');
  assert.deepEqual(
    history.map((h) => h.id),
    ['X', 'Y'],
  );
  assert.ok(history[1].token > history[0].token);
  y.stop.abort();
  assert.equal((await rejection(y.done)).name, 'AbortError');
  assert.equal((await client.get(name)).state, 'free', 'released on stop');
  assert.equal(retries.X, 0);
});

test('after a loss, the task is aborted and the runner leads again', async () => {
  const name = uniqueName('leader');
  const runs = [];
  const lost = [];
  const stop = new AbortController();
  const done = client.runWhenLeader(
    name,
    async (signal, lock) => {
      runs.push(lock.fencingToken);
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      return signal.reason;
    },
    { ttlMs: TTL, retryMs: 100, signal: stop.signal, onLost: (err) => lost.push(err) },
  );
  await eventually(() => runs.length === 1, { message: 'first run' });
  await client.breakLease(name);
  await eventually(() => runs.length === 2, { timeoutMs: 3000, message: 'second run' });
  assert.equal(lost.length, 1);
  assert.ok(lost[0] instanceof LeaseLostError);
  assert.ok(runs[1] > runs[0]);
  stop.abort();
  await rejection(done);
  assert.equal((await client.get(name)).state, 'free');
});

test('a task that returns ends the runner with its result, and one that throws with its error; both release', async () => {
  const name = uniqueName('leader');
  const value = await client.runWhenLeader(name, async (signal, lock) => {
    assert.equal(signal.aborted, false);
    return `token ${lock.fencingToken}`;
  });
  assert.match(value, /^token \d+$/);
  assert.equal((await client.get(name)).state, 'free');
  const boom = new Error('boom');
  assert.equal(
    await rejection(
      client.runWhenLeader(name, () => {
        throw boom;
      }),
    ),
    boom,
  );
  assert.equal((await client.get(name)).state, 'free');
});

test('runWhenLeader: an error that retrying cannot fix is thrown; a stop while waiting ends it at once', async () => {
  const name = uniqueName('leader');
  const err = await rejection(client.runWhenLeader(name, () => {}, { ttlMs: 10 }));
  assert.ok(err instanceof InvalidRequestError);
  assert.equal(err.code, 'invalid_ttl');
  const holder = await client.acquire(name);
  const stop = new AbortController();
  const done = client.runWhenLeader(name, () => assert.fail('never leads'), { retryMs: 60_000, signal: stop.signal });
  await sleep(100);
  const t0 = Date.now();
  stop.abort();
  assert.equal((await rejection(done)).name, 'AbortError');
  assert.ok(Date.now() - t0 < 500);
  await client.release(holder);
  await assert.rejects(client.runWhenLeader(name, 'not a function'), TypeError);
});

// The example program.

const example = path.join(repoRoot, 'clients', 'examples', 'node', 'leader.mjs');
const HOST = hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const LEADS = new RegExp(
  `^\\[\\d\\d:\\d\\d:\\d\\d\\] This process \\((\\d+)\\) is currently the leader\\. Host ${HOST}, fencing token (\\d+)\\.$`,
);
const WAITS = new RegExp(
  `^\\[\\d\\d:\\d\\d:\\d\\d\\] This process \\((\\d+)\\) could not acquire lease\\. Retrying in 1 seconds\\. Host ${HOST}\\.$`,
);

function startExample(resource) {
  const child = spawn(process.execPath, [example], {
    env: { ...process.env, MUTEXD_URL: server.url, MUTEXD_RESOURCE: resource, MUTEXD_TTL_MS: '1500', MUTEXD_RETRY_S: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines = [];
  let buf = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  });
  let stderr = '';
  child.stderr.on('data', (c) => (stderr += c));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, lines, exited, stderr: () => stderr };
}

test('the leader-election example: one leads, the other retries, SIGTERM releases and hands over', async () => {
  const name = uniqueName('leader-election');
  const a = startExample(name);
  await eventually(() => a.lines.some((l) => LEADS.test(l)), { message: 'a leads' });
  const b = startExample(name);
  try {
    await eventually(() => b.lines.some((l) => WAITS.test(l)), { message: 'b waits' });
    await eventually(() => a.lines.filter((l) => LEADS.test(l)).length >= 3, { message: 'a beats' });
    assert.equal(LEADS.exec(a.lines[0])[1], String(a.child.pid));
    assert.equal(WAITS.exec(b.lines[0])[1], String(b.child.pid));
    assert.ok(!b.lines.some((l) => LEADS.test(l)), 'b never leads while a does');
    a.child.kill('SIGTERM');
    assert.deepEqual(await a.exited, { code: 0, signal: null }, a.stderr());
    await eventually(() => b.lines.some((l) => LEADS.test(l)), { timeoutMs: 3000, message: 'b takes over' });
    assert.equal((await client.get(name)).holder.owner.split(':').at(-1), String(b.child.pid));
    for (const l of [...a.lines, ...b.lines]) assert.ok(LEADS.test(l) || WAITS.test(l), l);
  } finally {
    b.child.kill('SIGTERM');
    assert.deepEqual(await b.exited, { code: 0, signal: null }, b.stderr());
    a.child.kill('SIGKILL');
  }
  assert.equal((await client.get(name)).state, 'free');
});
