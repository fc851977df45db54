// The mutexd client: one method per operation of the HTTP API (version 1), plus lock() and
// runWhenLeader() built on them.

import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Transport } from './transport.js';
import {
  decodeJson,
  toLease,
  toLeases,
  toReleased,
  toState,
  toPage,
  toPosition,
  laterPosition,
  toResourceList,
  toEventPage,
  toWhoAmI,
} from './model.js';
import {
  apiError,
  isRetryable,
  APIError,
  LeaseHeldError,
  ProtocolError,
  TimeoutError,
  TransportError,
  UnavailableError,
} from './errors.js';
import { Lock, MultiLock, OrderedLock, LOSE, releaseInTurn } from './lock.js';
import { anySignal } from './signals.js';
import { partitionOf } from './partition.js';

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_WATCH_WAIT_MS = 60_000;
const DEFAULT_RETRY_MS = 5_000;
// A list watch woken by a change its list does not show is read again after this long.
const REREAD_PAUSE_MS = 100;
/** The server when neither the constructor nor MUTEXD_URL names one. */
const DEFAULT_URL = 'http://127.0.0.1:8080';
// The pause before a call goes round its servers again after 503 answers: their Retry-After,
// at most this long, at least the other.
const RETRY_AFTER_CAP_MS = 2_000;
const RETRY_AFTER_MIN_MS = 100;
// A partitioned group's map is asked for again at most this often: while a partition moves,
// every request about it is a surprise, and each asking again would add a request per request.
const RELEARN_MIN_MS = 1_000;
// The largest partition count the contract allows: a map of more is not one.
const PARTITIONS_MAX = 256;

// A base URL as Transport keeps it (origin and path, without a trailing slash), or null for
// what is not an http: or https: URL. Mutexd-Served-By and the map's owners are compared in it.
function baseUrl(url) {
  try {
    const u = new URL(String(url).trim());
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
    return u.origin + u.pathname.replace(/\/+$/, '');
  } catch {
    return null;
  }
}

// The list of server URLs: `url` (a string, comma-separated, a URL, or an array of them), or
// MUTEXD_URL, or the default.
function serverUrls(url) {
  if (url === undefined || url === null) url = process.env.MUTEXD_URL || DEFAULT_URL;
  const items = Array.isArray(url) ? url : [url];
  const urls = [];
  for (const item of items) {
    if (item instanceof URL) urls.push(item.href);
    else if (typeof item === 'string') urls.push(...item.split(',').map((u) => u.trim()).filter(Boolean));
    else throw new TypeError(`a server URL must be a string or a URL, not ${typeof item}`);
  }
  if (urls.length === 0) throw new TypeError('no server URL given');
  return urls;
}

/** The default owner: "<host name>:<process id>". */
export function defaultOwner() {
  return `${hostname()}:${process.pid}`;
}

// A resource goes into the path with its slashes literal (they are the hierarchy). Characters
// the API does not allow in a name are percent-encoded so that they cannot change the meaning
// of the URL (`?`, `#`, `%`...); the server then answers invalid_resource. A hash tag's `{`
// and `}` are encoded too (%7B, %7D), as the contract asks.
function resourcePath(resource) {
  if (typeof resource !== 'string' || resource.length === 0) {
    throw new TypeError('the resource must be a non-empty string');
  }
  return '/v1/resources/' + resource.replace(/[^A-Za-z0-9._~:@/-]/gu, (c) => encodeURIComponent(c));
}

function leaseRef(lease) {
  if (lease === null || typeof lease !== 'object') {
    throw new TypeError('expected a lease, or { resource, leaseId }');
  }
  const { resource, leaseId } = lease;
  if (typeof leaseId !== 'string' || leaseId.length === 0) {
    throw new TypeError('the lease has no leaseId');
  }
  return { path: resourcePath(resource), leaseId };
}

// The names of a request about several resources, checked as one resource's are (the server
// checks the rest: 2 to 64, each once).
function resourceList(resources) {
  if (!Array.isArray(resources)) throw new TypeError('resources must be an array of resource names');
  if (resources.length === 0) throw new TypeError('no resource named');
  for (const r of resources) resourcePath(r);
  return [...resources];
}

// { resources, leaseId } of a set: from an array of leases of one lease id (what acquireMany()
// resolves with), or from { resources, leaseId } (a MultiLock is one).
function leasesRef(leases) {
  if (Array.isArray(leases)) {
    if (leases.length === 0) throw new TypeError('no lease given');
    const refs = leases.map((l) => {
      leaseRef(l);
      return l;
    });
    const ids = new Set(refs.map((l) => l.leaseId));
    if (ids.size !== 1) throw new TypeError('the leases of one request have one lease id');
    return { resources: resourceList(refs.map((l) => l.resource)), leaseId: refs[0].leaseId };
  }
  if (leases === null || typeof leases !== 'object' || !Array.isArray(leases.resources)) {
    throw new TypeError('expected an array of leases, or { resources, leaseId }');
  }
  const { leaseId } = leases;
  if (typeof leaseId !== 'string' || leaseId.length === 0) throw new TypeError('no leaseId given');
  return { resources: resourceList(leases.resources), leaseId };
}

