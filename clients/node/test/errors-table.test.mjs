// The error table of docs/clients.md, walked: every class it names exists with its parent, an
// error answer of its status and code gets it, and nothing else is exported. The Python
// client's tests walk the same table, so the two clients cannot name or nest their errors
// differently.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as api from '../index.js';
import { apiError } from '../src/errors.js';
import { repoRoot } from '../test-support/harness.mjs';

const doc = readFileSync(path.join(repoRoot, 'docs', 'clients.md'), 'utf8').split('\n');

// A code no client knows: the status alone must choose the class.
const UNKNOWN_CODE = 'some_code_of_a_newer_server';

function rows(heading) {
  const start = doc.indexOf(heading);
  assert.ok(start >= 0, heading);
  const out = [];
  for (const line of doc.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    out.push(
      line
        .trim()
        .replace(/^\||\|$/g, '')
        .split('|')
        .map((c) => c.trim()),
    );
  }
  assert.ok(out.length > 0, heading);
  return out;
}

function name(cell) {
  const m = /^`(\w+)`$/.exec(cell);
  assert.ok(m, `not a class name: ${cell}`);
  return m[1];
}

const table = rows('| status | code | Python | parent | Node.js | parent |').map(([status, code, py, pyParent, node, nodeParent]) => ({
  status,
  code,
  py: name(py),
  pyParent: name(pyParent),
  node: name(node),
  nodeParent: name(nodeParent),
}));

// The (status, code) pairs an error answer of this row may have; none for the rows that are
// not error answers. A code of `undefined` is an answer without the API's error body.
function answers({ status, code }) {
  let codes = [...code.matchAll(/`(\w+)`/g)].map((m) => m[1]);
  if (code === 'any' || code === 'any other') codes = [UNKNOWN_CODE, undefined];
  let statuses;
  if (/^\d{3}$/.test(status)) statuses = [Number(status)];
  else if (status === 'any other 5xx') statuses = [500, 502, 504];
  else if (status === 'any other') statuses = [402, 418];
  else return [];
  return statuses.flatMap((s) => codes.map((c) => [s, c]));
}

test('the table has every row, each name once', () => {
  assert.equal(table.length, 20);
  assert.equal(new Set(table.map((r) => r.node)).size, table.length);
  assert.equal(new Set(table.map((r) => r.py)).size, table.length);
});

for (const row of table) {
  test(`${row.node}: its name, its parent, the answers that get it`, () => {
    const Class = api[row.node];
    assert.equal(typeof Class, 'function', `${row.node} is exported`);
    assert.equal(Class.name, row.node);
    const Parent = api[row.nodeParent] ?? globalThis[row.nodeParent];
    assert.equal(Object.getPrototypeOf(Class), Parent, `${row.node} extends ${row.nodeParent}`);
    assert.ok(Class === api.MutexdError || Class.prototype instanceof api.MutexdError);
    // The counterpart's parent is the counterpart of the parent.
    const parentRow = table.find((r) => r.node === row.nodeParent);
    if (parentRow) assert.equal(parentRow.py, row.pyParent, `${row.py} extends ${row.pyParent}`);
    else assert.equal(row.nodeParent, 'Error');
    for (const [status, code] of answers(row)) {
      const err = apiError(status, code === undefined ? {} : { code, message: 'm' }, {});
      assert.equal(Object.getPrototypeOf(err), Class.prototype, `${status} ${code}`);
      assert.equal(err.name, row.node);
    }
  });
}

test('every exported error class is in the table', () => {
  const aliases = new Set(rows('| deprecated name | language | now |').map((r) => name(r[0])));
  const classes = Object.entries(api)
    .filter(([, v]) => typeof v === 'function' && (v === Error || v.prototype instanceof Error))
    .map(([k]) => k)
    .filter((k) => !aliases.has(k));
  assert.deepEqual(classes.sort(), table.map((r) => r.node).sort());
});

test('the deprecated names are the same classes', () => {
  const py = new Set(table.map((r) => r.py));
  for (const [old, language, now] of rows('| deprecated name | language | now |')) {
    if (language === 'Node.js') {
      assert.equal(api[name(old)], api[name(now)], `${name(old)} is ${name(now)}`);
    } else {
      assert.equal(language, 'Python');
      assert.ok(py.has(name(now)));
    }
  }
});

test('isRetryable follows the table', () => {
  const retryable = new Set(['TransportError', 'TimeoutError', 'ProtocolError', 'UnavailableError', 'TooManyWaitersError', 'ServerError']);
  for (const { node } of table) {
    const Class = api[node];
    const err = Class === api.APIError || Class.prototype instanceof api.APIError ? new Class(500, { code: 'x' }) : new Class('m');
    assert.equal(api.isRetryable(err), retryable.has(node), node);
  }
});
