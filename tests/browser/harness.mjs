// What the browser tests share: real mutexd servers (and Azurite for a server group) on
// free loopback ports with temporary data folders, HTTP calls from Node as a client would
// make them, and Debian's Chromium, headless, driven by playwright-core, with a recorder
// of every request the page makes and every error it reports.
//
// MUTEXD_BIN chooses the server binary (default: build/mutexd); CHROMIUM the browser
// (default: /usr/bin/chromium). Nothing is downloaded: playwright-core brings no browser.
// Everything started here is stopped by the tests' after() hooks, and killed when the
// process exits in any other way.

import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const BIN = resolve(ROOT, process.env.MUTEXD_BIN || "build/mutexd");
export const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

// Sanitizer builds are several times slower: the bounds grow, the checks stay.
export const SLOW = /asan|tsan/.test(BIN) ? 3 : 1;

// Every child process and temporary folder not yet cleaned up: the exit hook below kills
// and removes what a failing test left.
const children = new Set();
const tempDirs = new Set();
const otherPids = new Set(); // Azurite, started by scripts/azurite.sh

process.on("exit", () => {
  for (const p of children) {
    try { process.kill(p.pid, "SIGKILL"); } catch { /* gone */ }
  }
  for (const pid of otherPids) {
    try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
  }
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));

export function tempDir(prefix) {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(d);
  return d;
}

export function removeTemp(d) {
  rmSync(d, { recursive: true, force: true });
  tempDirs.delete(d);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A TCP port nothing listens on now (for a server that must know its URL before it starts).
export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

// Waits for `fn()` to return a truthy value; returns it, or throws naming `what`.
export async function until(fn, { timeout = 5000, every = 50, what = "a condition" } = {}) {
  const end = Date.now() + timeout * SLOW;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${last})`);
    await sleep(every);
  }
}

// ---- mutexd ------------------------------------------------------------------------------

export class Server {
  // args: extra flags; listen: "127.0.0.1:PORT" (default: a port the server picks).
  constructor({ args = [], listen = "127.0.0.1:0", env = {} } = {}) {
    this.args = args;
    this.listen = listen;
    this.env = env;
    this.dir = tempDir("mutexd-browser-");
    this.lines = [];
    this.proc = null;
    this.url = null;
  }

  async start(timeout = 15000) {
    const cmd = ["--listen", this.listen, "--data-dir", join(this.dir, "data"), ...this.args];
    const proc = spawn(BIN, cmd, { env: { ...process.env, ...this.env }, stdio: ["ignore", "ignore", "pipe"] });
    this.proc = proc;
    children.add(proc);
    this.exited = new Promise((res) => proc.once("exit", (code, signal) => {
      children.delete(proc);
      res({ code, signal });
    }));
    let buf = "";
    const started = new Promise((res, rej) => {
      proc.stderr.setEncoding("utf8");
      proc.stderr.on("data", (chunk) => {
        buf += chunk;
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          this.lines.push(line);
          const m = /msg="started".* address=(\S+)/.exec(line);
          if (m) res(m[1]);
        }
      });
      this.exited.then(({ code, signal }) =>
        rej(new Error(`mutexd exited (${code ?? signal}) at start:\n${this.log()}`)));
      setTimeout(() => rej(new Error(`mutexd did not start within ${timeout} ms:\n${this.log()}`)),
        timeout * SLOW).unref();
    });
    const address = await started;
    this.url = this.url || `http://${address}`;
    return this;
  }

  log(n = 60) {
    return this.lines.slice(-n).join("\n");
  }

  alive() {
    return this.proc && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  // SIGTERM; the server must exit 0.
  async stop() {
    if (this.alive()) {
      this.proc.kill("SIGTERM");
      const t = setTimeout(() => this.proc.kill("SIGKILL"), 20000 * SLOW);
      const { code, signal } = await this.exited;
      clearTimeout(t);
      if (code !== 0) throw new Error(`mutexd exited ${code ?? signal}:\n${this.log()}`);
    }
    removeTemp(this.dir);
  }

  // SIGKILL, as a crash.
  async kill() {
    if (this.alive()) {
      this.proc.kill("SIGKILL");
      await this.exited;
    }
  }

  async cleanup() {
    await this.kill();
    removeTemp(this.dir);
  }
}

// Stops every server given, killing those that would not stop; the first error is thrown
// after all are down.
export async function stopAll(servers) {
  let first = null;
  for (const s of servers) {
    if (!s) continue;
    try {
      await s.stop();
    } catch (e) {
      first = first || e;
      await s.cleanup();
    }
  }
  if (first) throw first;
}

// A tokens file as --auth-tokens reads it: name sha256:<hex> scopes [prefix].
export function tokensFile(dir, tokens) {
  const path = join(dir, "tokens");
  const lines = Object.entries(tokens).map(([name, { secret, scopes, prefix }]) =>
    `${name} sha256:${createHash("sha256").update(secret).digest("hex")} ${scopes}`
    + (prefix ? " " + prefix : ""));
  writeFileSync(path, "# name hash scopes [prefix]\n" + lines.join("\n") + "\n");
  return path;
}

// ---- HTTP from Node, as a client -----------------------------------------------------------

export async function call(base, method, path, { body, token, timeout = 10000 } = {}) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (token) headers.Authorization = "Bearer " + token;
  const res = await fetch(base + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeout * SLOW),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, body: json, text, headers: res.headers };
}

