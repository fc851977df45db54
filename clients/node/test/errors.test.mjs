// Every error code of the API mapped to its class with its fields, and transport errors told
// apart from error answers. Against a real server, except the answers a real server does not give (none at all,
// a proxy's HTML page, a code this client does not know, a fencing token above 2^53): those
// come from a stand-in HTTP server on loopback.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { writeFileSync, rmSync } from 'node:fs';
import {
  Client,
  MutexdError,
  APIError,
  InvalidRequestError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  MethodNotAllowedError,
  LeaseHeldError,
  LeaseLostError,
  BodyTooLargeError,
  UnsupportedMediaTypeError,
  TooManyWaitersError,
  UnavailableError,
  ServerError,
  TransportError,
  TimeoutError,
  ProtocolError,
  isRetryable,
} from '../index.js';
import { startServer, uniqueName, rejection, sleep, tempDir } from '../test-support/harness.mjs';

let server;
let client;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500', '--max-waiters', '1', '--max-wait-ms', '60000'] });
  client = new Client(server.url);
});

after(async () => {
  client?.close();
  await server?.stop();
});

function check(err, Class, code, status) {
  assert.ok(err instanceof Class, `${err?.name}: ${err?.message} is not a ${Class.name}`);
  assert.ok(err instanceof APIError);
  assert.ok(err instanceof MutexdError);
  assert.ok(!(err instanceof TransportError));
  assert.equal(err.code, code);
  assert.equal(err.status, status);
  assert.equal(err.details.code, code);
  assert.equal(typeof err.message, 'string');
  assert.ok(err.message.length > 0);
  assert.equal(typeof err.requestId, 'string');
  return err;
}

test('400 invalid_json: no field', async () => {
  const err = await rejection(client.request('POST', '/v1/resources/x/acquire', { body: 'not json' }));
  check(err, InvalidRequestError, 'invalid_json', 400);
  assert.equal(err.field, undefined);
  const err2 = await rejection(client.request('POST', '/v1/resources/x/acquire', { body: [1, 2] }));
  check(err2, InvalidRequestError, 'invalid_json', 400);
});

test('400 invalid_field with field', async () => {
  const err = await rejection(client.acquire(uniqueName(), { owner: 42 }));
  assert.equal(check(err, InvalidRequestError, 'invalid_field', 400).field, 'owner');
  const err2 = await rejection(client.acquire(uniqueName(), { metadata: [1] }));
  assert.equal(check(err2, InvalidRequestError, 'invalid_field', 400).field, 'metadata');
  const err3 = await rejection(client.acquire(uniqueName(), { metadata: { big: 'x'.repeat(5000) } }));
  assert.equal(check(err3, InvalidRequestError, 'invalid_field', 400).field, 'metadata');
  const err4 = await rejection(client.watch(uniqueName(), 'abc'));
  assert.equal(check(err4, InvalidRequestError, 'invalid_field', 400).field, 'index');
  const err5 = await rejection(client.list({ limit: 0 }).next());
  assert.equal(check(err5, InvalidRequestError, 'invalid_field', 400).field, 'limit');
});

test('400 unknown_field names the field (a typo never falls back to a default)', async () => {
  const err = await rejection(client.request('POST', '/v1/resources/x/acquire', { body: { owner: 'a', ttl: 1000 } }));
  assert.equal(check(err, InvalidRequestError, 'unknown_field', 400).field, 'ttl');
  const err2 = await rejection(client.request('GET', '/v1/resources', { query: { prefx: 'a' } }));
  assert.equal(check(err2, InvalidRequestError, 'unknown_field', 400).field, 'prefx');
});

test('400 missing_field with field', async () => {
  const err = await rejection(client.request('POST', '/v1/resources/x/renew', { body: {} }));
  assert.equal(check(err, InvalidRequestError, 'missing_field', 400).field, 'lease_id');
  const err2 = await rejection(client.request('POST', '/v1/resources/x/acquire', { body: {} }));
  assert.equal(check(err2, InvalidRequestError, 'missing_field', 400).field, 'owner');
});

test('400 invalid_resource: no field', async () => {
  const err = await rejection(client.acquire('a//b'));
  check(err, InvalidRequestError, 'invalid_resource', 400);
  assert.equal(err.field, undefined);
});

