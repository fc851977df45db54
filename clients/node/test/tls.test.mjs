// HTTPS to a server whose certificate is signed by a private CA (made here with openssl).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { Client, TransportError, APIError, LeaseHeldError } from '../index.js';
import { startServer, makeCertificates, tempDir, uniqueName, rejection } from '../test-support/harness.mjs';

let server;
let certDir;
let certs;

before(async () => {
  certDir = tempDir('mutexd-node-tls-');
  certs = makeCertificates(certDir);
  server = await startServer({
    scheme: 'https',
    args: ['--tls-cert', certs.cert, '--tls-key', certs.key, '--min-ttl-ms', '500'],
  });
});

after(async () => {
  await server?.stop();
  if (certDir) rmSync(certDir, { recursive: true, force: true });
});

test('with caFile, every kind of call works over HTTPS', async () => {
  const client = new Client(server.url, { caFile: certs.ca });
  assert.match(client.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  const name = uniqueName('tls');
  const lock = await client.lock(name, { ttlMs: 1500 });
  const err = await rejection(client.acquire(name));
  assert.ok(err instanceof LeaseHeldError);
  const state = await client.get(name);
  assert.equal(state.holder.fencingToken, lock.fencingToken);
  const pages = [];
  for await (const page of client.list({ prefix: 'tls/' })) pages.push(page);
  assert.equal(pages[0].resources[0].resource, name);
  const watching = client.watch(name, state.index, { waitMs: 5000 });
  assert.equal(await lock.release(), true);
  assert.equal((await watching).state, 'free');
  assert.deepEqual(await client.request('GET', '/healthz'), { status: 'ok' });
  client.close();
});

test('with "localhost" in the URL (the certificate names it too)', async () => {
  const port = new URL(server.url).port;
  const client = new Client(`https://localhost:${port}`, { caFile: certs.ca });
  assert.equal((await client.get('x')).state, 'free');
  client.close();
});

test('without caFile the private CA is not trusted: a transport error, not an API error', async () => {
  const client = new Client(server.url);
  const err = await rejection(client.get('x'));
  assert.ok(err instanceof TransportError, String(err));
  assert.ok(!(err instanceof APIError));
  assert.match(String(err.code), /CERT|SELF_SIGNED|UNABLE/);
  client.close();
});

test('plain HTTP to the HTTPS port fails as a transport error', async () => {
  const client = new Client(server.url.replace('https:', 'http:'), { timeoutMs: 2000 });
  const err = await rejection(client.get('x'));
  assert.ok(err instanceof TransportError, String(err));
  client.close();
});

test('a caFile that does not exist fails at construction', () => {
  assert.throws(() => new Client(server.url, { caFile: `${certDir}/missing.pem` }), /ENOENT/);
});
