// Decoding of the API's JSON answers into the client's objects (camelCase, fencing tokens as
// bigint).
//
// A fencing token, like a change index, is an unsigned 64-bit integer; a JavaScript number
// holds integers exactly only up to 2^53 - 1. Answers are parsed with JSON.parse, and only
// when a fencing token or an index in them is beyond that range is the text parsed again by
// parseExact() below, which keeps the digits of every `fencing_token`, `index` and `next`
// (outside `metadata`, which is the caller's own data and is parsed as JSON.parse would).

/**
 * Parse the JSON text of an answer.
 * @param {string} text
 */
export function decodeJson(text) {
  const value = JSON.parse(text);
  return hasInexactToken(value) ? parseExact(text) : value;
}

function inexact(v) {
  return typeof v === 'number' && !Number.isSafeInteger(v);
}

function hasInexactToken(v) {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  if (inexact(v.fencing_token) || inexact(v.index) || inexact(v.next)) return true;
  if (Array.isArray(v.events)) {
    for (const e of v.events) if (e && (inexact(e.fencing_token) || inexact(e.index))) return true;
  }
  if (v.error && v.error.holder && inexact(v.error.holder.fencing_token)) return true;
  // The leases of a request about several resources.
  if (Array.isArray(v.leases) && v.leases.some((l) => l && inexact(l.fencing_token))) return true;
  if (stateHasInexactToken(v)) return true;
  if (Array.isArray(v.resources)) {
    for (const r of v.resources) if (stateHasInexactToken(r)) return true;
  }
  return false;
}

// A resource's state: its holder, and every one of its holders.
function stateHasInexactToken(r) {
  if (r === null || typeof r !== 'object') return false;
  if (inexact(r.index)) return true;
  if (r.holder && inexact(r.holder.fencing_token)) return true;
  return Array.isArray(r.holders) && r.holders.some((h) => h && inexact(h.fencing_token));
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/**
 * A JSON parser for text that JSON.parse has already accepted: the same values, except that an
 * integer under the key `fencing_token` (not inside `metadata`) becomes a bigint, and so does
 * one under `index` or `next` that a number would not hold exactly.
 * @param {string} text
 */
export function parseExact(text) {
  let i = 0;
  const skip = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };
  const string = () => {
    const start = i;
    i++; // opening quote
    while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const value = (key, plain) => {
    skip();
    const c = text[i];
    if (c === '{') {
      i++;
      const obj = {};
      skip();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        skip();
        const k = string();
        skip();
        i++; // ':'
        const v = value(k, plain || k === 'metadata');
        // Same semantics as JSON.parse for "__proto__" keys: an own property.
        Object.defineProperty(obj, k, { value: v, writable: true, enumerable: true, configurable: true });
        skip();
        if (text[i++] === '}') return obj;
      }
    }
    if (c === '[') {
      i++;
      const arr = [];
      skip();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(undefined, plain));
        skip();
        if (text[i++] === ']') return arr;
      }
    }
    if (c === '"') return string();
    if (text.startsWith('true', i)) {
      i += 4;
      return true;
    }
    if (text.startsWith('false', i)) {
      i += 5;
      return false;
    }
    if (text.startsWith('null', i)) {
      i += 4;
      return null;
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) throw new SyntaxError(`unexpected character at position ${i}`);
    i = NUMBER.lastIndex;
    if (!plain && m[1] === undefined && m[2] === undefined) {
      if (key === 'fencing_token') return BigInt(m[0]);
      if ((key === 'index' || key === 'next') && !Number.isSafeInteger(Number(m[0]))) return BigInt(m[0]);
    }
    return Number(m[0]);
  };
  const result = value(undefined, false);
  skip();
  if (i !== text.length) throw new SyntaxError(`unexpected text at position ${i}`);
  return result;
}

/** A fencing token as a bigint (from a number or a bigint); null if absent or malformed. */
export function toToken(v) {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number' && Number.isInteger(v)) return BigInt(v);
  return null;
}

/** The lease body of acquire and renew. */
export function toLease(j) {
  return {
    resource: j.resource,
    leaseId: j.lease_id,
    owner: j.owner,
    fencingToken: toToken(j.fencing_token),
    ttlMs: j.ttl_ms,
    expiresInMs: j.expires_in_ms,
    acquiredAt: j.acquired_at,
    renewedAt: j.renewed_at ?? null,
    metadata: j.metadata ?? null,
    // A server without semaphores and shared leases sends neither: its leases are these.
    limit: j.limit ?? 1,
    shared: j.shared === true,
  };
}