test('400 invalid_ttl, invalid_wait, invalid_lease_id with field', async () => {
  const name = uniqueName();
  const e1 = await rejection(client.acquire(name, { ttlMs: 10 }));
  assert.equal(check(e1, InvalidRequestError, 'invalid_ttl', 400).field, 'ttl_ms');
  const e2 = await rejection(client.acquire(name, { ttlMs: 1000.5 }));
  assert.equal(check(e2, InvalidRequestError, 'invalid_ttl', 400).field, 'ttl_ms');
  const e3 = await rejection(client.acquire(name, { waitMs: -1 }));
  assert.equal(check(e3, InvalidRequestError, 'invalid_wait', 400).field, 'wait_ms');
  const e4 = await rejection(client.watch(name, 0, { waitMs: 99_999_999 }));
  assert.equal(check(e4, InvalidRequestError, 'invalid_wait', 400).field, 'wait_ms');
  const e5 = await rejection(client.acquire(name, { leaseId: 'not-a-uuid' }));
  assert.equal(check(e5, InvalidRequestError, 'invalid_lease_id', 400).field, 'lease_id');
  const e6 = await rejection(client.renew({ resource: name, leaseId: 'xyz' }));
  assert.equal(check(e6, InvalidRequestError, 'invalid_lease_id', 400).field, 'lease_id');
});

test('404 not_found: a wrong base URL, an unknown action', async () => {
  const wrong = new Client(`${server.url}/not/mutexd`);
  check(await rejection(wrong.acquire('x')), NotFoundError, 'not_found', 404);
  wrong.close();
  check(await rejection(client.request('POST', '/v1/resources/x/lock', { body: {} })), NotFoundError, 'not_found', 404);
});

test('405 method_not_allowed with the Allow header', async () => {
  const err = await rejection(client.request('DELETE', '/v1/resources/x'));
  check(err, MethodNotAllowedError, 'method_not_allowed', 405);
  assert.match(err.allow, /GET/);
  assert.match(err.allow, /POST/);
});

test('409 lease_held with holder and Retry-After', async () => {
  const name = uniqueName();
  const lease = await client.acquire(name, { owner: 'holder-1', ttlMs: 2500, metadata: { m: 1 } });
  const err = await rejection(client.acquire(name, { owner: 'holder-2' }));
  check(err, LeaseHeldError, 'lease_held', 409);
  assert.equal(err.holder.owner, 'holder-1');
  assert.equal(err.holder.fencingToken, lease.fencingToken);
  assert.ok(err.holder.expiresInMs > 0 && err.holder.expiresInMs <= 2500);
  assert.equal(err.retryAfter, Math.ceil(err.holder.expiresInMs / 1000));
  assert.equal(err.retryAfter, 3);
  assert.ok(!isRetryable(err));
  await client.release(lease);
});

test('409 lease_lost: renew and release of a lease that is no longer the resource', async () => {
  const name = uniqueName();
  const lease = await client.acquire(name);
  await client.breakLease(name);
  const other = await client.acquire(name, { owner: 'new' });
  check(await rejection(client.renew(lease)), LeaseLostError, 'lease_lost', 409);
  check(await rejection(client.release(lease)), LeaseLostError, 'lease_lost', 409);
  assert.equal((await client.get(name)).holder.owner, 'new', 'the current holder keeps its lease');
  await client.release(other);
  check(await rejection(client.release(other)), LeaseLostError, 'lease_lost', 409);
});

test('413 body_too_large', async () => {
  const err = await rejection(client.acquire(uniqueName(), { metadata: { big: 'x'.repeat(70_000) } }));
  check(err, BodyTooLargeError, 'body_too_large', 413);
});

test('415 unsupported_media_type', async () => {
  const err = await rejection(
    client.request('POST', '/v1/resources/x/acquire', { body: '{"owner":"a"}', headers: { 'content-type': 'text/plain' } }),
  );
  check(err, UnsupportedMediaTypeError, 'unsupported_media_type', 415);
});

