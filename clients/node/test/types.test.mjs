// index.d.ts against the code: the same exports, the same members, the same object shapes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as api from '../index.js';
import { toLease, toHolder, toHolderInfo, toState, toPage, toResourceList, toEvent, toEventPage, toWhoAmI } from '../src/model.js';

const dts = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');

function declared(kind) {
  return [...dts.matchAll(new RegExp(`^export declare ${kind} (\\w+)`, 'gm'))].map((m) => m[1]);
}

function block(kind, name) {
  const m = new RegExp(`^export (?:declare )?${kind} ${name}\\b[^{]*\\{(?:\\}|\\n([\\s\\S]*?)^\\})`, 'm').exec(dts);
  assert.ok(m, `${kind} ${name} is declared`);
  return m[1] ?? '';
}

function members(body) {
  const names = [];
  for (const line of body.split('\n')) {
    const m = /^ {2}(?:readonly\s+)?(\w+)\??(?:<[^>]*>)?\s*[:(]/.exec(line);
    if (m && m[1] !== 'constructor' && m[1] !== 'private') names.push(m[1]);
  }
  return names;
}

test('index.d.ts declares exactly what index.js exports', () => {
  const names = [...declared('class'), ...declared('function'), ...declared('const')].sort();
  assert.deepEqual(names, Object.keys(api).sort());
  for (const n of declared('class')) assert.equal(typeof api[n], 'function', n);
});

test('declared classes have their members, and their base classes', () => {
  for (const name of declared('class')) {
    const body = block('class', name);
    const ext = new RegExp(`^export declare class ${name} extends (\\w+)`, 'm').exec(dts);
    if (ext) {
      const base = ext[1] === 'Error' ? Error : api[ext[1]];
      assert.ok(api[name].prototype instanceof base, `${name} extends ${ext[1]}`);
    }
    let instance;
    if (name === 'Client') instance = new api.Client('http://127.0.0.1:9');
    else if (name === 'Lock' || name === 'MultiLock' || name === 'OrderedLock') instance = Object.create(api[name].prototype);
    else if (api[name].prototype instanceof api.APIError || name === 'APIError') {
      instance = new api[name](400, { code: 'x', message: 'm' }, {});
    } else instance = new api[name]('m');
    for (const m of members(body)) assert.ok(m in instance, `${name}.${m}`);
    if (name === 'Client') instance.close();
  }
});

test('declared interfaces match the objects the client builds', () => {
  const lease = toLease({
    resource: 'r',
    lease_id: 'l',
    owner: 'o',
    fencing_token: 1,
    ttl_ms: 1,
    expires_in_ms: 1,
    acquired_at: 't',
    renewed_at: null,
    metadata: null,
  });
  const holder = toHolder({ owner: 'o', fencing_token: 1, ttl_ms: 1, expires_in_ms: 1, acquired_at: 't', renewed_at: null, metadata: null });
  const shapes = {
    Lease: lease,
    Holder: holder,
    HolderInfo: toHolderInfo({ owner: 'o', fencing_token: 1, expires_in_ms: 1 }),
    ResourceState: toState({ resource: 'r', state: 'held', index: 1, holder: {}, waiters: 0 }),
    ResourcePage: toPage({ resources: [], next_cursor: null, index: 1 }),
    ResourceList: toResourceList(1n, []),
    // `partition` is there on a partitioned group only.
    MutexdEvent: toEvent({ index: 1, at: 't', resource: 'r', type: 'granted', owner: 'o', fencing_token: 1, shared: false, limit: 1, partition: 3 }),
    EventPage: toEventPage({ events: [], next: 1, truncated: false }),
    WhoAmI: toWhoAmI({ name: null, scopes: [] }),
  };
  for (const [name, obj] of Object.entries(shapes)) {
    assert.deepEqual(members(block('interface', name)).sort(), Object.keys(obj).sort(), name);
  }
  assert.equal(typeof lease.fencingToken, 'bigint');
  assert.equal(typeof shapes.MutexdEvent.index, 'bigint');
  assert.equal(typeof shapes.EventPage.next, 'bigint');
  // A partitioned group's positions are strings, kept as they are.
  assert.equal(toPage({ resources: [], next_cursor: null, index: 'v1.0.2' }).index, 'v1.0.2');
  assert.equal(toEventPage({ events: [], next: 'v1.0.2', truncated: false }).next, 'v1.0.2');
  assert.equal('partition' in toEvent({ index: 1, type: 'granted' }), false);
  assert.deepEqual(members(block('interface', 'LeaseRef')).sort(), ['leaseId', 'resource']);
  assert.deepEqual(members(block('interface', 'LeasesRef')).sort(), ['leaseId', 'resources']);
});
