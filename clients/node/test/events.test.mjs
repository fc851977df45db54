// Watching a prefix, the recent events and whoami, against real servers, and the answers'
// decoding (big integers included) against a stand-in server. The contract:
// docs/api.md, "Watching many resources, and recent events", and "The dashboard" (whoami).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { writeFileSync, rmSync } from 'node:fs';
import { Client, ForbiddenError, ProtocolError, UnauthorizedError } from '../index.js';
import { decodeJson, toEventPage } from '../src/model.js';
import { jsonStandIn, startServer, uniqueName, rejection, tempDir } from '../test-support/harness.mjs';

let server;
let client;
let other;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500'] });
  client = new Client(server.url);
  other = new Client(server.url);
});

after(async () => {
  client?.close();
  other?.close();
  const status = await server?.stop();
  assert.deepEqual(status, { code: 0, signal: null });
});

const later = (ms, fn) => setTimeout(() => fn().catch(() => {}), ms);

test('watchPrefix yields the list, then at a change under the prefix and not elsewhere', async () => {
  const p = uniqueName('wp');
  const first = await other.acquire(`${p}/a`, { owner: 'alice', ttlMs: 10_000 });
  const it = client.watchPrefix(`${p}/`, { waitMs: 5000 });
  const now = (await it.next()).value;
  assert.equal(typeof now.index, 'bigint');
  assert.deepEqual(
    now.resources.map((r) => r.resource),
    [`${p}/a`],
  );
  assert.equal(now.resources[0].holders[0].owner, 'alice');
  later(300, () => other.acquire(`${p}-elsewhere`));
  later(900, () => other.acquire(`${p}/b`, { owner: 'bob', limit: 2 }));
  const t0 = performance.now();
  const second = (await it.next()).value;
  assert.ok(performance.now() - t0 > 800, 'a change elsewhere yields nothing');
  assert.deepEqual(
    second.resources.map((r) => r.resource),
    [`${p}/a`, `${p}/b`],
  );
  assert.ok(second.index > now.index);
  assert.equal(second.resources[1].limit, 2);
  later(300, () => other.release(first));
  const third = (await it.next()).value;
  assert.deepEqual(
    third.resources.map((r) => r.resource),
    [`${p}/b`],
  );
  await it.return();
});

test('watchList waits for a change and returns the change index', async () => {
  const p = uniqueName('wl');
  const now = await client.watchList({ prefix: `${p}/`, waitMs: 0 });
  assert.deepEqual(now.resources, []);
  const t0 = performance.now();
  const same = await client.watchList({ prefix: `${p}/`, index: now.index, waitMs: 500 });
  assert.ok(performance.now() - t0 >= 400);
  assert.ok(same.index >= now.index);
  await assert.rejects(client.watchList({ index: -1n }), TypeError);
});

test('events come in order, with next and after, and never a lease id', async () => {
  const p = uniqueName('ev');
  const lease = await client.acquire(`${p}/a`, { owner: 'alice', ttlMs: 5000 });
  await client.renew(lease);
  await client.release(lease);
  await other.acquire(`${p}/b`, { owner: 'bob', shared: true });
  const evs = [];
  for await (const ev of client.events({ prefix: `${p}/` })) evs.push(ev);
  assert.deepEqual(
    evs.map((e) => [e.resource, e.type, e.owner]),
    [
      [`${p}/a`, 'granted', 'alice'],
      [`${p}/a`, 'renewed', 'alice'],
      [`${p}/a`, 'released', 'alice'],
      [`${p}/b`, 'granted', 'bob'],
    ],
  );
  for (let i = 1; i < evs.length; i++) assert.ok(evs[i].index > evs[i - 1].index);
  assert.equal(evs[0].fencingToken, lease.fencingToken);
  assert.equal(evs[3].shared, true);
  assert.match(evs[0].at, /Z$/);
  assert.ok(!JSON.stringify(evs, (k, v) => (typeof v === 'bigint' ? String(v) : v)).includes(lease.leaseId));
  const rest = [];
  for await (const ev of client.events({ prefix: `${p}/`, after: evs[0].index, limit: 1 })) rest.push(ev.index);
  assert.deepEqual(
    rest,
    evs.slice(1).map((e) => e.index),
  );
  const page = await client.eventsPage({ after: evs[1].index, prefix: `${p}/`, limit: 1 });
  assert.deepEqual(
    page.events.map((e) => e.index),
    [evs[2].index],
  );
  assert.equal(page.next, evs[2].index);
  assert.equal(page.truncated, false);
});

test('events with follow receive a later event', async () => {
  const p = uniqueName('fo');
  await client.acquire(`${p}/first`);
  later(500, () => other.acquire(`${p}-not-under-it`));
  later(800, () => other.acquire(`${p}/later`, { owner: 'later' }));
  const got = [];
  const t0 = performance.now();
  for await (const ev of client.events({ prefix: `${p}/`, follow: true, waitMs: 5000 })) {
    got.push(ev);
    if (got.length === 2) break;
  }
  assert.ok(performance.now() - t0 > 700);
  assert.deepEqual([got[1].resource, got[1].owner], [`${p}/later`, 'later']);
});

test('an aborted follow rejects with the reason', async () => {
  const ac = new AbortController();
  setTimeout(() => ac.abort(new Error('stop')), 300);
  const err = await rejection(
    (async () => {
      for await (const ev of client.events({ prefix: uniqueName('ab'), follow: true, signal: ac.signal })) void ev;
    })(),
  );
  assert.equal(err.message, 'stop');
});

