// anySignal(): AbortSignal.any() where Node has it, linkSignals() where it does not; neither
// changes the signals it is given.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { anySignal, linkSignals } from '../src/signals.js';

for (const [name, make] of [
  ['anySignal', anySignal],
  ['linkSignals', (signals) => linkSignals(signals.filter(Boolean))],
]) {
  test(`${name}: aborted by the first of its signals to abort, with its reason`, () => {
    const a = new AbortController();
    const b = new AbortController();
    const { signal, dispose } = make([a.signal, undefined, b.signal]);
    assert.equal(signal.aborted, false);
    const why = new Error('b first');
    b.abort(why);
    assert.equal(signal.aborted, true);
    assert.equal(signal.reason, why);
    a.abort(new Error('a later'));
    assert.equal(signal.reason, why);
    dispose();
    for (const s of [a.signal, b.signal]) {
      assert.deepEqual(Object.getOwnPropertyNames(s), [], 'nothing added to the signals given');
    }
  });

  test(`${name}: aborted at once by a signal already aborted`, () => {
    const why = new Error('already');
    const { signal } = make([new AbortController().signal, AbortSignal.abort(why)]);
    assert.equal(signal.aborted, true);
    assert.equal(signal.reason, why);
  });
}

test('linkSignals: dispose() detaches it from its signals', () => {
  const a = new AbortController();
  const { signal, dispose } = linkSignals([a.signal]);
  dispose();
  a.abort();
  assert.equal(signal.aborted, false);
});
