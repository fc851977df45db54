// Several server URLs: a dead one is passed over and the live one kept, a 503 moves the client
// on (after its Retry-After before going round again), an acquire whose answer was lost gets
// its own lease back from the next server, and no renewal attempt outlives the lease's
// deadline. Real servers, with small stand-ins on loopback for what a real one does not do
// (answer 503 at will, lose an answer, never answer).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { randomUUID } from 'node:crypto';
import { Client, LeaseHeldError, LeaseExpiredError, TimeoutError, TransportError, UnavailableError } from '../index.js';
import { startServer, uniqueName, rejection, sleep } from '../test-support/harness.mjs';

let server;

before(async () => {
  server = await startServer({ args: ['--min-ttl-ms', '500'] });
});

after(async () => {
  await server?.stop();
});

async function listen(srv) {
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${srv.address().port}`;
}

/** A loopback URL where nothing listens. */
async function deadUrl() {
  const srv = net.createServer();
  const url = await listen(srv);
  await new Promise((resolve) => srv.close(resolve));
  return url;
}

/** An HTTP server answering each request with `answer(req, res, body)`; counts them. */
async function standIn(answer) {
  const s = { hits: 0 };
  s.srv = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      s.hits += 1;
      answer(req, res, Buffer.concat(chunks));
    });
  });
  s.url = await listen(s.srv);
  s.close = () =>
    new Promise((resolve) => {
      s.srv.closeAllConnections?.();
      s.srv.close(resolve);
    });
  return s;
}

function unavailable(req, res) {
  res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
  res.end(JSON.stringify({ error: { code: 'unavailable', message: 'no active server', reason: 'no_active_server' } }));
}

/** Accepts connections and never answers; records when each was accepted and closed. */
async function silent() {
  const s = { accepted: [], closed: [], sockets: new Set() };
  s.srv = net.createServer((sock) => {
    s.accepted.push(performance.now());
    s.sockets.add(sock);
    sock.on('error', () => {});
    sock.on('close', () => {
      s.closed.push(performance.now());
      s.sockets.delete(sock);
    });
    sock.resume();
  });
  s.url = await listen(s.srv);
  s.close = () =>
    new Promise((resolve) => {
      for (const sock of s.sockets) sock.destroy();
      s.srv.close(resolve);
    });
  return s;
}

test('URLs as an array, a comma-separated string, and MUTEXD_URL', async () => {
  const dead = await deadUrl();
  for (const c of [new Client([dead, server.url]), new Client(`${dead}, ${server.url}`)]) {
    assert.deepEqual(c.urls, [dead, server.url]);
    assert.equal(c.url, dead);
    assert.equal((await c.get('tests/urls')).state, 'free');
    assert.equal(c.url, server.url);
    c.close();
  }
  const saved = process.env.MUTEXD_URL;
  try {
    process.env.MUTEXD_URL = `${dead},${server.url}`;
    const c = new Client();
    assert.deepEqual(c.urls, [dead, server.url]);
    assert.equal((await c.get('tests/urls')).state, 'free');
    c.close();
    delete process.env.MUTEXD_URL;
    assert.deepEqual(new Client().urls, ['http://127.0.0.1:8080']);
    assert.throws(() => new Client(' , '), TypeError);
  } finally {
    if (saved === undefined) delete process.env.MUTEXD_URL;
    else process.env.MUTEXD_URL = saved;
  }
});

test('a dead server and a 503 are passed over, and the live one kept', async () => {
  const first = await standIn(unavailable);
  const c = new Client([first.url, await deadUrl(), server.url], { timeoutMs: 5000 });
  try {
    const name = uniqueName();
    const lease = await c.acquire(name, { ttlMs: 5000 });
    assert.equal(c.url, server.url);
    assert.equal(first.hits, 1);
    for (let i = 0; i < 3; i++) await c.renew(lease);
    assert.equal((await c.get(name)).holder.fencingToken, lease.fencingToken);
    await c.release(lease);
    assert.equal(first.hits, 1, 'the server that answered is asked first');
  } finally {
    c.close();
    await first.close();
  }
});

test('an error answer is not passed over', async () => {
  const other = await standIn(unavailable);
  const c = new Client([server.url, other.url]);
  const o = new Client(server.url);
  try {
    const name = uniqueName();
    const held = await o.acquire(name);
    assert.ok((await rejection(c.acquire(name))) instanceof LeaseHeldError);
    assert.equal(other.hits, 0);
    await o.release(held);
  } finally {
    c.close();
    o.close();
    await other.close();
  }
});

function notFoundNaming(servedBy) {
  return (req, res) => {
    const headers = { 'content-type': 'application/json' };
    if (servedBy) headers['mutexd-served-by'] = servedBy;
    res.writeHead(404, headers);
    res.end(JSON.stringify({ error: { code: 'not_found', message: 'no such lease' } }));
  };
}

test('the active named by a standby is asked first; a URL not given never is', async () => {
  const active = await standIn(notFoundNaming());
  // Another spelling of the active's URL: scheme and host in capitals, a trailing slash.
  const standby = await standIn(notFoundNaming(`${active.url.toUpperCase()}/`));
  const stranger = await standIn(notFoundNaming('http://127.0.0.1:1'));
  const lease = { resource: 'a', leaseId: randomUUID() };
  try {
    let c = new Client([standby.url, active.url]);
    for (let i = 0; i < 3; i++) await assert.rejects(c.release(lease), { code: 'not_found' });
    assert.deepEqual([standby.hits, active.hits], [1, 2]);
    assert.equal(c.url, active.url);
    c = new Client([stranger.url, active.url]);
    for (let i = 0; i < 3; i++) await assert.rejects(c.release(lease), { code: 'not_found' });
    assert.equal(stranger.hits, 3);
  } finally {
    await Promise.all([active.close(), standby.close(), stranger.close()]);
  }
});

test('when every server fails, the last error; 503 rounds after their Retry-After', async () => {
  const a = await deadUrl();
  const b = await deadUrl();
  const c = new Client([a, b]);
  const err = await rejection(c.get('x'));
  assert.ok(err instanceof TransportError);
  assert.ok(err.url.startsWith(b));
  assert.equal(c.url, a);
  c.close();

  const stands = [await standIn(unavailable), await standIn(unavailable)];
  const d = new Client(stands.map((s) => s.url), { timeoutMs: 1500 });
  try {
    const t0 = performance.now();
    const e = await rejection(d.get('x'));
    const took = performance.now() - t0;
    assert.ok(e instanceof UnavailableError);
    assert.equal(e.reason, 'no_active_server');
    // Two rounds, 1 s apart (Retry-After: 1); a third would end past the timeout.
    assert.deepEqual(
      stands.map((s) => s.hits),
      [2, 2],
    );
    assert.ok(took >= 1000 && took < 1500, `${took} ms`);
  } finally {
    d.close();
    for (const s of stands) await s.close();
  }
});

test('an acquire whose answer was lost gets its own lease from the next server', async () => {
  const granted = [];
  const target = new URL(server.url);
  const lossy = await standIn((req, res, body) => {
    // The request reaches the real server, which grants it; the answer never comes back.
    const fwd = http.request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { 'content-type': 'application/json' } },
      (answer) => {
        const chunks = [];
        answer.on('data', (ch) => chunks.push(ch));
        answer.on('end', () => {
          granted.push(JSON.parse(Buffer.concat(chunks).toString()));
          req.socket.destroy();
        });
      },
    );
    fwd.end(body);
  });
  const c = new Client([lossy.url, server.url], { timeoutMs: 5000 });
  try {
    const name = uniqueName();
    const lease = await c.acquire(name, { ttlMs: 5000 });
    assert.equal(lossy.hits, 1);
    assert.equal(granted.length, 1);
    assert.equal(granted[0].lease_id, lease.leaseId);
    assert.equal(BigInt(granted[0].fencing_token), lease.fencingToken);
    assert.equal(c.url, server.url);
    const err = await rejection(c.acquire(name));
    assert.ok(err instanceof LeaseHeldError);
    assert.equal(err.holder.fencingToken, lease.fencingToken);
    await c.release(lease);
  } finally {
    c.close();
    await lossy.close();
  }
});

test('the same proposed lease id twice is the same lease', async () => {
  const c = new Client(server.url);
  const name = uniqueName();
  const leaseId = randomUUID();
  const first = await c.acquire(name, { ttlMs: 5000, leaseId });
  const again = await c.acquire(name, { ttlMs: 5000, leaseId });
  assert.equal(again.leaseId, leaseId);
  assert.equal(again.fencingToken, first.fencingToken);
  await c.release(again);
  c.close();
});

test('no renewal attempt outlives the deadline it is given', async () => {
  const silents = [await silent(), await silent()];
  const c = new Client(silents.map((s) => s.url), { timeoutMs: 10_000 });
  try {
    const deadline = performance.now() + 600;
    const err = await rejection(c.renew({ resource: 'r', leaseId: randomUUID() }, { deadline }));
    assert.ok(err instanceof TimeoutError, String(err));
    assert.ok(performance.now() < deadline + 300);
    await sleep(200);
    const accepted = silents.flatMap((s) => s.accepted);
    const closed = silents.flatMap((s) => s.closed);
    // The silent servers run on this event loop: an accept is seen a little after the
    // client's connect began, so the same slack as for the ends below.
    assert.ok(accepted.length > 0, 'no attempt reached a server');
    assert.ok(accepted.every((t) => t < deadline + 150), 'an attempt began after the deadline');
    assert.equal(closed.length, accepted.length);
    assert.ok(closed.every((t) => t < deadline + 150), 'every attempt ended by the deadline');
  } finally {
    c.close();
    for (const s of silents) await s.close();
  }
});

test('a lock whose servers go silent is lost at its deadline, and no attempt outlives it', async () => {
  const own = await startServer({ args: ['--min-ttl-ms', '500'] });
  // Each attempt may take a third of the TTL: after the stopped server, the attempts on the
  // silent ones would run past the deadline if the renewal were not bounded by it.
  const silents = [await silent(), await silent(), await silent()];
  const c = new Client([own.url, ...silents.map((s) => s.url)], { timeoutMs: 10_000 });
  try {
    const lock = await c.lock(uniqueName(), { ttlMs: 1500 });
    const deadline = performance.now() + lock.remainingMs;
    const lost = new Promise((resolve) => lock.signal.addEventListener('abort', () => resolve(performance.now())));
    own.proc.kill('SIGSTOP');
    const at = await lost;
    assert.ok(lock.signal.reason instanceof LeaseExpiredError);
    assert.ok(at < deadline + 300);
    await sleep(200);
    const accepted = silents.flatMap((s) => s.accepted);
    const closed = silents.flatMap((s) => s.closed);
    assert.ok(accepted.length > 0, 'renewals went on to the other servers');
    assert.ok(accepted.every((t) => t < deadline), 'no attempt started after the deadline');
    assert.equal(closed.length, accepted.length);
    assert.ok(closed.every((t) => t < deadline + 100), 'every attempt ended by the deadline');
  } finally {
    own.proc.kill('SIGCONT');
    c.close();
    for (const s of silents) await s.close();
    await own.stop();
  }
});
