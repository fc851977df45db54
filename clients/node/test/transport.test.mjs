// The transport, against a stand-in HTTP server on loopback: connection reuse, the retry of a
// request written on a connection the server had just closed, the request's form.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Client, TransportError, VERSION } from '../index.js';
import { rejection } from '../test-support/harness.mjs';

async function standIn(handler) {
  const srv = http.createServer(handler);
  const connections = [];
  srv.on('connection', (s) => connections.push(s));
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    connections,
    close: () =>
      new Promise((resolve) => {
        srv.closeAllConnections?.();
        srv.close(resolve);
      }),
  };
}

const state = '{"resource":"x","state":"free","index":0,"holder":null,"waiters":0}';

test('requests reuse one kept-alive connection', async () => {
  const fake = await standIn((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(state);
  });
  const c = new Client(fake.url);
  for (let i = 0; i < 5; i++) await c.get('x');
  assert.equal(fake.connections.length, 1);
  c.close();
  await fake.close();
});

test('a request on a kept-alive connection that the server closes unanswered is sent once more', async () => {
  let n = 0;
  const fake = await standIn((req, res) => {
    n += 1;
    if (n === 2) {
      req.socket.destroy(); // as a server closing an idle connection just as the request arrives
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(state);
  });
  const c = new Client(fake.url);
  await c.get('x');
  assert.equal((await c.get('x')).resource, 'x');
  assert.equal(n, 3);
  assert.equal(fake.connections.length, 2);
  c.close();
  await fake.close();
});

test('a fresh connection closed unanswered is a transport error (no retry)', async () => {
  let n = 0;
  const fake = await standIn((req) => {
    n += 1;
    req.socket.destroy();
  });
  const c = new Client(fake.url);
  const err = await rejection(c.get('x'));
  assert.ok(err instanceof TransportError);
  assert.equal(err.code, 'ECONNRESET');
  assert.equal(n, 1);
  c.close();
  await fake.close();
});

test('the form of requests: JSON body, headers, literal slashes, query', async () => {
  const seen = [];
  const fake = await standIn((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method, url: req.url, headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
      if (req.url.includes('/acquire')) {
        res.end(
          '{"resource":"jobs/a","lease_id":"3f2c8a4e-9b1d-4c6e-8f7a-2d5b1e0c9a47","owner":"o","fencing_token":42,' +
            '"ttl_ms":15000,"expires_in_ms":15000,"acquired_at":"2026-01-15T09:30:00.000Z","renewed_at":null,"metadata":null}',
        );
      } else {
        res.end('{"resources":[],"next_cursor":null}');
      }
    });
  });
  const c = new Client(`${fake.url}/prefix/`, { token: 't0k' });
  const lease = await c.acquire('jobs/a', { owner: 'o', ttlMs: 15000, metadata: { k: 'v' } });
  assert.equal(lease.fencingToken, 42n);
  assert.equal(lease.renewedAt, null);
  for await (const page of c.list({ prefix: 'jobs/', limit: 10 })) assert.deepEqual(page, { resources: [], nextCursor: null });
  const [post, get] = seen;
  assert.equal(post.method, 'POST');
  assert.equal(post.url, '/prefix/v1/resources/jobs/a/acquire');
  assert.equal(post.headers['content-type'], 'application/json');
  assert.equal(post.headers.authorization, 'Bearer t0k');
  assert.equal(post.headers['user-agent'], `mutexd-node/${VERSION}`);
  const body = JSON.parse(post.body);
  assert.deepEqual(Object.keys(body).sort(), ['lease_id', 'metadata', 'owner', 'ttl_ms']);
  assert.match(body.lease_id, /^[0-9a-f-]{36}$/);
  assert.equal(get.method, 'GET');
  assert.equal(get.url, '/prefix/v1/resources?prefix=jobs%2F&limit=10');
  c.close();
  await fake.close();
});

test('an acquire cancelled in flight releases its own lease id, in case it was granted meanwhile', async () => {
  const seen = [];
  const fake = await standIn((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ action: req.url.split('/').at(-1), leaseId: JSON.parse(body).lease_id });
      if (req.url.endsWith('/release')) {
        res.writeHead(409, { 'content-type': 'application/json' });
        res.end('{"error":{"code":"lease_lost","message":"no"}}');
      } // an acquire is never answered
    });
  });
  const c = new Client(fake.url);
  const ac = new AbortController();
  const pending = c.acquire('x', { waitMs: 10_000, signal: ac.signal });
  await new Promise((r) => setTimeout(r, 100));
  ac.abort();
  await rejection(pending);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(seen.length, 2);
  assert.deepEqual(seen.map((s) => s.action), ['acquire', 'release']);
  assert.equal(seen[1].leaseId, seen[0].leaseId);
  // With the caller's own lease id (maybe a lease it holds), nothing is released.
  const ac2 = new AbortController();
  const own = c.acquire('x', { leaseId: '3f2c8a4e-9b1d-4c6e-8f7a-2d5b1e0c9a47', waitMs: 10_000, signal: ac2.signal });
  await new Promise((r) => setTimeout(r, 100));
  ac2.abort();
  await rejection(own);
  // Aborted before it was sent: no request at all.
  await rejection(c.acquire('x', { signal: AbortSignal.abort() }));
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(seen.map((s) => s.action), ['acquire', 'release', 'acquire']);
  c.close();
  await fake.close();
});