// The order in which lockOrdered() takes resources: by the bytes of their names (the API's
// names are ASCII), the same in every client.
function byName(a, b) {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function defined(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) out[k] = v;
  return out;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export class Client {
  #ts;
  #current = 0;
  #owner;
  #timeoutMs;
  #transportOptions;
  // The owners of a partitioned group that are not among the URLs given, by base URL.
  #owners = new Map();
  // The partition map last learned, { count, owners: (Transport | null)[] }, or null.
  #map = null;
  // Learned that the servers are not partitioned: nothing is routed, the map never asked for.
  #flat = false;
  // The map request under way, and when the last one started (performance.now()).
  #learning = null;
  #learnedAt = -Infinity;
  // Aborted by close(): ends a map request still under way.
  #closing = new AbortController();

  /**
   * @param {string | URL | Array<string | URL>} [url] the server's base URL, for example
   *   http://127.0.0.1:8080; or several servers of a group, as an array or comma-separated,
   *   any of which answers any request. Default: MUTEXD_URL (a list too), else
   *   http://127.0.0.1:8080.
   * @param {{ token?: string, caFile?: string, timeoutMs?: number, owner?: string }} [options]
   *   token: sent as `Authorization: Bearer <token>`. caFile: a PEM file of the CA(s) to trust
   *   for an https: URL, instead of the system's. timeoutMs: how long a request may take,
   *   beyond any wait it asks the server for (default 10000). owner: the default owner of
   *   acquire, lock and runWhenLeader (default "<host name>:<pid>").
   *
   * Several servers: a request goes to the server that answered last (the first at the
   * start), or to the active server that one named in Mutexd-Served-By when it is one of the
   * URLs given (so that requests stop crossing a standby). On a TransportError (no connection, no answer within the timeout, an answer that
   * is not the API's) or a 503 UnavailableError it goes to the next, each at most once per
   * round. When a round ends in failures and some were 503 answers, the call pauses for their
   * Retry-After (at most 2 s) and goes round again, as long as that leaves it within its
   * timeout of its start; otherwise it rejects with the last attempt's error.
   *
   * A partitioned group (`mutexd --partitions N`): once an answer carries Mutexd-Partition
   * the client asks GET /v1/servers for the partition map, and then sends each request about
   * one resource to the owner of its partition (its advertised URL, as the map names it),
   * before the servers above; a request about several (acquireMany, renewMany, releaseMany)
   * as one about its first name, since they all are in its partition. It asks for the map again, at most once a second and without
   * failing the request, when an answer about a resource was served by another server than
   * the one asked, on a 503, or on a TransportError.
   */
  constructor(url, options = {}) {
    const { token, caFile, timeoutMs = DEFAULT_TIMEOUT_MS, owner } = options;
    if (!(Number.isFinite(timeoutMs) && timeoutMs > 0)) throw new TypeError('timeoutMs must be a positive number');
    this.#transportOptions = { token, caFile, timeoutMs };
    this.#ts = serverUrls(url).map((u) => new Transport(u, this.#transportOptions));
    this.#timeoutMs = timeoutMs;
    this.#owner = owner ?? defaultOwner();
  }

  /** The base URL (without a trailing slash) of the server asked first: the one that answered last. */
  get url() {
    return this.#ts[this.#current].url;
  }

  /** Every server's base URL, in the order given. */
  get urls() {
    return this.#ts.map((t) => t.url);
  }

  /** The default owner. */
  get owner() {
    return this.#owner;
  }

  /** The request timeout in ms (beyond any wait). */
  get timeoutMs() {
    return this.#timeoutMs;
  }

  /**
   * The partition map last learned from a partitioned group: `{ count, owners }`, owners[p]
   * the base URL of partition p's owner (null while none owns it); null when the servers are
   * not partitioned or the map is not known (yet).
   */
  get partitions() {
    if (this.#map === null) return null;
    return { count: this.#map.count, owners: this.#map.owners.map((t) => t?.url ?? null) };
  }

  // Sends a request to the servers in turn (see the constructor). `timeoutMs` bounds each
  // attempt; `deadline` (a performance.now() value), when given, bounds the whole call: no
  // attempt starts or lasts past it.
  async #call(method, path, options) {
    const { signal, deadline, resource } = options;
    // The servers in the order this call tries them: the one asked first and the others after
    // it; the owner of the resource's partition before them when the map names one.
    const order = [];
    const owner = this.#ownerOf(resource);
    let first = this.#current;
    if (owner) {
      const i = this.#ts.indexOf(owner);
      if (i >= 0) first = i;
      else order.push(owner);
    }
    for (let k = 0; k < this.#ts.length; k++) order.push(this.#ts[(first + k) % this.#ts.length]);
    const count = order.length;
    const waitMs = Number.isFinite(options.waitMs) && options.waitMs > 0 ? options.waitMs : 0;
    const perAttempt = (options.timeoutMs ?? this.#timeoutMs) + waitMs;
    const start = performance.now();
    const end = deadline === undefined ? start + perAttempt : Math.min(start + perAttempt, deadline);
    let last;
    let pause; // the round's smallest Retry-After in ms, if it had a 503
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0 && attempt % count === 0) {
        // Back at a server tried in this call.
        if (count === 1 || pause === undefined) throw last;
        const ms = Math.min(RETRY_AFTER_CAP_MS, Math.max(RETRY_AFTER_MIN_MS, pause));
        if (performance.now() + ms >= end) throw last;
        await sleep(ms, signal);
        pause = undefined;
      }
      const t = order[attempt % count];
      let timeoutMs = options.timeoutMs;
      if (deadline !== undefined) {
        const left = deadline - performance.now();
        if (left <= 0) {
          const url = t.url + path;
          throw last ?? new TimeoutError(`${method} ${url}: the deadline passed before the request was sent`, {
            code: 'ETIMEDOUT',
            method,
            url,
          });
        }
        timeoutMs = Math.max(1, Math.min(perAttempt, left) - waitMs);
      }
      let servedBy;
      const answered = (headers) => {
        servedBy = headers['mutexd-served-by'];
        if (!options.learning) this.#checkRoute(t, headers, resource !== undefined);
      };
      try {
        const result = await this.#once(t, method, path, { ...options, timeoutMs }, answered);
        this.#askFirst(t, servedBy);
        return result;
      } catch (err) {
        if (err instanceof TransportError) {
          last = err;
          if (!options.learning && this.#map !== null) this.#relearn();
        } else if (err instanceof UnavailableError) {
          last = err;
          const after = (err.retryAfter ?? 0) * 1000;
          pause = pause === undefined ? after : Math.min(pause, after);
          if (!options.learning && this.#map !== null) this.#relearn();
        } else {
          // It answered (an error is an answer): ask it first next time.
          if (err instanceof APIError) this.#askFirst(t, servedBy);
          throw err;
        }
      }
    }
  }

  // Server `t` answered: it is asked first next time, unless it forwarded to the active
  // server of a group (Mutexd-Served-By) and that is one of ours: then the active is. An
  // owner that is not among the URLs given is asked only about its own partitions.
  #askFirst(t, servedBy) {
    const index = this.#ts.indexOf(t);
    if (index < 0) return;
    this.#current = index;
    if (typeof servedBy !== 'string' || this.#ts.length < 2) return;
    const key = baseUrl(servedBy);
    const found = this.#ts.findIndex((s) => s.url === key);
    if (found >= 0) this.#current = found;
  }

  // The owner of the resource's partition by the map, or null: not about one resource, no
  // map, or no owner now.
  #ownerOf(resource) {
    if (resource === undefined || this.#map === null) return null;
    return this.#map.owners[partitionOf(resource, this.#map.count)] ?? null;
  }

  // An answer from `t`: the first Mutexd-Partition shows a partitioned group, whose map is
  // then learned; an answer about a resource served by another server than `t` shows a map
  // out of date.
  #checkRoute(t, headers, aboutResource) {
    if (this.#flat) return;
    if (this.#map === null) {
      if (headers['mutexd-partition'] !== undefined) this.#relearn();
      return;
    }
    const servedBy = headers['mutexd-served-by'];
    if (aboutResource && typeof servedBy === 'string' && baseUrl(servedBy) !== t.url) this.#relearn();
  }

  // Asks for the map in the background, unless it is being asked for or was less than
  // RELEARN_MIN_MS ago. Its failure is only a map not learned: requests go on as they did.
  #relearn() {
    if (this.#flat || this.#learning !== null) return;
    const now = performance.now();
    if (now - this.#learnedAt < RELEARN_MIN_MS) return;
    this.#learnedAt = now;
    this.#learning = this.#learnMap()
      .catch(() => {})
      .finally(() => {
        this.#learning = null;
      });
  }

  async #learnMap() {
    const body = await this.#call('GET', '/v1/servers', { learning: true, signal: this.#closing.signal });
    const p = body.partitions;
    if (p === undefined || p === null || p.count === 1) {
      this.#flat = true;
      this.#map = null;
      return;
    }
    const { count } = p;
    if (!(Number.isInteger(count) && count >= 2 && count <= PARTITIONS_MAX) || !Array.isArray(p.owners)) {
      throw new ProtocolError('the server\'s partition map is not one', { code: 'ERR_INVALID_RESPONSE' });
    }
    const owners = new Array(count).fill(null);
    for (const o of p.owners) {
      if (o === null || typeof o !== 'object') continue;
      if (!(Number.isInteger(o.partition) && o.partition >= 0 && o.partition < count)) continue;
      if (typeof o.url === 'string') owners[o.partition] = this.#transportFor(o.url);
    }
    this.#map = { count, owners };
  }

  // The transport of an advertised URL: one of the URLs given when it is one, else one of its
  // own, kept for the next time; null for what is not a URL the client can send to.
  #transportFor(url) {
    const key = baseUrl(url);
    if (key === null) return null;
    const given = this.#ts.find((t) => t.url === key);
    if (given) return given;
    let t = this.#owners.get(key);
    if (t === undefined) {
      try {
        t = new Transport(key, this.#transportOptions);
      } catch {
        return null;
      }
      this.#owners.set(key, t);
    }
    return t;
  }

  async #once(t, method, path, options, answered) {
    const res = await t.request(method, path, options);
    const url = t.url + path;
    const { status, headers, text } = res;
    answered?.(headers);
    let body;
    let parsed = false;
    const isJson = /\bjson\b/i.test(String(headers['content-type'] ?? '')) || !headers['content-type'];
    if (isJson && text.length > 0) {
      try {
        body = decodeJson(text);
        parsed = true;
      } catch {
        // handled below
      }
    }
    if (status >= 200 && status < 300) {
      if (options.acceptText) return parsed ? body : text;
      if (parsed && body !== null && typeof body === 'object' && !Array.isArray(body)) return body;
      throw new ProtocolError(`${method} ${url}: the answer (HTTP ${status}) is not a JSON object`, {
        code: 'ERR_INVALID_RESPONSE',
        status,
        method,
        url,
      });
    }
    if (parsed && body && typeof body.error === 'object' && body.error && typeof body.error.code === 'string') {
      throw apiError(status, body.error, headers);
    }
    // Not the API's error body (a proxy's page): the class of its status, code 'unknown'.
    const err = apiError(status, { message: text.trim().slice(0, 200) }, headers);
    err.details = {};
    throw err;
  }

  /**
   * Acquire a lease. Without `leaseId` the client proposes a new random one, so that repeating
   * a call whose answer was lost (with the same `leaseId`) gets the same lease back.
   * `limit` (1 to the server's --max-holders; more than 1 makes the resource a counting
   * semaphore) and `shared` (a shared lease, a reader) are sent only when given: the server
   * reads their absence as 1 and false.
   * Rejects with LeaseHeldError when another lease holds the resource (at once, or when
   * `waitMs` runs out), and with LimitMismatchError when the resource is held under another
   * limit.
   */
  async acquire(resource, options = {}) {
    return this.#acquire(
      options,
      async (json, call) => toLease(await this.#call('POST', `${resourcePath(resource)}/acquire`, { json, ...call, resource })),
      (leaseId) => this.#releaseQuietly(resource, leaseId),
    );
  }

  // acquire() and acquireMany(): the options checked, the lease id (the client's own unless
  // given), the body's fields about the lease; `send(json, { signal, timeoutMs, waitMs })` adds
  // the resource, or the resources, and sends it. `giveBack(leaseId)` releases, ignoring failures.
  async #acquire(options, send, giveBack) {
    const { owner = this.#owner, ttlMs, waitMs, metadata, limit, shared, signal, timeoutMs } = options;
    if (signal?.aborted) throw signal.reason;
    if (limit !== undefined && !Number.isSafeInteger(limit)) throw new TypeError('limit must be an integer');
    if (shared !== undefined && typeof shared !== 'boolean') throw new TypeError('shared must be a boolean');
    const leaseId = options.leaseId ?? randomUUID();
    const json = defined({ owner, ttl_ms: ttlMs, lease_id: leaseId, wait_ms: waitMs, metadata, limit, shared });
    try {
      return await send(json, { signal, timeoutMs, waitMs });
    } catch (err) {
      // Cancelled after the request was sent: the server may have granted it just before it
      // saw the connection close. The lease id is this call's own, so releasing it can only
      // end that grant, if there was one.
      if (signal?.aborted && err === signal.reason && options.leaseId === undefined) giveBack(leaseId);
      throw err;
    }
  }

  /** Releases, ignoring failures; resolves when done (bounded by the client's timeout). */
  #releaseQuietly(resource, leaseId) {
    return this.release({ resource, leaseId }).catch(() => {});
  }

  /**
   * Renew a lease: a fresh TTL (`ttlMs`, default the lease's own), the same fencing token.
   * `timeoutMs` bounds each attempt; `deadline`, a performance.now() value, bounds the whole
   * call: no attempt is started, or lasts, past it (then it rejects with a TimeoutError, or the
   * last attempt's error).
   */
  async renew(lease, options = {}) {
    const { path, leaseId } = leaseRef(lease);
    const { resource } = lease;
    const { ttlMs, metadata, signal, timeoutMs, deadline } = options;
    const json = defined({ lease_id: leaseId, ttl_ms: ttlMs, metadata });
    return toLease(await this.#call('POST', `${path}/renew`, { json, signal, timeoutMs, deadline, resource }));
  }

  /** Release a lease; the next waiter is granted at once. */
  async release(lease, options = {}) {
    const { path, leaseId } = leaseRef(lease);
    const { resource } = lease;
    const { signal, timeoutMs } = options;
    const json = { lease_id: leaseId };
    const body = await this.#call('POST', `${path}/release`, { json, signal, timeoutMs, resource });
    return toReleased(body);
  }

  /**
   * End the leases of a resource whoever holds them (an operator's tool): every one, or only
   * the one whose id is `leaseId`. `broken` is false when there was none (or `leaseId` holds
   * nothing).
   */
  async breakLease(resource, options = {}) {
    const { reason, leaseId, signal, timeoutMs } = options;
    const body = await this.#call('POST', `${resourcePath(resource)}/break`, {
      json: defined({ reason, lease_id: leaseId }),
      signal,
      timeoutMs,
      resource,
    });
    return { resource: body.resource, broken: body.broken === true };
  }

  // A request about several resources, routed as one about the first: on a partitioned group
  // they all are in its partition.
  async #many(action, names, json, options) {
    const { signal, timeoutMs, deadline, waitMs } = options;
    return this.#call('POST', `/v1/${action}`, { json, signal, timeoutMs, deadline, waitMs, resource: names[0] });
  }

  #leasesOf(body, names) {
    const leases = toLeases(body, names);
    if (leases === null) {
      throw new ProtocolError('the server\'s answer is not one lease per resource asked for, in order', {
        code: 'ERR_INVALID_RESPONSE',
      });
    }
    return leases;
  }

  /**
   * Acquire a lease on every resource of `resources` (2 to 64 names, each once), or on none,
   * with one request; the options are acquire()'s and apply to each. Resolves with the leases,
   * one per resource in the order given, all of one lease id (the client proposes one unless
   * `leaseId` is given: repeating the call with it and the same names gets the same leases
   * back), each with its own fencing token. With `waitMs` the request waits in the queue of
   * every resource and is granted all at once (no deadlock, whatever the order of names in
   * concurrent requests). On a partitioned group every name must be in one partition (a hash
   * tag: `{acct}/alice`), else InvalidRequestError (field `resources`); the request goes to that
   * partition's owner. Rejects with LeaseHeldError when one is held (at once, or when `waitMs`
   * runs out): its `resource` is the first held in the order given; nothing was granted.
   */
  async acquireMany(resources, options = {}) {
    const names = resourceList(resources);
    return this.#acquire(
      options,
      async (json, call) => this.#leasesOf(await this.#many('acquire', names, { resources: names, ...json }, call), names),
      (leaseId) => this.releaseMany({ resources: names, leaseId }).catch(() => {}),
    );
  }

  /**
   * Renew the leases of a set with one request: a fresh TTL (`ttlMs`, default each lease's own),
   * the same fencing tokens. `leases`: what acquireMany() resolved with, or
   * `{ resources, leaseId }` (a MultiLock is one). `timeoutMs` and `deadline` are renew()'s.
   * Rejects with LeaseLostError when the lease id no longer holds some of the resources (its
   * `resources` names them); the others WERE renewed.
   */
  async renewMany(leases, options = {}) {
    const { resources, leaseId } = leasesRef(leases);
    const { ttlMs, metadata, signal, timeoutMs, deadline } = options;
    const json = defined({ resources, lease_id: leaseId, ttl_ms: ttlMs, metadata });
    return this.#leasesOf(await this.#many('renew', resources, json, { signal, timeoutMs, deadline }), resources);
  }

  /**
   * Release the leases of a set with one request; each resource's next waiter is granted at
   * once. Resolves with `{ resource, released }` per resource, in order. Rejects with
   * LeaseLostError when the lease id no longer holds some of the resources (its `resources`
   * names them); the others WERE released.
   */
  async releaseMany(leases, options = {}) {
    const { resources, leaseId } = leasesRef(leases);
    const { signal, timeoutMs } = options;
    const body = await this.#many('release', resources, { resources, lease_id: leaseId }, { signal, timeoutMs });
    if (!Array.isArray(body.leases)) {
      throw new ProtocolError('the server\'s answer has no leases', { code: 'ERR_INVALID_RESPONSE' });
    }
    return body.leases.map(toReleased);
  }

  /** The state of a resource (a name never used is free). */
  async get(resource, options = {}) {
    const { signal, timeoutMs } = options;
    return toState(await this.#call('GET', resourcePath(resource), { signal, timeoutMs, resource }));
  }

  /**
   * Wait until the resource's index differs from `index`, or `waitMs` passes (default 60000;
   * at most the server's --max-wait-ms), and return its state.
   */
  async watch(resource, index, options = {}) {
    const { waitMs = DEFAULT_WATCH_WAIT_MS, signal, timeoutMs } = options;
    const query = { index, wait_ms: waitMs };
    return toState(await this.#call('GET', resourcePath(resource), { query, signal, timeoutMs, waitMs, resource }));
  }

  /**
   * The held resources, in name order, one page per iteration:
   * `for await (const page of client.list({ prefix: 'jobs/' })) ...`.
   */
  async *list(options = {}) {
    const { prefix, limit, signal, timeoutMs } = options;
    let cursor = options.cursor;
    do {
      const body = await this.#call('GET', '/v1/resources', { query: { prefix, limit, cursor }, signal, timeoutMs });
      const page = toPage(body);
      yield page;
      cursor = page.nextCursor;
    } while (cursor !== null && cursor !== undefined);
  }

  /**
   * A list watch: wait until a resource whose name starts with `prefix` changes after the
   * change index `index` (default 0n), or `waitMs` passes (default 60000; 0: at once), and
   * return every held resource under `prefix` then (all pages), with the change index to
   * watch from next: `{ index: bigint | string, resources: ResourceState[] }`. On a
   * partitioned group (--partitions N, N > 1) the index is a position, a string: pass the
   * `index` of a list read there unchanged (it refuses other numbers than the first read's
   * 0). `index: 0n, waitMs: 0` (or `index: null`) reads the list at once on any group.
   */
  async watchList(options = {}) {
    const { prefix, waitMs = DEFAULT_WATCH_WAIT_MS, signal, timeoutMs } = options;
    const index = options.index === undefined ? 0n : options.index;
    const at = index === null ? null : toPosition(index);
    if (index !== null && (at === null || (typeof at === 'bigint' && at < 0n))) {
      throw new TypeError('index must be a non-negative integer (a bigint or a number), or a position (a string)');
    }
    if (!(Number.isInteger(waitMs) && waitMs >= 0)) throw new TypeError('waitMs must be a non-negative integer');
    // The list at once is asked with no index, the same answer on every group: a partitioned
    // one refuses the number 0.
    const now = at === null || (at === 0n && waitMs === 0);
    const query = now ? { prefix, limit: 1000 } : { prefix, limit: 1000, index: at, wait_ms: waitMs };
    const first = toPage(
      await this.#call('GET', '/v1/resources', { query, signal, timeoutMs, waitMs: now ? 0 : waitMs }),
    );
    if (first.index === undefined || first.index === null) {
      throw new ProtocolError('the server\'s list has no index: it has no list watch', { code: 'ERR_INVALID_RESPONSE' });
    }
    const resources = [...first.resources];
    let cursor = first.nextCursor;
    while (cursor !== null && cursor !== undefined) {
      const page = toPage(
        await this.#call('GET', '/v1/resources', { query: { prefix, limit: 1000, cursor }, signal, timeoutMs }),
      );
      resources.push(...page.resources);
      cursor = page.nextCursor;
    }
    return toResourceList(first.index, resources);
  }

  /**
   * The held resources under `prefix` as they change:
   * `for await (const list of client.watchPrefix('jobs/')) ...`. Yields the list at once
   * (unless `index` is given: then only after a change under the prefix after it), then
   * after each change under the prefix (a grant, renewal, release, break or expiry),
   * following the server's change index with one list watch of up to `waitMs` at a time.
   * Changes elsewhere yield nothing, nor do changes that leave the list as it was. It never
   * ends by itself: break out of the loop, or abort `signal`. A failed request ends it with
   * its error; start again from the last list's `index` to miss nothing.
   */
  async *watchPrefix(prefix = '', options = {}) {
    if (typeof prefix !== 'string') throw new TypeError('prefix must be a string');
    const { waitMs = DEFAULT_WATCH_WAIT_MS, signal, timeoutMs } = options;
    const sig = (list) => list.resources.map((r) => `${r.resource}\u0000${r.index}`).join('\u0001');
    let seen = null;
    let at;
    if (options.index === undefined || options.index === null) {
      const now = await this.watchList({ prefix, index: null, signal, timeoutMs });
      yield now;
      at = now.index;
      seen = sig(now);
    } else {
      at = toPosition(options.index);
    }
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      const started = performance.now();
      let now = await this.watchList({ prefix, index: at, waitMs, signal, timeoutMs });
      // Answered before the wait ran out: something under the prefix changed.
      const woken = performance.now() - started < waitMs - 50;
      if (woken && (seen === null || sig(now) === seen)) {
        // A change the list does not show: the server may answer a moment before the change
        // reads in the list. Read it once more, shortly.
        await sleep(REREAD_PAUSE_MS, signal);
        now = await this.watchList({ prefix, index: at, waitMs: 0, signal, timeoutMs });
      }
      const changed = seen === null ? woken : sig(now) !== seen;
      at = laterPosition(at, now.index);
      seen = sig(now);
      if (changed) yield now;
    }
  }

  /**
   * One request of the recent changes after the change index `after` (default 0n: the oldest
   * the server keeps), oldest first: `{ events, next: bigint | string, truncated }`. `prefix`,
   * `limit` (1 to 1000, server default 100), and `waitMs`: when there is none yet, wait up to
   * that long for one. On a partitioned group `after` is the `next` of a page read there, a
   * position (a string), passed unchanged; 0n or null asks from the oldest on any group.
   */
  async eventsPage(options = {}) {
    const { prefix, limit, waitMs = 0, signal, timeoutMs } = options;
    const after = options.after ?? 0n;
    const from = toPosition(after);
    if (from === null || (typeof from === 'bigint' && from < 0n)) {
      throw new TypeError('after must be a non-negative integer (a bigint or a number), or a position (a string)');
    }
    if (!(Number.isInteger(waitMs) && waitMs >= 0)) throw new TypeError('waitMs must be a non-negative integer');
    // 0 is the server's default, sent as no `after`: a partitioned group refuses the number.
    const query = { after: from === 0n ? undefined : from, prefix, limit, wait_ms: waitMs > 0 ? waitMs : undefined };
    const body = await this.#call('GET', '/v1/events', { query, signal, timeoutMs, waitMs });
    if (!Array.isArray(body.events) || toPosition(body.next) === null) {
      throw new ProtocolError('the server\'s events answer lacks events or next', { code: 'ERR_INVALID_RESPONSE' });
    }
    return toEventPage(body);
  }

  /**
   * The recent changes, oldest first:
   * `for await (const ev of client.events({ prefix: 'jobs/', follow: true })) ...`.
   * From the oldest the server keeps, or after the change index `after` (on a partitioned
   * group, a position: the `next` of an eventsPage()). Without `follow` it
   * ends with the last change there is; with it, it keeps waiting (`waitMs` per request,
   * default 60000, passing each answer's `next` as the next `after`) until you break out of
   * the loop or abort `signal`. `limit`: events per request (default 1000).
   * When changes after the index asked for were already dropped (the server keeps the last
   * --event-history, and starts afresh on a restart), `onTruncated(after)` is called before
   * the events after the gap (without it, a warning is emitted with process.emitWarning):
   * some were missed. Without `after`, the first answer starts at the oldest kept, without
   * that. A failed request ends it with its error; start again with `after` set to the last
   * event's index to miss nothing (on a partitioned group, where each event's index is its
   * partition's, from a page's `next` with eventsPage()).
   */
  async *events(options = {}) {
    const { prefix, after, follow = false, waitMs = DEFAULT_WATCH_WAIT_MS, limit = 1000, onTruncated, signal, timeoutMs } =
      options;
    let at = after === undefined || after === null ? 0n : toPosition(after);
    if (at === null || (typeof at === 'bigint' && at < 0n)) {
      throw new TypeError('after must be a non-negative integer (a bigint or a number), or a position (a string)');
    }
    let report = after !== undefined && after !== null;
    let full = false;
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      // A full answer may have more behind it: the next one is asked at once.
      const page = await this.eventsPage({
        after: at,
        prefix,
        limit,
        waitMs: follow && !full ? waitMs : 0,
        signal,
        timeoutMs,
      });
      if (page.truncated && report) {
        if (typeof onTruncated === 'function') onTruncated(at);
        else {
          process.emitWarning(
            `mutexd events: changes after index ${at} were dropped by the server (it keeps the last --event-history only); some were missed`,
            'MutexdEventsTruncated',
          );
        }
      }
      report = true;
      for (const ev of page.events) yield ev;
      at = laterPosition(at, page.next);
      full = page.events.length >= limit;
      if (!follow && !full) return;
    }
  }

  /**
   * The name and scopes of the client's token as the server sees it: `{ name, scopes }`
   * (name null and every scope with authorization off). Any valid token may ask; none or a
   * bad one rejects with UnauthorizedError.
   */
  async whoami(options = {}) {
    const { signal, timeoutMs } = options;
    const body = await this.#call('GET', '/v1/whoami', { signal, timeoutMs });
    if (!Array.isArray(body.scopes)) {
      throw new ProtocolError('the server\'s whoami answer lacks scopes', { code: 'ERR_INVALID_RESPONSE' });
    }
    return toWhoAmI(body);
  }

  /**
   * Acquire a lease and keep it alive in the background until release() or loss. Takes
   * acquire()'s options, `limit` and `shared` included, and `onLost`.
   * @returns {Promise<Lock>}
   */
  async lock(resource, options = {}) {
    return this.#keep(Lock, (acquireOptions) => this.acquire(resource, acquireOptions), options);
  }

  // lock() and lockMany(): `take(options)` acquires (acquire()'s options, without onLost), and
  // `Kind` keeps what it got alive, told the monotonic times of the request.
  async #keep(Kind, take, options) {
    const { ttlMs, waitMs, owner, metadata, limit, shared, onLost, leaseId, signal, timeoutMs } = options;
    const sentAt = performance.now();
    const got = await take({ owner, ttlMs, waitMs, leaseId, metadata, limit, shared, signal, timeoutMs });
    const receivedAt = performance.now();
    return new Kind(this, got, { sentAt, receivedAt, onLost });
  }

  /**
   * Acquire a lease on every resource of `resources` at once (acquireMany(), one request) and
   * keep them alive in the background as a set, renewed with one request, until release() or
   * loss: the lock is lost when a renewal of the set is answered lease_lost (ANY lease of the
   * set was lost) or renewals fail until the deadline. Takes acquireMany()'s options and
   * `onLost`. For names in different partitions of a partitioned group, see lockOrdered().
   * @returns {Promise<MultiLock>}
   */
  async lockMany(resources, options = {}) {
    return this.#keep(MultiLock, (acquireOptions) => this.acquireMany(resources, acquireOptions), options);
  }

  /**
   * Lock every resource of `resources`, in any partitions (Curator's InterProcessMultiLock):
   * one lock() per resource, taken one after the other in name order (so that two processes
   * taking overlapping sets never wait on each other in a circle), all within `waitMs`. When
   * one fails (LeaseHeldError when the wait ran out, or any other error) the locks taken are
   * released, the last taken first, and the call rejects with that error. Each lease is renewed
   * on its own; the OrderedLock is lost the moment ANY of them is (`onLost` called once).
   * Takes lock()'s options but `leaseId`.
   * @returns {Promise<OrderedLock>}
   */
  async lockOrdered(resources, options = {}) {
    const names = resourceList(resources).sort(byName);
    if (new Set(names).size !== names.length) throw new TypeError('a resource is named twice: each resource once');
    const { ttlMs, waitMs = 0, owner, metadata, limit, shared, onLost, signal, timeoutMs } = options;
    if (!(Number.isFinite(waitMs) && waitMs >= 0)) throw new TypeError('waitMs must be a non-negative number');
    const end = performance.now() + waitMs;
    let group = null;
    let early;
    const memberLost = (err) => {
      if (group !== null) group[LOSE](err);
      else early ??= err;
    };
    const taken = [];
    try {
      for (const name of names) {
        const left = Math.max(0, Math.round(end - performance.now()));
        const each = { ttlMs, waitMs: left || undefined, owner, metadata, limit, shared, signal, timeoutMs };
        taken.push(await this.lock(name, { ...each, onLost: memberLost }));
      }
    } catch (err) {
      // What was taken is given back, the last taken first.
      await releaseInTurn(taken.reverse(), { timeoutMs }).catch(() => {});
      throw err;
    }
    group = new OrderedLock(taken, { onLost });
    if (early !== undefined) group[LOSE](early);
    return group;
  }

  /**
   * Run `task` whenever this process leads `resource`: acquire a lock (trying again every
   * `retryMs` while another holds it or the server cannot be reached), run
   * `task(signal, lock)` with a signal aborted when the lease is lost, and after a loss wait
   * `retryMs` and start again. When the task returns (or throws) while still leading, the
   * lease is released and its result returned (or its error thrown). Aborting `signal` aborts
   * the task's signal, waits for the task to settle, releases the lease, and rejects with the
   * signal's reason.
   */
  async runWhenLeader(resource, task, options = {}) {
    if (typeof task !== 'function') throw new TypeError('task must be a function');
    const { ttlMs, retryMs = DEFAULT_RETRY_MS, waitMs, owner, metadata, signal, onRetry, onLost, timeoutMs } = options;
    let leaseId = randomUUID();
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      let lock;
      try {
        lock = await this.lock(resource, { ttlMs, waitMs, owner, metadata, onLost, leaseId, signal, timeoutMs });
      } catch (err) {
        if (signal?.aborted) {
          // As in acquire(): end a grant the cancelled request may have got. Awaited: a
          // caller that stops on this (a worker shutting down) may exit right after.
          await this.#releaseQuietly(resource, leaseId);
          throw signal.reason;
        }
        if (!(err instanceof LeaseHeldError) && !isRetryable(err)) throw err;
        // The same lease id is proposed again: if the last acquire was granted but its answer
        // lost, the next one gets that lease back.
        if (typeof onRetry === 'function') onRetry(err, retryMs);
        await sleep(retryMs, signal);
        continue;
      }
      leaseId = randomUUID();
      // Aborted with the lock's signal (which lock.lost and lock.check() abort at once when
      // they find the deadline passed), and with the caller's.
      const linked = anySignal([lock.signal, signal]);
      let result;
      let failure;
      let failed = false;
      try {
        result = await task(linked.signal, lock);
      } catch (err) {
        failed = true;
        failure = err;
      } finally {
        linked.dispose();
      }
      if (!lock.lost) {
        try {
          await lock.release({ timeoutMs });
        } catch {
          // The lease runs out by itself.
        }
      }
      if (signal?.aborted) throw signal.reason;
      if (lock.lost) {
        await sleep(retryMs, signal);
        continue;
      }
      if (failed) throw failure;
      return result;
    }
  }

  /**
   * Send any request to the server (for example GET /readyz or /metrics). `body`: an object
   * is sent as JSON, a string or bytes as they are (as application/json unless the headers
   * given say otherwise). Resolves with
   * the answer's JSON (fencing tokens as bigint), or its text when it is not JSON; an error
   * answer rejects as the other methods do.
   */
  async request(method, path, options = {}) {
    if (typeof path !== 'string' || !path.startsWith('/')) throw new TypeError('path must start with "/"');
    const { query, body, headers, signal, timeoutMs } = options;
    const isRaw = typeof body === 'string' || body instanceof Uint8Array;
    return this.#call(method, path, {
      query,
      json: isRaw ? undefined : body,
      raw: isRaw ? body : undefined,
      headers,
      signal,
      timeoutMs,
      acceptText: true,
    });
  }

  /** Close the client's connections. Requests still in flight fail; locks stop being renewed
   * successfully, so release them first. */
  close() {
    this.#closing.abort();
    for (const t of this.#ts) t.close();
    for (const t of this.#owners.values()) t.close();
  }
}
