// A child process for the tests: node lock-child.mjs URL RESOURCE release|hold
// "release": lock, release, and return (the process must then exit by itself).
// "hold": lock and return (the renewals keep the process alive).

import { Client } from '../index.js';

const [url, resource, mode] = process.argv.slice(2);
const client = new Client(url);
const lock = await client.lock(resource, { ttlMs: 1500 });
if (mode === 'release') {
  await client.get(resource);
  await lock.release();
}