test('truncated is surfaced: onTruncated, else a process warning', async () => {
  const small = await startServer({ args: ['--event-history', '2'] });
  const c = new Client(small.url);
  try {
    for (let i = 0; i < 5; i++) await c.acquire(`t/${i}`);
    const page = await c.eventsPage({ after: 1n });
    assert.equal(page.truncated, true);
    assert.deepEqual(
      page.events.map((e) => e.resource),
      ['t/3', 't/4'],
    );
    assert.equal((await c.eventsPage({ after: page.next })).truncated, false);
    const gaps = [];
    const evs = [];
    for await (const ev of c.events({ after: 1, onTruncated: (a) => gaps.push(a) })) evs.push(ev.resource);
    assert.deepEqual(gaps, [1n]);
    assert.deepEqual(evs, ['t/3', 't/4']);
    const warned = new Promise((resolve) => process.once('warning', resolve));
    for await (const ev of c.events({ after: 1 })) void ev;
    const w = await warned;
    assert.equal(w.name, 'MutexdEventsTruncated');
    // Without after: the oldest kept is where it starts, nothing to say.
    const none = [];
    for await (const ev of c.events({ onTruncated: (a) => none.push(a) })) void ev;
    assert.deepEqual(none, []);
  } finally {
    c.close();
    await small.stop();
  }
});

test('whoami with authorization off', async () => {
  assert.deepEqual(await client.whoami(), { name: null, scopes: ['read', 'write', 'admin', 'metrics'] });
});

test('whoami with a tokens file', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'tokens');
  const line = (tok, name, scopes, prefix = '') =>
    `${name} sha256:${createHash('sha256').update(tok).digest('hex')} ${scopes} ${prefix}`.trimEnd();
  writeFileSync(
    file,
    [line('reader-secret', 'dashboard', 'read', 'jobs/'), line('admin-secret', 'operator', 'read,write,admin')].join('\n') +
      '\n',
    { mode: 0o600 },
  );
  const s = await startServer({ args: ['--auth-tokens', file] });
  const reader = new Client(s.url, { token: 'reader-secret' });
  const admin = new Client(s.url, { token: 'admin-secret' });
  const nobody = new Client(s.url);
  try {
    assert.deepEqual(await reader.whoami(), { name: 'dashboard', scopes: ['read'] });
    assert.deepEqual(await admin.whoami(), { name: 'operator', scopes: ['read', 'write', 'admin'] });
    assert.ok((await rejection(nobody.whoami())) instanceof UnauthorizedError);
    assert.deepEqual((await reader.eventsPage({ prefix: 'jobs/' })).events, []);
    assert.ok((await rejection(reader.eventsPage({ prefix: 'other/' }))) instanceof ForbiddenError);
  } finally {
    reader.close();
    admin.close();
    nobody.close();
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---- decoding, against a stand-in server -----------------------------------------------

const BIG = 2n ** 63n + 5n;

// A stand-in that answers every request with `text`.
const standIn = (text) => jsonStandIn(() => [200, text]);

test('indexes, next and tokens beyond 2^53 stay exact', async () => {
  const text =
    `{"events":[{"index":${BIG},"at":"2026-01-15T09:30:00.000Z","resource":"jobs/a","type":"expired",` +
    `"owner":"w","fencing_token":${BIG + 1n},"shared":false,"limit":3}],"next":${BIG},"truncated":false}`;
  const page = toEventPage(decodeJson(text));
  assert.equal(page.events[0].index, BIG);
  assert.equal(page.events[0].fencingToken, BIG + 1n);
  assert.equal(page.next, BIG);
  // Small ones are bigint too.
  assert.equal(toEventPage(decodeJson('{"events":[],"next":7,"truncated":false}')).next, 7n);

  const stand = await standIn(text);
  const c = new Client(stand.url);
  try {
    const got = await c.eventsPage({ after: BIG - 1n, prefix: 'jobs/', limit: 10, waitMs: 2000 });
    assert.equal(got.events[0].index, BIG);
    const q = new URL(stand.seen[0].url, 'http://x').searchParams;
    assert.deepEqual(
      [q.get('after'), q.get('prefix'), q.get('limit'), q.get('wait_ms')],
      [String(BIG - 1n), 'jobs/', '10', '2000'],
    );
  } finally {
    c.close();
    await stand.close();
  }
});

test('a list watch sends index and wait_ms, and reads a big index exactly', async () => {
  const stand = await standIn(`{"index":${BIG},"resources":[],"next_cursor":null}`);
  const c = new Client(stand.url);
  try {
    const got = await c.watchList({ prefix: 'jobs/', index: BIG - 1n, waitMs: 1500 });
    assert.equal(got.index, BIG);
    const q = new URL(stand.seen[0].url, 'http://x').searchParams;
    assert.deepEqual([q.get('prefix'), q.get('index'), q.get('wait_ms')], ['jobs/', String(BIG - 1n), '1500']);
  } finally {
    c.close();
    await stand.close();
  }
});

test('answers without what the API promises are protocol errors', async () => {
  for (const [call, text] of [
    [(c) => c.watchList({ prefix: 'x' }), '{"resources":[],"next_cursor":null}'],
    [(c) => c.eventsPage(), '{"events":"x","next":1}'],
    [(c) => c.whoami(), '{"name":null}'],
  ]) {
    const stand = await standIn(text);
    const c = new Client(stand.url);
    try {
      assert.ok((await rejection(call(c))) instanceof ProtocolError, text);
    } finally {
      c.close();
      await stand.close();
    }
  }
});
