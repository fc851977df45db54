// The dashboard with authorization on (--auth-tokens): without a token it shows the token
// prompt and nothing else; a read token shows the leases and no Break; an admin token
// breaks a lease after the dialog's confirmation, and its reason reaches the server's log.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Server, acquire, call, launch, listedResources, openPage, sleep, tempDir, removeTemp, tokensFile, until } from "./harness.mjs";

const TOKENS = {
  viewer: { secret: "v-" + "a".repeat(40), scopes: "read" },
  operator: { secret: "o-" + "b".repeat(40), scopes: "read,write,admin,metrics" },
  worker: { secret: "w-" + "c".repeat(40), scopes: "read,write" },
};

let server;
let browser;
let dir;

before(async () => {
  dir = tempDir("mutexd-browser-tokens-");
  server = await new Server({ args: ["--auth-tokens", tokensFile(dir, TOKENS)] }).start();
  browser = await launch();
  await acquire(server.url, "secret/plan", "planner", { token: TOKENS.worker.secret });
  await acquire(server.url, "jobs/stuck", "stuck-worker", { token: TOKENS.worker.secret });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (dir) removeTemp(dir);
});

async function signIn(page, secret) {
  await page.waitForSelector("#token-prompt:not([hidden])", { timeout: 5000 });
  await page.fill("#token-input", secret);
  await page.press("#token-input", "Enter");
  await page.waitForSelector('tr[data-resource="jobs/stuck"]', { timeout: 5000 });
}

const pageErrors = (rec) => rec.errors.filter((e) => e.startsWith("page error"));

describe("the dashboard with authorization on", () => {
  test("without a token, only the token prompt shows", async () => {
    const { context, page, rec } = await openPage(browser, server.url + "/ui/");
    try {
      await page.waitForSelector("#token-prompt:not([hidden])", { timeout: 5000 });
      await sleep(500);
      assert.equal(await page.isVisible("#app"), false, "the resources, detail and figures are hidden");
      assert.equal(await page.isVisible("#token-input"), true);
      const text = await page.innerText("body");
      for (const hidden of ["secret/plan", "planner", "jobs/stuck", "Break"])
        assert.ok(!text.includes(hidden), `"${hidden}" shows without a token:\n${text}`);
      assert.deepEqual(await listedResources(page), []);
      // Nothing but whoami was asked, and it was refused.
      const api = rec.requests.filter((r) => r.api).map((r) => new URL(r.url).pathname);
      assert.deepEqual([...new Set(api)], ["/v1/whoami"]);
      assert.deepEqual(pageErrors(rec), []);
    } finally {
      await context.close();
    }
  });

  test("a read token shows the leases and no Break button", async () => {
    const { context, page, rec } = await openPage(browser, server.url + "/ui/");
    try {
      await signIn(page, TOKENS.viewer.secret);
      assert.deepEqual((await listedResources(page)).sort(), ["jobs/stuck", "secret/plan"]);
      assert.match(await page.innerText("#whoami"), /viewer · read/);
      await page.click('tr[data-resource="jobs/stuck"] button[data-action="select"]');
      await page.waitForSelector('#detail-holders tr[data-owner="stuck-worker"]', { timeout: 5000 });
      await sleep(300);
      assert.equal(await page.$$eval('[data-action="break"]:not([hidden])', (b) => b.length), 0, "a Break button shows");
      assert.equal(await page.isVisible("#detail-break"), false);
      assert.deepEqual(pageErrors(rec), []);
    } finally {
      await context.close();
    }
  });

  test("an admin token breaks a lease after the dialog, with its reason", async () => {
    const { context, page, rec } = await openPage(browser, server.url + "/ui/");
    try {
      await signIn(page, TOKENS.operator.secret);
      const button = 'tr[data-resource="jobs/stuck"] button[data-action="break"]';
      await page.waitForSelector(button, { timeout: 2000 });
      await page.click(button);
      await page.waitForSelector("#break-dialog[open]", { timeout: 2000 });
      assert.match(await page.innerText("#break-what"), /the lease/);
      // Escape cancels: nothing is sent, the lease stays.
      await page.keyboard.press("Escape");
      await page.waitForSelector("#break-dialog", { state: "hidden", timeout: 2000 });
      assert.ok(!rec.requests.some((r) => r.method === "POST"), "a break was sent on Escape");
      assert.equal((await call(server.url, "GET", "/v1/resources/jobs/stuck", { token: TOKENS.viewer.secret })).body.state, "held");

      await page.click(button);
      await page.waitForSelector("#break-dialog[open]", { timeout: 2000 });
      const reason = "stuck since the deploy, ticket 4711";
      await page.fill("#break-reason", reason);
      await page.click("#break-confirm");
      await page.waitForSelector("#break-dialog", { state: "hidden", timeout: 2000 });
      await page.waitForSelector('tr[data-resource="jobs/stuck"]', { state: "detached", timeout: 2000 });
      assert.match(await page.innerText("#toast"), /Broke the leases of jobs\/stuck/);
      const r = await call(server.url, "GET", "/v1/resources/jobs/stuck", { token: TOKENS.viewer.secret });
      assert.equal(r.body.state, "free");
      // The other lease is untouched.
      assert.deepEqual(await listedResources(page), ["secret/plan"]);
      const logged = await until(() => server.lines.find((l) => /break requested/.test(l) && /resource=jobs\/stuck/.test(l)),
        { what: "the break's log line" });
      assert.ok(logged.includes(`reason="${reason}"`) || logged.includes(`reason=${reason}`), logged);
      assert.deepEqual(pageErrors(rec), []);
    } finally {
      await context.close();
    }
  });
});
