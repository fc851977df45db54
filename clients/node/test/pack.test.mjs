// The package as npm would publish it: `npm pack` makes the tarball, which holds what a user
// needs and nothing else; a scratch project installs it offline (it has no dependencies) and
// runs the README's example from there, on this Node, against a real server.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { repoRoot, startServer, tempDir } from '../test-support/harness.mjs';

const pkgDir = path.join(repoRoot, 'clients', 'node');
const pkg = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
const scratch = tempDir('mutexd-node-pack-');
after(() => rmSync(scratch, { recursive: true, force: true }));

// npm runs on the machine's own node, whichever node runs this test; its cache is the
// scratch folder's, and --offline keeps it off the network.
function npm(args, cwd) {
  const options = ['--offline', '--no-audit', '--no-fund', '--cache', path.join(scratch, 'cache')];
  return execFileSync('npm', [...args, ...options], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

let tarball;

test('npm pack: the sources, their types, the README and the LICENSE, nothing else', () => {
  assert.equal(pkg.private, undefined, 'publishable');
  assert.deepEqual(pkg.dependencies ?? {}, {}, 'no dependencies');
  const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', scratch], pkgDir));
  tarball = path.join(scratch, packed.filename);
  assert.equal(packed.filename, `${pkg.name}-${pkg.version}.tgz`);
  const sources = readdirSync(path.join(pkgDir, 'src')).filter((f) => f.endsWith('.js')).map((f) => `src/${f}`);
  const wanted = ['LICENSE', 'README.md', 'index.d.ts', 'index.js', 'package.json', ...sources];
  assert.deepEqual(packed.files.map((f) => f.path).sort(), wanted.sort());
  assert.equal(
    readFileSync(path.join(pkgDir, 'LICENSE'), 'utf8'),
    readFileSync(path.join(repoRoot, 'LICENSE'), 'utf8'),
    "the package's LICENSE is the repository's",
  );
});

test("installed from the tarball, the README's example runs against a server", async () => {
  assert.ok(tarball, 'packed by the test before');
  const app = path.join(scratch, 'app');
  mkdirSync(app);
  writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  npm(['install', tarball], app);
  const readme = readFileSync(path.join(pkgDir, 'README.md'), 'utf8');
  const example = /```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(example, 'a js block in the README');
  writeFileSync(path.join(app, 'example.mjs'), example[1]);
  const server = await startServer();
  try {
    const out = execFileSync(process.execPath, ['example.mjs'], {
      cwd: app,
      env: { ...process.env, MUTEXD_URL: server.url },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.match(out, /^step 1 done, fencing token \d+\nstep 2 done.*\nstep 3 done.*\n$/);
    // The package came from the tarball, not from the checkout.
    const installed = path.join(app, 'node_modules', pkg.name);
    assert.equal(JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8')).version, pkg.version);
    assert.deepEqual(readdirSync(installed).sort(), ['LICENSE', 'README.md', 'index.d.ts', 'index.js', 'package.json', 'src']);
  } finally {
    assert.deepEqual(await server.stop(), { code: 0, signal: null });
  }
});
