// Type-checked, never run: the Node.js client used the way its README and docs use it, so
// that a declaration in index.d.ts that does not fit its use fails `tsc`.
import {
  Client,
  Lock,
  Lease,
  LeaseHeldError,
  LeaseLostError,
  LeaseExpiredError,
  LimitMismatchError,
  APIError,
  TransportError,
  MutexdError,
  MutexdTransportError,
  isRetryable,
  partitionOf,
  ResourceState,
  Holder,
  ResourceList,
  MutexdEvent,
  EventPage,
  Position,
  WhoAmI,
} from '../../clients/node/index.js';

async function main(): Promise<void> {
  const client = new Client('http://127.0.0.1:8080', { owner: 'worker-1', timeoutMs: 5000 });
  try {
    const lease: Lease = await client.acquire('jobs/nightly', { ttlMs: 15000, waitMs: 30000 });
    const token: bigint = lease.fencingToken;
    await client.renew(lease);
    await client.release(lease);
    void token;
  } catch (err) {
    if (err instanceof LeaseHeldError) {
      const holder = err.holder;
      void holder;
    } else if (err instanceof APIError) {
      const code: string = err.code;
      const status: number = err.status;
      void code;
      void status;
    } else if (err instanceof TransportError) {
      const code: string | undefined = err.code;
      void code;
    } else if (err instanceof MutexdError) {
      void isRetryable(err);
    }
    // A deprecated name is the same class, and the same type.
    if (err instanceof MutexdTransportError) {
      const same: TransportError = err;
      void same;
    }
  }
  const group = new Client(['http://a:8080', new URL('http://b:8080')], { timeoutMs: 2000 });
  const urls: string[] = group.urls;
  const lease2 = await group.acquire('jobs/nightly');
  await group.renew(lease2, { deadline: performance.now() + lease2.expiresInMs });
  void urls;
  group.close();
  new Client().close();
  new Client('http://a:8080,http://b:8080').close();
  const state: ResourceState = await client.get('jobs/nightly');
  await client.watch('jobs/nightly', state.index, { waitMs: 60000 });
  for await (const page of client.list({ prefix: 'jobs/' })) {
    void page.resources.length;
  }
  const lock: Lock = await client.lock('jobs/nightly', { ttlMs: 15000 });
  lock.check();
  const reason = lock.lost ? 'lost' : 'held';
  lock.signal.addEventListener('abort', () => {
    const why = lock.signal.reason as LeaseLostError | LeaseExpiredError;
    void why;
  });
  await lock.release();
  {
    await using held = await client.lock('jobs/nightly');
    held.check();
  }
  const result: number = await client.runWhenLeader('leader/demo', async (signal, held) => {
    while (!signal.aborted) {
      void held.fencingToken;
      await new Promise((r) => setTimeout(r, 1000));
    }
    return 1;
  });
  void reason;
  void result;
  // Semaphores and shared leases, as docs/clients.md uses them.
  try {
    const slot: Lock = await client.lock('encoders', { limit: 3, waitMs: 60000 });
    const places: number = slot.limit;
    await slot.release();
    void places;
  } catch (err) {
    if (err instanceof LimitMismatchError) {
      const inForce: number | undefined = err.limit;
      void inForce;
    }
  }
  const reader: Lease = await client.acquire('cache/prices', { shared: true, waitMs: 5000 });
  const isShared: boolean = reader.shared;
  void isShared;
  const now: ResourceState = await client.get('cache/prices');
  const holders: Holder[] = now.holders;
  const readers = holders.filter((h) => h.shared).length;
  void readers;
  void now.limit;
  await client.breakLease('cache/prices', { leaseId: reader.leaseId, reason: 'stuck reader' });
  // Watching a prefix and following events, as docs/clients.md uses them.
  for await (const list of client.watchPrefix('jobs/', { waitMs: 30000 })) {
    const l: ResourceList = list;
    const at: Position = l.index; // a string on a partitioned group
    await client.watchList({ prefix: 'jobs/', index: at, waitMs: 30000 });
    const owners: string[] = l.resources.flatMap((r) => r.holders.map((h) => h.owner));
    void at;
    void owners;
    break;
  }
  const once: ResourceList = await client.watchList({ prefix: 'jobs/', index: 0n, waitMs: 0 });
  void once;
  for await (const ev of client.events({ prefix: 'jobs/', follow: true, onTruncated: (after: bigint) => void after })) {
    const e: MutexdEvent = ev;
    const token: bigint = e.fencingToken;
    if (e.type === 'granted' || e.type === 'expired') void token;
    const part: number | undefined = e.partition;
    void part;
    break;
  }
  const page: EventPage = await client.eventsPage({ after: 0n, limit: 10 });
  const next: Position = page.next;
  await client.eventsPage({ after: next, limit: 10 });
  const who: WhoAmI = await client.whoami();
  const canBreak: boolean = who.scopes.includes('admin');
  void canBreak;
  // The partition of a name, as docs/clients/node.md shows it.
  const partition: number = partitionOf('{order-7}/lock', 16);
  void partition;
  client.close();
}

void main;