test('429 too_many_waiters (server started with --max-waiters 1)', async () => {
  const name = uniqueName();
  const lease = await client.acquire(name);
  const ac = new AbortController();
  const waiting = client.acquire(name, { waitMs: 10_000, signal: ac.signal });
  await sleep(100);
  const err = await rejection(client.acquire(name, { waitMs: 10_000 }));
  check(err, TooManyWaitersError, 'too_many_waiters', 429);
  assert.ok(isRetryable(err));
  ac.abort();
  await rejection(waiting);
  await client.release(lease);
});

test('503 unavailable with reason and Retry-After: a waiting acquire when the server shuts down', async () => {
  const own = await startServer();
  const c = new Client(own.url);
  const name = uniqueName();
  await c.acquire(name);
  const waiting = c.acquire(name, { waitMs: 30_000 });
  await sleep(150);
  own.proc.kill('SIGTERM');
  const err = await rejection(waiting);
  check(err, UnavailableError, 'unavailable', 503);
  assert.equal(typeof err.reason, 'string');
  assert.ok(err.reason.length > 0);
  assert.equal(typeof err.retryAfter, 'number');
  assert.ok(isRetryable(err));
  assert.deepEqual(await own.stop(), { code: 0, signal: null });
  c.close();
});

// A stand-in server for what the real one does not answer.
async function standIn(handler) {
  const srv = http.createServer(handler);
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address();
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        srv.closeAllConnections?.();
        srv.close(resolve);
      }),
  };
}

function reply(res, status, body, headers = {}) {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-request-id': 'r-1', ...headers });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
}

