// partitionOf against the published test vectors (tests/vectors/partitions.json, the table of
// docs/api.md, "Partitions"), which the server's tests and every client's run too; the
// hash-tag rule's edges; and a tag's braces percent-encoded in a request's path.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Client, partitionOf } from '../index.js';
import { crc32, hashTag, nameHash } from '../src/partition.js';
import { jsonStandIn } from '../test-support/harness.mjs';

const vectors = JSON.parse(readFileSync(new URL('../../../tests/vectors/partitions.json', import.meta.url), 'utf8')).vectors;

const tagOf = (name) => Buffer.from(hashTag(Buffer.from(name, 'utf8'))).toString('utf8');

test('every published vector holds: the hashed bytes, the CRC-32, each partition', () => {
  let checked = 0;
  for (const v of vectors) {
    assert.equal(tagOf(v.name), v.hashed, v.name);
    assert.equal(nameHash(v.name), parseInt(v.crc32, 16), v.name);
    for (const [count, want] of Object.entries(v.partitions)) {
      assert.equal(partitionOf(v.name, Number(count)), want, `${v.name} among ${count}`);
      checked++;
    }
  }
  assert.ok(checked >= 40, `only ${checked} partitions checked`);
});

test("the CRC-32 is zlib's", () => {
  assert.equal(crc32(Buffer.from('123456789')), 0xcbf43926);
  assert.equal(crc32(new Uint8Array(0)), 0);
  assert.equal(crc32(Buffer.from('The quick brown fox jumps over the lazy dog')), 0x414fa339);
});

test('edges of the hash-tag rule the vectors leave out', () => {
  // One byte between the braces is a tag, a tag may end the name, and a } before the first {
  // closes nothing.
  const edges = { '{x}': 'x', 'x/{order-7}': 'order-7', 'a}b{c}': 'c' };
  for (const [name, tag] of Object.entries(edges)) assert.equal(tagOf(name), tag, name);
  // Bytes of UTF-8, not UTF-16 code units.
  assert.equal(nameHash('{é}/x'), crc32(Buffer.from([0xc3, 0xa9])));
  // Names that share a tag share a partition, whatever the count.
  for (let count = 1; count <= 256; count++) assert.equal(partitionOf('{o}/a', count), partitionOf('{o}/bb', count), `${count}`);
});

test('a count out of range, or a name that is not a string, is a TypeError', () => {
  for (const count of [0, -1, 257, 1.5, NaN, '3', undefined]) assert.throws(() => partitionOf('a', count), TypeError, String(count));
  assert.throws(() => partitionOf(undefined, 3), TypeError);
});

test("a hash tag's braces go percent-encoded in the path", async () => {
  const fake = await jsonStandIn(() => [200, '{"resource":"{order-7}/lock","released":true}']);
  const c = new Client(fake.url);
  await c.release({ resource: '{order-7}/lock', leaseId: '3f2c8a4e-9b1d-4c6e-8f7a-2d5b1e0c9a47' });
  assert.equal(fake.seen[0].url, '/v1/resources/%7Border-7%7D/lock/release');
  c.close();
  await fake.close();
});