/**
 * The leases of an answer about several resources, one per name asked for, in order; null when
 * the answer is not that.
 * @param {any} j
 * @param {string[]} names
 */
export function toLeases(j, names) {
  const items = j?.leases;
  if (!Array.isArray(items) || items.length !== names.length) return null;
  if (items.some((l, i) => l === null || typeof l !== 'object' || l.resource !== names[i])) return null;
  return items.map(toLease);
}

/**
 * A release's answer about one resource (release(), and each of releaseMany()'s).
 * @param {any} j
 */
export function toReleased(j) {
  return { resource: j?.resource, released: j?.released === true };
}

/** A holder of a resource, as GET and the list show it. */
export function toHolder(j) {
  if (j === null || typeof j !== 'object') return null;
  return {
    owner: j.owner,
    fencingToken: toToken(j.fencing_token),
    ttlMs: j.ttl_ms,
    expiresInMs: j.expires_in_ms,
    acquiredAt: j.acquired_at,
    renewedAt: j.renewed_at ?? null,
    metadata: j.metadata ?? null,
    shared: j.shared === true,
  };
}

/** The holder inside a 409 lease_held. */
export function toHolderInfo(j) {
  if (j === null || typeof j !== 'object') return null;
  return { owner: j.owner, fencingToken: toToken(j.fencing_token), expiresInMs: j.expires_in_ms };
}

/** The state of one resource (GET, watch, and each entry of the list). */
export function toState(j) {
  const holder = toHolder(j.holder);
  return {
    resource: j.resource,
    state: j.state,
    index: j.index,
    holder,
    waiters: j.waiters,
    limit: j.limit ?? 1,
    // Oldest grant first. A server without semaphores sends only `holder`.
    holders: Array.isArray(j.holders) ? j.holders.map(toHolder).filter((h) => h !== null) : holder ? [holder] : [],
  };
}

/** One page of the list; `index` (the change index it was read at) when the server sends it. */
export function toPage(j) {
  const page = {
    resources: Array.isArray(j.resources) ? j.resources.map(toState) : [],
    nextCursor: j.next_cursor ?? null,
  };
  if (j.index !== undefined) page.index = toPosition(j.index);
  return page;
}

/** A change index as a bigint (from a number or a bigint); null if absent or malformed. */
export const toIndex = toToken;

/**
 * Where a list watch or the events stand: a change index (bigint) on a lone server or a group
 * of one partition, an opaque string on a partitioned group (--partitions N, N > 1), where one
 * number cannot order the changes of every partition; null if absent or malformed.
 */
export function toPosition(v) {
  if (typeof v === 'string') return v === '' ? null : v;
  return toIndex(v);
}

/**
 * The position to go on from: the greater of two change indexes (a server of a group may answer
 * with one behind another's), else the one answered, as positions are passed back unchanged.
 */
export function laterPosition(at, answered) {
  if (typeof at === 'bigint' && typeof answered === 'bigint') return answered > at ? answered : at;
  return answered;
}

/** The list with its change index (a list watch's answer, every page of it). */
export function toResourceList(index, resources) {
  return { index, resources };
}

/** One event of GET /v1/events. */
export function toEvent(j) {
  return {
    index: toIndex(j.index),
    at: j.at ?? null,
    resource: j.resource,
    type: j.type,
    owner: j.owner ?? '',
    fencingToken: toToken(j.fencing_token),
    shared: j.shared === true,
    limit: j.limit ?? 1,
    // On a partitioned group only: the resource's partition, whose change index `index` is.
    ...(Number.isInteger(j.partition) ? { partition: j.partition } : {}),
  };
}

/** The answer of GET /v1/events. */
export function toEventPage(j) {
  return {
    events: Array.isArray(j.events) ? j.events.map(toEvent) : [],
    next: toPosition(j.next),
    truncated: j.truncated === true,
  };
}

/** The answer of GET /v1/whoami. */
export function toWhoAmI(j) {
  return {
    name: typeof j.name === 'string' ? j.name : null,
    scopes: Array.isArray(j.scopes) ? j.scopes.filter((x) => typeof x === 'string') : [],
  };
}