test('401 unauthorized and 403 forbidden (a server started with --auth-tokens)', async () => {
  const dir = tempDir('mutexd-node-auth-');
  const sha = (t) => createHash('sha256').update(t).digest('hex');
  const file = path.join(dir, 'tokens');
  writeFileSync(
    file,
    [
      '# name hash scopes [prefix]',
      `admin sha256:${sha('admin-token')} read,write,admin`,
      `writer sha256:${sha('writer-token')} read,write`,
      `reader sha256:${sha('reader-token')} read`,
      `jobs sha256:${sha('jobs-token')} read,write jobs/`,
      '',
    ].join('\n'),
  );
  const own = await startServer({ args: ['--auth-tokens', file] });
  const as = (token) => new Client(own.url, token === undefined ? {} : { token });
  const none = as();
  const wrong = as('not-a-token');
  const reader = as('reader-token');
  const writer = as('writer-token');
  const admin = as('admin-token');
  const jobs = as('jobs-token');
  try {
    check(await rejection(none.acquire('jobs/a')), UnauthorizedError, 'unauthorized', 401);
    check(await rejection(wrong.get('jobs/a')), UnauthorizedError, 'unauthorized', 401);
    assert.deepEqual(await none.request('GET', '/healthz'), { status: 'ok' }, '/healthz is open');
    assert.equal((await reader.get('jobs/a')).state, 'free');
    check(await rejection(reader.acquire('jobs/a')), ForbiddenError, 'forbidden', 403);
    const lease = await writer.acquire('jobs/a');
    check(await rejection(writer.breakLease('jobs/a')), ForbiddenError, 'forbidden', 403);
    check(await rejection(jobs.acquire('other/a')), ForbiddenError, 'forbidden', 403);
    const mine = await jobs.acquire('jobs/b');
    await jobs.release(mine);
    assert.deepEqual(await admin.breakLease('jobs/a'), { resource: 'jobs/a', broken: true });
    assert.ok(!isRetryable(new UnauthorizedError(401, { code: 'unauthorized', message: '' })));
    assert.equal(lease.resource, 'jobs/a');
  } finally {
    for (const c of [none, wrong, reader, writer, admin, jobs]) c.close();
    await own.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an unknown error code keeps its code, mapped by status', async () => {
  const fake = await standIn((req, res) => reply(res, 400, { error: { code: 'invalid_flavour', message: 'no', field: 'flavour' } }));
  const c = new Client(fake.url);
  const err = await rejection(c.get('x'));
  check(err, InvalidRequestError, 'invalid_flavour', 400);
  assert.equal(err.field, 'flavour');
  c.close();
  await fake.close();
});

test('transport errors are MutexdError, not APIError: connection refused', async () => {
  const fake = await standIn(() => {});
  const url = fake.url;
  await fake.close();
  const c = new Client(url);
  const err = await rejection(c.get('x'));
  assert.ok(err instanceof TransportError);
  assert.ok(err instanceof MutexdError);
  assert.ok(!(err instanceof APIError));
  assert.equal(err.code, 'ECONNREFUSED');
  assert.ok(isRetryable(err));
  c.close();
});

test('transport errors: a timeout (beyond the wait asked for) is a TimeoutError', async () => {
  const fake = await standIn(() => {}); // never answers
  const c = new Client(fake.url, { timeoutMs: 200 });
  const t0 = Date.now();
  const err = await rejection(c.get('x'));
  assert.ok(err instanceof TimeoutError);
  assert.ok(err instanceof TransportError);
  assert.equal(err.code, 'ETIMEDOUT');
  assert.ok(Date.now() - t0 >= 190);
  const t1 = Date.now();
  const err2 = await rejection(c.watch('x', 1, { waitMs: 300 }));
  assert.ok(err2 instanceof TimeoutError);
  assert.ok(Date.now() - t1 >= 490, 'the timeout counts from the end of the wait');
  const err3 = await rejection(c.get('x', { timeoutMs: 50 }));
  assert.ok(err3 instanceof TimeoutError);
  c.close();
  await fake.close();
});

test('an error answer that is not the API (a proxy page) gets the class of its status', async () => {
  const pages = [
    [502, ServerError],
    [503, UnavailableError],
    [404, NotFoundError],
  ];
  let next = 0;
  const fake = await standIn((req, res) => {
    res.writeHead(pages[next++][0], { 'content-type': 'text/html' });
    res.end('<html>Bad Gateway</html>');
  });
  const c = new Client(fake.url);
  for (const [status, Class] of pages) {
    const err = await rejection(c.get('x'));
    assert.equal(Object.getPrototypeOf(err), Class.prototype, String(err));
    assert.equal(err.status, status);
    assert.equal(err.code, 'unknown');
    assert.deepEqual(err.details, {});
    assert.match(err.message, /Bad Gateway/);
  }
  c.close();
  await fake.close();
});

test('transport errors: a 2xx that is not the API\'s JSON is a ProtocolError', async () => {
  const bodies = ['[1]', 'not json'];
  let next = 0;
  const fake = await standIn((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(bodies[next++]);
  });
  const c = new Client(fake.url);
  try {
    for (let i = 0; i < bodies.length; i++) {
      const err = await rejection(c.get('x'));
      assert.ok(err instanceof ProtocolError, String(err));
      assert.ok(err instanceof TransportError);
      assert.equal(err.status, 200);
      assert.equal(err.code, 'ERR_INVALID_RESPONSE');
      assert.ok(isRetryable(err));
    }
  } finally {
    c.close();
    await fake.close();
  }
});

test('fencing tokens above 2^53 are exact (stand-in server)', async () => {
  const max = '18446744073709551615';
  const fake = await standIn((req, res) => {
    if (req.method === 'GET') {
      reply(
        res,
        200,
        `{"resource":"x","state":"held","index":9007199254740993,"holder":{"owner":"o","fencing_token":${max},` +
          `"ttl_ms":1000,"expires_in_ms":900,"acquired_at":"2026-01-15T09:30:00.000Z","renewed_at":null,` +
          `"metadata":{"fencing_token":18446744073709551615,"s":"\\"fencing_token\\":1"}},"waiters":0}`,
      );
    } else {
      reply(res, 409, `{"error":{"code":"lease_held","message":"held","holder":{"owner":"o","fencing_token":${max},"expires_in_ms":5}}}`, {
        'retry-after': '1',
      });
    }
  });
  const c = new Client(fake.url);
  const state = await c.get('x');
  assert.equal(state.holder.fencingToken, 18446744073709551615n);
  assert.equal(state.holder.renewedAt, null);
  // Metadata is the caller's own JSON, parsed as JSON.parse does.
  assert.equal(typeof state.holder.metadata.fencing_token, 'number');
  assert.equal(state.holder.metadata.s, '"fencing_token":1');
  const err = await rejection(c.acquire('x'));
  assert.equal(err.holder.fencingToken, 18446744073709551615n);
  assert.equal(err.retryAfter, 1);
  c.close();
  await fake.close();
});
