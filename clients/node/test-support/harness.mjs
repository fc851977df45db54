// Test harness: start and stop real mutexd servers, make TLS certificates, small helpers.
//
// The binary is $MUTEXD_BIN, or build/mutexd under the repository root.

import { spawn, execFileSync } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const mutexdBin = process.env.MUTEXD_BIN || path.join(repoRoot, 'build', 'mutexd');

// Every directory of tempDir() is made in one of this process's own, removed when it exits
// with all in it, whatever the tests did: the data of a server killed, of a failed test.
let parent = null;
const running = new Set();
const azurites = new Set();
process.on('exit', () => {
  for (const a of azurites) a.kill();
  for (const p of running) {
    try {
      p.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  if (parent !== null) rmSync(parent, { recursive: true, force: true });
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130));

export function tempDir(prefix = 'mutexd-node-test-') {
  if (parent === null) parent = mkdtempSync(path.join(tmpdir(), 'mutexd-node-run-'));
  return mkdtempSync(path.join(parent, prefix));
}

/**
 * Start a server on a free port of 127.0.0.1 (or on `listen`) with a fresh data directory (or
 * `dataDir`). Resolves when it logged msg="started".
 */
export async function startServer({ args = [], dataDir, scheme = 'http', env, listen = '127.0.0.1:0' } = {}) {
  const dir = dataDir ?? tempDir();
  const ownDir = dataDir === undefined;
  const proc = spawn(mutexdBin, ['--listen', listen, '--data-dir', dir, '--threads', '2', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env },
  });
  running.add(proc);
  const exited = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      running.delete(proc);
      resolve({ code, signal });
    });
  });
  const log = [];
  let buffered = '';
  const address = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error('mutexd did not start within 10 s')), 10_000);
    function fail(err) {
      clearTimeout(timer);
      proc.kill('SIGKILL');
      // A server that never started leaves no data to look at: its own directory goes.
      if (ownDir) exited.then(() => rmSync(dir, { recursive: true, force: true }));
      reject(new Error(`${err.message}\n${log.join('\n')}`));
    }
    proc.on('error', fail);
    proc.on('exit', (code) => fail(new Error(`mutexd exited with ${code} before it started`)));
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => {
      buffered += chunk;
      let nl;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        log.push(line);
        if (line.includes('msg="started"')) {
          const m = / address=(\S+)/.exec(line);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]);
          }
        }
      }
    });
  });
  let stopped = false;
  const server = {
    address,
    url: `${scheme}://${address}`,
    dataDir: dir,
    proc,
    log,
    exited,
    /** SIGTERM, and the exit status. */
    async stop() {
      if (!stopped && proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      stopped = true;
      const status = await exited;
      if (ownDir) rmSync(dir, { recursive: true, force: true });
      return status;
    },
    /** SIGKILL (a crash); the data directory is kept. */
    async kill() {
      proc.kill('SIGKILL');
      return exited;
    },
  };
  return server;
}

/** A CA and a server certificate for 127.0.0.1 and localhost, made with the openssl tool. */
export function makeCertificates(dir) {
  const f = (name) => path.join(dir, name);
  const openssl = (...args) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', f('ca.key'));
  openssl(
    'req', '-x509', '-new', '-key', f('ca.key'), '-out', f('ca.pem'), '-days', '2', '-subj', '/CN=mutexd test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
  );
  openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', f('server.key'));
  openssl('req', '-new', '-key', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=127.0.0.1');
  writeFileSync(
    f('server.ext'),
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n' +
      'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n',
  );
  openssl(
    'x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial',
    '-out', f('server.pem'), '-days', '2', '-extfile', f('server.ext'),
  );
  return { ca: f('ca.pem'), cert: f('server.pem'), key: f('server.key') };
}

/** A TCP port of 127.0.0.1 that nothing listens on now. */
export async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/**
 * Start a real Azurite (scripts/azurite.sh: the npm package pinned in tests/azurite, in
 * memory, on a free loopback port), for a server group's blob container. `stop()` stops it
 * and removes its directory; one left running is killed when the process exits.
 */
export function startAzurite() {
  const script = path.join(repoRoot, 'scripts', 'azurite.sh');
  const dir = tempDir('azurite-');
  const run = (...args) => execFileSync(script, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  run('install');
  run('start', dir);
  const pid = Number(readFileSync(path.join(dir, 'pid'), 'utf8'));
  const entry = {
    kill() {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    },
  };
  azurites.add(entry);
  return {
    connectionString: readFileSync(path.join(dir, 'connection-string'), 'utf8').trim(),
    stop() {
      run('stop', dir);
      azurites.delete(entry);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Poll `fn` until it returns a truthy value, or fail after `timeoutMs`. */
export async function eventually(fn, { timeoutMs = 5000, intervalMs = 25, message = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${message}`);
    await sleep(intervalMs);
  }
}

/** Resolves with the error a promise rejects with; fails if it resolves. */
export async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

let counter = 0;
/** A resource name no other test uses. */
export function uniqueName(prefix = 'test') {
  counter += 1;
  return `${prefix}/${process.pid}-${counter}`;
}

/**
 * A stand-in JSON server on loopback, for answers a real server does not give on demand:
 * records each request as { method, url, body } in `seen` and answers with
 * `answer(req, body)` -> [status, text]. `close()` stops it.
 */
export async function jsonStandIn(answer) {
  const seen = [];
  const srv = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method, url: req.url, body: body ? JSON.parse(body) : undefined });
      const [status, text] = answer(req, body);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(text);
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    seen,
    close: () =>
      new Promise((resolve) => {
        srv.closeAllConnections?.();
        srv.close(resolve);
      }),
  };
}
