// Semaphores and shared leases without a server that has them: what the client sends (to a
// stand-in HTTP server on loopback), and how it reads the answers (limit, shared, holders,
// limit_mismatch), also those of a server without them.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, ConflictError, LeaseHeldError, LimitMismatchError, isRetryable } from '../index.js';
import { decodeJson, toLease, toState } from '../src/model.js';
import { apiError } from '../src/errors.js';
import { jsonStandIn as standIn, rejection } from '../test-support/harness.mjs';

const LEASE =
  '{"resource":"r","lease_id":"3f2c8a4e-9b1d-4c6e-8f7a-2d5b1e0c9a47","owner":"o","fencing_token":42,' +
  '"ttl_ms":15000,"expires_in_ms":15000,"acquired_at":"2026-01-15T09:30:00.000Z","renewed_at":null,"metadata":null';

test('limit and shared are sent only when given; lock passes them on', async () => {
  const fake = await standIn((req) =>
    req.url.endsWith('/acquire') ? [200, `${LEASE},"limit":3,"shared":false}`] : [200, '{"resource":"r","released":true}'],
  );
  const c = new Client(fake.url);
  await c.acquire('r');
  await c.acquire('r', { limit: 3 });
  await c.acquire('r', { shared: true, limit: 1 });
  const lock = await c.lock('r', { limit: 3, waitMs: 100 });
  assert.equal(lock.limit, 3);
  assert.equal(lock.shared, false);
  await lock.release();
  const bodies = fake.seen.map((r) => r.body);
  // Without them the request is the one a server without semaphores takes.
  assert.ok(!('limit' in bodies[0]) && !('shared' in bodies[0]));
  assert.equal(bodies[1].limit, 3);
  assert.ok(!('shared' in bodies[1]));
  assert.deepEqual([bodies[2].shared, bodies[2].limit], [true, 1]);
  assert.equal(bodies[3].limit, 3);
  assert.equal(fake.seen[4].url, '/v1/resources/r/release');
  c.close();
  await fake.close();
});

test('limit and shared of the wrong type are refused before sending', async () => {
  const fake = await standIn(() => [200, `${LEASE}}`]);
  const c = new Client(fake.url);
  for (const options of [{ limit: '3' }, { limit: 2.5 }, { limit: true }, { shared: 'yes' }, { shared: 1 }]) {
    assert.ok((await rejection(c.acquire('r', options))) instanceof TypeError, JSON.stringify(options));
  }
  assert.equal(fake.seen.length, 0);
  c.close();
  await fake.close();
});

test('breakLease sends lease_id only when given', async () => {
  const fake = await standIn(() => [200, '{"resource":"r","broken":true}']);
  const c = new Client(fake.url);
  const leaseId = '3f2c8a4e-9b1d-4c6e-8f7a-2d5b1e0c9a47';
  assert.deepEqual(await c.breakLease('r', { leaseId, reason: 'stuck' }), { resource: 'r', broken: true });
  await c.breakLease('r');
  assert.deepEqual(fake.seen[0].body, { reason: 'stuck', lease_id: leaseId });
  assert.deepEqual(fake.seen[1].body, {});
  c.close();
  await fake.close();
});

test('a lease reads limit and shared; a server without them means 1 and false', () => {
  const reader = toLease(decodeJson(`${LEASE},"limit":1,"shared":true}`));
  assert.deepEqual([reader.limit, reader.shared], [1, true]);
  const slot = toLease(decodeJson(`${LEASE},"limit":4,"shared":false}`));
  assert.deepEqual([slot.limit, slot.shared], [4, false]);
  const old = toLease(decodeJson(`${LEASE}}`));
  assert.deepEqual([old.limit, old.shared], [1, false]);
});

const HOLDER = (owner, token, shared) =>
  `{"owner":"${owner}","fencing_token":${token},"shared":${shared},"ttl_ms":5000,"expires_in_ms":4000,` +
  `"acquired_at":"2026-01-15T09:30:00.000Z","renewed_at":null,"metadata":{"n":1}}`;

test('a state reads limit and every holder, oldest first; tokens beyond 2^53 stay exact', () => {
  const max = '18446744073709551615';
  const text =
    `{"resource":"r","state":"held","index":9,"limit":3,"holder":${HOLDER('o1', 7, true)},` +
    `"holders":[${HOLDER('o1', 7, true)},${HOLDER('o2', max, false)}],"waiters":1}`;
  const state = toState(decodeJson(text));
  assert.equal(state.limit, 3);
  assert.deepEqual(
    state.holders.map((h) => [h.owner, h.fencingToken, h.shared]),
    [
      ['o1', 7n, true],
      ['o2', 18446744073709551615n, false],
    ],
  );
  assert.deepEqual(state.holder, state.holders[0]);
  assert.deepEqual(state.holders[1].metadata, { n: 1 });
  // In a list entry too.
  const page = decodeJson(`{"resources":[${text}],"next_cursor":null}`);
  assert.equal(toState(page.resources[0]).holders[1].fencingToken, 18446744073709551615n);
});

test('a state from a server without semaphores: limit 1, its one holder', () => {
  const old = `{"owner":"o","fencing_token":3,"ttl_ms":1000,"expires_in_ms":900,"acquired_at":"t","renewed_at":null,"metadata":null}`;
  const held = toState(decodeJson(`{"resource":"r","state":"held","index":3,"holder":${old},"waiters":0}`));
  assert.equal(held.limit, 1);
  assert.deepEqual(held.holders, [held.holder]);
  assert.equal(held.holder.shared, false);
  const free = toState(decodeJson('{"resource":"r","state":"free","index":4,"holder":null,"waiters":0}'));
  assert.deepEqual([free.limit, free.holders, free.holder], [1, [], null]);
});

test('409 limit_mismatch is a LimitMismatchError with the limit in force', async () => {
  const fake = await standIn(() => [409, '{"error":{"code":"limit_mismatch","message":"held under 3","limit":3}}']);
  const c = new Client(fake.url);
  const err = await rejection(c.acquire('r', { limit: 2 }));
  assert.ok(err instanceof LimitMismatchError && err instanceof ConflictError && !(err instanceof LeaseHeldError));
  assert.deepEqual([err.status, err.code, err.limit, err.name], [409, 'limit_mismatch', 3, 'LimitMismatchError']);
  assert.ok(!isRetryable(err));
  // Without the field, the limit is unknown.
  assert.equal(apiError(409, { code: 'limit_mismatch', message: 'm' }, {}).limit, undefined);
  c.close();
  await fake.close();
});
