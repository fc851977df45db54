// The HTTP transport of the client.
//
// Every request goes through node:http or node:https with a keep-alive Agent of this client,
// not through the global fetch(). The reasons:
//
// - TLS with a private CA. Node's fetch (undici) takes no per-request CA: that needs an undici
//   Agent from the undici package (a dependency), and NODE_EXTRA_CA_CERTS is process-wide and
//   read only at start-up. An https.Agent takes `ca` on Node 18 and on every later version.
// - One code path. Using fetch() for plain HTTP and node:https only when a CA file is given
//   would give two transports with different errors, timeouts and abort behaviour; the one
//   used less would be the one tested less.
// - A cancelled request must close its connection: a waiting acquire stays in the server's
//   queue until the server sees its client go away. req.destroy() closes the socket at once.
// - Idle keep-alive sockets are unref'd by the Agent, so an idle client never keeps the
//   process alive, and close() ends them.

import http from 'node:http';
import https from 'node:https';
import { readFileSync } from 'node:fs';
import { ProtocolError, TimeoutError, TransportError } from './errors.js';

export const VERSION = '0.1.0';

// An idle connection is closed by the client after this long, before the server's own idle
// timeout (default 60 s) would close it under a request being sent.
const FREE_SOCKET_TIMEOUT_MS = 30_000;
// Bodies larger than this are refused (a page of 1000 resources with 4 KiB of metadata each
// is about 4.5 MiB).
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

export class Transport {
  /**
   * @param {string | URL} url
   * @param {{ token?: string, caFile?: string, timeoutMs: number }} options
   */
  constructor(url, { token, caFile, timeoutMs }) {
    let u;
    try {
      u = new URL(String(url));
    } catch {
      throw new TypeError(`not a URL: ${url}`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') {
      throw new TypeError(`the mutexd URL must be http: or https:, not ${u.protocol}`);
    }
    if (u.search || u.hash || u.username || u.password) {
      throw new TypeError('the mutexd URL takes no query, fragment or credentials');
    }
    this.secure = u.protocol === 'https:';
    this.hostname = u.hostname.replace(/^\[(.*)\]$/, '$1');
    this.port = u.port ? Number(u.port) : this.secure ? 443 : 80;
    this.basePath = u.pathname.replace(/\/+$/, '');
    this.url = u.origin + this.basePath;
    this.timeoutMs = timeoutMs;
    const agentOptions = { keepAlive: true, timeout: FREE_SOCKET_TIMEOUT_MS };
    if (this.secure) {
      this.module = https;
      this.agent = new https.Agent(caFile ? { ...agentOptions, ca: readFileSync(caFile) } : agentOptions);
    } else {
      this.module = http;
      this.agent = new http.Agent(agentOptions);
    }
    this.headers = { 'user-agent': `mutexd-node/${VERSION}`, accept: 'application/json' };
    if (token) this.headers.authorization = `Bearer ${token}`;
  }

  /**
   * Send one request and read the whole answer.
   *
   * @param {string} method
   * @param {string} path path below the base URL, starting with "/"
   * @param {{ query?: Record<string, unknown>, json?: unknown, raw?: string | Uint8Array,
   *           headers?: Record<string, string>, signal?: AbortSignal, timeoutMs?: number,
   *           waitMs?: number }} [options]
   *   `json` is sent as JSON; `raw` as is. The timeout is `timeoutMs` (default: the client's)
   *   plus `waitMs`, the time the server is asked to hold the request.
   * @returns {Promise<{ status: number, headers: Record<string, string | string[] | undefined>, text: string }>}
   */
  async request(method, path, options = {}) {
    const { query, json, raw, signal } = options;
    if (signal?.aborted) throw signal.reason;
    let target = this.basePath + path;
    if (query) {
      const qs = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) qs.append(k, String(v));
      const s = qs.toString();
      if (s) target += `?${s}`;
    }
    const headers = { ...this.headers };
    let payload;
    if (json !== undefined) {
      payload = Buffer.from(JSON.stringify(json), 'utf8');
      headers['content-type'] = 'application/json';
    } else if (raw !== undefined) {
      payload = typeof raw === 'string' ? Buffer.from(raw, 'utf8') : raw;
      // The server refuses a body without a JSON type; headers given below may say otherwise.
      headers['content-type'] = 'application/json';
    }
    if (payload !== undefined) headers['content-length'] = String(payload.length);
    if (options.headers) {
      for (const [k, v] of Object.entries(options.headers)) {
        if (v === undefined || v === null) delete headers[k.toLowerCase()];
        else headers[k.toLowerCase()] = v;
      }
    }
    const waitMs = Number.isFinite(options.waitMs) && options.waitMs > 0 ? options.waitMs : 0;
    const timeoutMs = (options.timeoutMs ?? this.timeoutMs) + waitMs;
    const url = this.url + path;
    // A kept-alive connection may be closed by the server just as a request is written on it;
    // such a request never reached the server, and is sent once more on a new connection.
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#once(method, target, headers, payload, signal, timeoutMs, url);
      } catch (err) {
        if (signal?.aborted && err === signal.reason) throw err;
        if (attempt === 0 && err.staleSocket) continue;
        // After a failure the idle connections may lead nowhere (a server that restarted, or
        // moved to another address): the next request connects afresh, with a new lookup.
        this.dropIdle();
        if (err instanceof TransportError) throw err;
        throw new TransportError(`${method} ${url}: ${err.message}`, { cause: err, method, url });
      }
    }
  }

  #once(method, path, headers, payload, signal, timeoutMs, url) {
    return new Promise((resolve, reject) => {
      let settled = false;
      let timer;
      let answered = false;
      const req = this.module.request({
        agent: this.agent,
        host: this.hostname,
        port: this.port,
        method,
        path,
        headers,
      });
      const settle = (err, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(value);
      };
      const onAbort = () => {
        settle(signal.reason);
        req.destroy();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (Number.isFinite(timeoutMs)) {
        timer = setTimeout(() => {
          settle(
            new TimeoutError(`${method} ${url}: no answer within ${timeoutMs} ms`, {
              code: 'ETIMEDOUT',
              method,
              url,
            }),
          );
          req.destroy();
        }, timeoutMs);
      }
      req.on('error', (err) => {
        if (!answered && req.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE')) {
          err.staleSocket = true;
        }
        settle(err);
      });
      req.on('response', (res) => {
        answered = true;
        const chunks = [];
        let size = 0;
        res.on('data', (chunk) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) {
            settle(
              new ProtocolError(`${method} ${url}: the answer is over ${MAX_ANSWER_BYTES} bytes`, {
                code: 'ERR_INVALID_RESPONSE',
                status: res.statusCode,
                method,
                url,
              }),
            );
            req.destroy();
          } else {
            chunks.push(chunk);
          }
        });
        res.on('end', () => {
          settle(null, {
            status: res.statusCode,
            headers: res.headers,
            text: Buffer.concat(chunks).toString('utf8'),
          });
        });
        res.on('error', (err) => settle(err));
        res.on('close', () => {
          if (!res.complete) settle(new Error('the connection closed before the answer was complete'));
        });
      });
      req.end(payload);
    });
  }

  /** Close the idle kept-alive connections; requests in flight keep theirs. */
  dropIdle() {
    for (const sockets of Object.values(this.agent.freeSockets)) {
      for (const socket of sockets ?? []) socket.destroy();
    }
  }

  /** Close every connection of this client; requests still in flight fail. */
  close() {
    this.agent.destroy();
  }
}
