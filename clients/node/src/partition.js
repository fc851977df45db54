// The partition of a resource name (docs/api.md, "Partitions"): the CRC-32 (IEEE, zlib's) of
// the name's UTF-8 bytes, or of its hash tag only, modulo the partition count. The CRC-32 is
// computed here: zlib.crc32 is in Node.js 20.15 and 22.2, not in the 18 this client supports.

/** The largest partition count the contract allows. */
const PARTITIONS_MAX = 256;

// The CRC-32 of each byte value: the reflected IEEE polynomial, as zlib's table.
const TABLE = new Uint32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  TABLE[n] = c >>> 0;
}

/** The CRC-32 of `bytes` (a Uint8Array), as zlib.crc32 computes it: an unsigned 32-bit number. */
export function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/**
 * The bytes of `name` (a Uint8Array) that are hashed, by Redis Cluster's rule: those between
 * the first `{` and the first `}` after it, when there is at least one; else all of them.
 */
export function hashTag(name) {
  const start = name.indexOf(0x7b) + 1;
  if (start > 0) {
    const end = name.indexOf(0x7d, start);
    if (end > start) return name.subarray(start, end);
  }
  return name;
}

/** The CRC-32 of what hashTag() picks of the name's UTF-8 bytes. */
export function nameHash(name) {
  return crc32(hashTag(Buffer.from(name, 'utf8')));
}

/**
 * The partition of the resource `name` among `count` partitions (1 to 256): 0 to count - 1,
 * as the server computes it. Names that share a hash tag (`{order-7}/lock`,
 * `{order-7}/stock`) share a partition, whatever the count.
 */
export function partitionOf(name, count) {
  if (typeof name !== 'string') throw new TypeError('the name must be a string');
  if (!(Number.isInteger(count) && count >= 1 && count <= PARTITIONS_MAX)) {
    throw new TypeError(`count must be an integer from 1 to ${PARTITIONS_MAX}`);
  }
  return nameHash(name) % count;
}