// Acquires `resource` for `owner`; returns the lease (throws unless granted).
export async function acquire(base, resource, owner, opts = {}) {
  const { token, ...rest } = opts;
  const r = await call(base, "POST", `/v1/resources/${resource}/acquire`,
    { body: { owner, ttl_ms: 30000, ...rest }, token });
  if (r.status !== 200) throw new Error(`acquire ${resource} for ${owner}: ${r.status} ${r.text}`);
  return r.body;
}

export async function release(base, lease, { token } = {}) {
  const r = await call(base, "POST", `/v1/resources/${lease.resource}/release`,
    { body: { lease_id: lease.lease_id }, token });
  if (r.status !== 200) throw new Error(`release ${lease.resource}: ${r.status} ${r.text}`);
  return r.body;
}

// ---- Chromium ----------------------------------------------------------------------------

// A fresh headless Chromium (its own temporary profile): the flags keep it from reaching
// anything but the pages it is sent to; --no-sandbox lets it run as root in CI.
export async function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-dev-shm-usage"],
  });
}

// Opens `url` in a new context and records, from before the first request: every request of
// the context (the page's, and any popup's or worker's) with its URL, when it started and
// ended, its answer's status and whether it failed (no answer); the API requests (/v1/, /metrics) in flight at most at once and which they were
// (`peak`); the held ones (wait_ms) at most at once; the list's answers (`listAnswers`); the
// console's errors and the page's uncaught errors.
export async function openPage(browser, url, { viewport = { width: 1280, height: 800 } } = {}) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const rec = {
    requests: [], errors: [], consoleUrls: new Map(), inFlight: 0, maxInFlight: 0, peak: [], held: 0, maxHeld: 0, listAnswers: [],
    // Requests started within [from, to) of Date.now(), by path.
    // From now on, maxInFlight and maxHeld count from what is in flight now.
    resetMax() { this.maxInFlight = this.inFlight; this.maxHeld = this.held; this.peak = []; },
    startedBetween(from, to) {
      return this.requests.filter((r) => r.start >= from && r.start < to);
    },
  };
  const open = new Map();
  const all = new WeakMap(); // every request's record, answered or not
  // The page's own files load in parallel once; what stays open is its API calls.
  const isApi = (url) => /^\/(v1\/|metrics)/.test(new URL(url).pathname);
  context.on("request", (req) => {
    const r = { url: req.url(), method: req.method(), start: Date.now(), end: null, api: isApi(req.url()), status: null, failed: null };
    open.set(req, r);
    all.set(req, r);
    rec.requests.push(r);
    if (!r.api) return;
    r.held = /[?&]wait_ms=/.test(r.url);
    if (r.held) rec.maxHeld = Math.max(rec.maxHeld, ++rec.held);
    rec.inFlight++;
    if (rec.inFlight > rec.maxInFlight) {
      rec.maxInFlight = rec.inFlight;
      rec.peak = [...open.values()].filter((x) => x.api).map((x) => new URL(x.url).pathname);
    }
  });
  const done = (req) => {
    const r = open.get(req);
    if (!r) return;
    open.delete(req);
    r.end = Date.now();
    if (r.api) rec.inFlight--;
    if (r.held) rec.held--;
  };
  // Each answer of the list: its index and the resources it named.
  context.on("response", async (res) => {
    const r = all.get(res.request());
    if (r) r.status = res.status();
    if (new URL(res.url()).pathname !== "/v1/resources" || res.status() !== 200) return;
    try {
      const body = await res.json();
      rec.listAnswers.push({ at: Date.now(), index: body.index, resources: (body.resources || []).map((r) => r.resource) });
    } catch { /* the page went away */ }
  });
  context.on("requestfinished", done);
  context.on("requestfailed", (req) => {
    const r = all.get(req);
    if (r) r.failed = req.failure() ? req.failure().errorText : "failed";
    done(req);
  });
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const text = "console: " + m.text();
    rec.errors.push(text);
    rec.consoleUrls.set(text, m.location().url); // a failed load: the resource's URL
  });
  page.on("pageerror", (e) => rec.errors.push("page error: " + (e.stack || e.message)));
  await page.goto(url);
  return { context, page, rec };
}

// The resource names in the list, in order.
export async function listedResources(page) {
  return page.$$eval("#resource-rows tr[data-resource]", (rows) => rows.map((r) => r.dataset.resource));
}

// The holders a row of the list shows: [{owner, token, shared}].
export async function rowHolders(page, resource) {
  return page.$$eval(`#resource-rows tr[data-resource="${resource}"] [data-owner]`,
    (hs) => hs.map((h) => ({ owner: h.dataset.owner, token: Number(h.dataset.token), shared: h.dataset.shared === "true" })));
}

// ---- Azurite, for a server group ------------------------------------------------------------

export class Azurite {
  constructor() {
    this.dir = tempDir("mutexd-browser-azurite-");
    const script = join(ROOT, "scripts", "azurite.sh");
    this.script = script;
    run(script, ["install"]);
    run(script, ["start", this.dir]);
    this.pid = Number(readFileSync(join(this.dir, "pid"), "utf8"));
    otherPids.add(this.pid);
    this.connectionString = readFileSync(join(this.dir, "connection-string"), "utf8").trim();
  }

  stop() {
    run(this.script, ["stop", this.dir]);
    otherPids.delete(this.pid);
    removeTemp(this.dir);
  }
}

function run(cmd, args) {
  const r = spawnSync(cmd, args, { stdio: ["ignore", "ignore", "inherit"] });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status ?? r.signal})`);
}
