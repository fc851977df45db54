// The mutexd dashboard (docs/dashboard.md). Three held requests keep it live, never one per
// resource: the list watch (GET /v1/resources?index=&wait_ms=), the chosen resource's watch
// (GET /v1/resources/{r}?index=&wait_ms=) and its event feed (GET /v1/events?after=&wait_ms=).
// The figures (/metrics) and the server group (/v1/servers) refresh on a slow timer. A
// server without the list watch or the events is shown what it has, with a note. On a
// partitioned group the list's index and the events' next are positions (strings, one index
// per partition): they are passed back as they came, never read as numbers.

import { Api, Backoff, NetworkError, Unauthorized, messageOf, reasonOf, resourcePath, sleep, enc } from "./api.js";
import { parseProm, figures } from "./prom.js";
import { el, fmtAgo, fmtClock, fmtDuration, fmtLeft, fmtNumber, fmtRanges, kindOf } from "./format.js";

const $ = (id) => document.getElementById(id);
const PAGE_SIZE = 50;          // rows a page of the list shows
const HOLDERS_IN_ROW = 5;      // holders a row shows before "+N more"
const WAIT_MS = 25000;         // how long a watch is held by the server
const HELD_TIMEOUT_MS = WAIT_MS + 10000;
const LIST_PAGES_MAX = 10;     // 10 x 1000 resources at most
const COALESCE_MS = 250;       // after a change, gather others before reading again
const FALLBACK_MS = 5000;      // a server without the list watch: read this often
const SLOW_MS = 5000;          // figures and the server group
const EVENTS_KEPT = 200;
const TAKEOVER = new Set(["no_active_server", "fenced", "ownership_unconfirmed", "active_lost"]);

const api = new Api();
const state = {
  name: null, scopes: null, admin: false,
  prefix: "", page: 0,
  resources: [], listIndex: null, listWatch: null, listCapped: false, listError: null,
  selected: null, detail: null, detailError: null, detailPartition: null,
  events: [], eventsNext: null, eventsGap: false,
  down: null, unavailable: null, switched: null, alone: false, generation: null, owners: null,
  prevMetrics: null, prevMetricsAt: 0, commitMs: null,
};
const loops = {};
let slowTimer = null;

class Retry extends Error {
  constructor(ms) { super("retry"); this.ms = ms; }
}

// ---- loops: one held request at a time each; backoff on failure ---------------------------

// Runs `round(signal)` until stopped: it returns the ms to wait before the next round, or
// null to stop. A network failure shows the banner and backs off.
function start(name, round) {
  stop(name);
  const ctl = new AbortController();
  loops[name] = ctl;
  const backoff = new Backoff();
  (async () => {
    while (!ctl.signal.aborted) {
      let wait;
      try {
        wait = await round(ctl.signal);
        backoff.reset();
        if (wait === null) return;
      } catch (e) {
        if (ctl.signal.aborted || e.name === "AbortError" || e instanceof Unauthorized) return;
        wait = e instanceof Retry && e.ms ? e.ms : backoff.delay();
        if (e instanceof NetworkError) setDown(e.message, wait);
        else if (!(e instanceof Retry)) console.error(e);
      }
      if (wait > 0) await sleep(wait, ctl.signal).catch(() => {});
    }
  })();
}

function stop(name) {
  if (loops[name]) loops[name].abort();
  delete loops[name];
}

function stopAll() {
  for (const name of Object.keys(loops)) stop(name);
  clearInterval(slowTimer);
  slowTimer = null;
}

// ---- server state: unreachable, takeover, which server answers ---------------------------

function setDown(why, retryMs) {
  state.down = { why, retryAt: Date.now() + retryMs };
  renderBanner();
}

api.onReachable = () => {
  if (state.down) { state.down = null; renderBanner(); }
};
api.onUnavailable = (reason, retryMs) => {
  state.unavailable = { reason, at: Date.now(), retryMs };
  renderBanner();
};
api.onAvailable = () => {
  if (state.unavailable) { state.unavailable = null; renderBanner(); }
};
api.onServedBy = (url, before) => {
  $("served-by").hidden = false;
  $("served-by").textContent = "served by " + url;
  if (state.alone) { state.alone = false; refreshServers(); } // restarted into a group
  if (before) {
    state.switched = { url, before, at: Date.now() };
    renderBanner();
    refreshServers();
  }
};
api.onUnauthorized = (hadToken) => showPrompt(hadToken ? "That token was not accepted." : "");

function renderBanner() {
  const b = $("banner");
  const conn = $("conn");
  let kind = null, text = "";
  if (state.down) {
    const secs = Math.max(0, Math.ceil((state.down.retryAt - Date.now()) / 1000));
    kind = "down";
    text = `Cannot reach the server (${state.down.why}). Retrying` + (secs ? ` in ${secs} s…` : "…");
  } else if (state.unavailable) {
    const r = state.unavailable.reason;
    kind = "takeover";
    text = TAKEOVER.has(r)
      ? `A takeover is in progress in the server group (${r}): waiting for the new active server…`
      : `The server is unavailable: ${r}. Retrying…`;
  } else if (state.switched && Date.now() - state.switched.at < 20000) {
    kind = "info";
    text = `The active server changed: now ${state.switched.url} (was ${state.switched.before}).`;
  }
  b.hidden = !kind;
  b.dataset.kind = kind || "";
  b.textContent = text;
  conn.dataset.state = state.down ? "down" : state.unavailable ? "takeover"
    : state.listWatch === false ? "degraded" : state.listWatch ? "live" : "connecting";
  conn.textContent = state.down ? "Unreachable" : state.unavailable ? "Takeover"
    : state.listWatch === false ? `Refreshing every ${FALLBACK_MS / 1000} s`
    : state.listWatch ? "Live" : "Connecting…";
}

function note(key, text) {
  const list = $("notes");
  let li = list.querySelector(`[data-note="${key}"]`);
  if (!text) { if (li) li.remove(); return; }
  if (!li) { li = el("li", { dataset: { note: key } }); list.append(li); }
  li.textContent = text;
}

function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 5000);
}

// ---- the token prompt --------------------------------------------------------------------

function showPrompt(error) {
  stopAll();
  $("app").hidden = true;
  $("banner").hidden = true;
  $("notes").replaceChildren();
  $("sign-out").hidden = true;
  $("whoami").textContent = "";
  $("conn").textContent = "Token needed";
  $("conn").dataset.state = "connecting";
  $("token-prompt").hidden = false;
  $("token-error").hidden = !error;
  $("token-error").textContent = error || "";
  api.setToken("");
  $("token-input").value = "";
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  api.setToken(token);
  $("token-prompt").hidden = true;
  boot();
});

$("sign-out").addEventListener("click", () => {
  api.setToken("");
  stopAll();
  boot();
});

// ---- start ------------------------------------------------------------------------------

async function boot() {
  readHash();
  const backoff = new Backoff();
  let who;
  for (;;) {
    try {
      who = await api.request("/v1/whoami");
      if (who.status !== 503) break; // a takeover: ask again, the banner says why
      await sleep(backoff.delay());
    } catch (e) {
      if (e instanceof Unauthorized) return; // the prompt is up
      const d = backoff.delay();
      setDown(e.message, d);
      await sleep(d);
    }
  }
  if (who.status === 200 && who.body && Array.isArray(who.body.scopes)) {
    state.name = who.body.name;
    state.scopes = who.body.scopes;
    note("whoami", "");
  } else {
    state.name = null;
    state.scopes = null;
    note("whoami", who.status === 404
      ? "This server does not say what a token may do (no GET /v1/whoami): the page stays read-only."
      : `GET /v1/whoami: ${messageOf(who)}. The page stays read-only.`);
  }
  state.admin = Boolean(state.scopes && state.scopes.includes("admin"));
  renderWho();
  $("token-prompt").hidden = true;
  $("app").hidden = false;
  startList();
  if (state.selected) select(state.selected, false);
  else renderDetail();
  refreshSlow();
  clearInterval(slowTimer);
  slowTimer = setInterval(() => {
    if (!document.hidden) refreshSlow();
    renderBanner(); // the retry countdown
  }, SLOW_MS);
}

function renderWho() {
  const w = $("whoami");
  if (!state.scopes) w.textContent = api.token ? "token set" : "";
  else if (state.name === null && !api.token) w.textContent = "authorization off";
  else w.textContent = `${state.name || "token"} · ${state.scopes.join(", ") || "no scopes"}`;
  w.title = state.admin ? "This token may break leases (admin)" : "Read-only";
  $("sign-out").hidden = !api.token;
}

// ---- the list of resources ---------------------------------------------------------------

function listBase() {
  return "/v1/resources?limit=1000" + (state.prefix ? "&prefix=" + enc(state.prefix) : "");
}

// Every holder gets a deadline on this page's clock: performance.now() at the answer plus
// its expires_in_ms. The countdown runs from it, never from the server's wall clock.
function stamp(resources, at) {
  for (const r of resources)
    for (const h of r.holders || (r.holder ? [r.holder] : [])) h.deadline = at + h.expires_in_ms;
}

async function listRound(signal) {
  const watching = state.listWatch === true && state.listIndex !== null;
  const first = await api.request(
    listBase() + (watching ? `&index=${enc(state.listIndex)}&wait_ms=${WAIT_MS}` : ""),
    { signal, timeoutMs: watching ? HELD_TIMEOUT_MS : 15000 });
  if (first.status === 400 && watching) {
    state.listWatch = false; // a server from before the list watch
    note("list-watch", "This server has no list watch (GET /v1/resources?index=): the list "
      + `is read again every ${FALLBACK_MS / 1000} s instead of at once.`);
    renderBanner();
    return 0;
  }
  if (first.status === 503) throw new Retry(state.unavailable && state.unavailable.retryMs);
  if (first.status !== 200) {
    state.listError = messageOf(first);
    renderList();
    return null; // a bad prefix, or one the token may not list: wait for a new filter
  }
  let items = first.body.resources || [];
  let cursor = first.body.next_cursor;
  for (let pages = 1; cursor && pages < LIST_PAGES_MAX; pages++) {
    const more = await api.request(listBase() + "&cursor=" + enc(cursor), { signal });
    if (more.status !== 200) throw new Retry(1000);
    items = items.concat(more.body.resources || []);
    cursor = more.body.next_cursor;
  }
  stamp(items, performance.now());
  state.resources = items;
  state.listCapped = Boolean(cursor);
  state.listError = null;
  // A number on one server or a group of one partition, a position (a string) on a
  // partitioned group: either is the index of the next watch.
  const index = first.body.index;
  if (typeof index === "number" || typeof index === "string") {
    state.listIndex = index;
    if (state.listWatch === null) state.listWatch = true;
  } else if (state.listWatch !== false) {
    state.listWatch = false;
    note("list-watch", "This server's list has no index (no list watch): the list is read "
      + `again every ${FALLBACK_MS / 1000} s instead of at once.`);
  }
  renderBanner();
  renderList();
  return state.listWatch ? COALESCE_MS : FALLBACK_MS;
}

function startList() {
  state.listIndex = null;
  start("list", listRound);
}

function holderLine(h, limit, resource) {
  const left = el("span", { class: "left", dataset: { deadline: h.deadline, ttl: h.ttl_ms } },
    fmtLeft(h.deadline - performance.now()));
  const bar = el("span", { class: "ttlbar", "aria-hidden": "true" }, el("span"));
  const kind = kindOf(h, limit);
  return el("div", {
    class: "holder",
    dataset: { owner: h.owner, token: h.fencing_token, shared: h.shared ? "true" : "false", resource },
  },
  el("span", { class: "owner", title: h.owner }, h.owner),
  el("span", { class: "token", title: "fencing token" }, "#" + h.fencing_token),
  el("span", { class: "badge " + (kind === "shared" ? "shared" : "free") }, kind === "exclusive" ? "excl." : kind === "semaphore" ? "sem." : "shared"),
  el("span", {}, left, bar));
}

function stateBadge(r) {
  const n = (r.holders || []).length;
  if (r.state !== "held" || n === 0) return el("span", { class: "badge free" }, "free");
  if (r.limit > 1) return el("span", { class: "badge held" }, `${n}/${r.limit} held`);
  if (r.holders.every((h) => h.shared)) return el("span", { class: "badge shared" }, `shared ×${n}`);
  return el("span", { class: "badge held" }, "held");
}

function breakButton(r, id) {
  return el("button", {
    type: "button", class: "danger", id,
    dataset: { action: "break", resource: r.resource, holders: (r.holders || []).length },
    "aria-label": `Break every lease of ${r.resource}`,
  }, "Break");
}

function renderList() {
  const rows = $("resource-rows");
  const all = state.resources;
  const pages = Math.max(1, Math.ceil(all.length / PAGE_SIZE));
  state.page = Math.min(state.page, pages - 1);
  const slice = all.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE);
  // Keep the focus where it was across the rebuild: same resource, same control.
  const f = document.activeElement;
  const tr = f && f.closest ? f.closest("tr[data-resource]") : null;
  const keep = tr && rows.contains(tr) ? { resource: tr.dataset.resource, action: f.dataset.action } : null;

  rows.replaceChildren(...slice.map((r) => {
    const holders = r.holders || [];
    const shown = holders.slice(0, HOLDERS_IN_ROW).map((h) => holderLine(h, r.limit, r.resource));
    if (holders.length > HOLDERS_IN_ROW)
      shown.push(el("button", { type: "button", class: "link more", dataset: { action: "select" } },
        `+${holders.length - HOLDERS_IN_ROW} more`));
    return el("tr", {
      dataset: { resource: r.resource, state: r.state, holders: holders.length },
      "aria-selected": r.resource === state.selected ? "true" : "false",
    },
    el("td", {}, el("button", { type: "button", class: "link", dataset: { action: "select" } }, r.resource)),
    el("td", {}, stateBadge(r)),
    el("td", {}, el("div", { class: "holders" }, ...shown)),
    el("td", { class: "num" }, fmtNumber(r.waiters)),
    el("td", { class: "num" }, fmtNumber(r.limit || 1)),
    el("td", { class: "num" }, state.admin && holders.length ? breakButton(r) : ""));
  }));
  if (keep) {
    const row = [...rows.children].find((x) => x.dataset.resource === keep.resource);
    const target = row && (row.querySelector(`[data-action="${keep.action}"]`) || row.querySelector("button"));
    if (target) target.focus();
  }
  const empty = $("list-empty");
  empty.hidden = all.length > 0 && !state.listError;
  empty.textContent = state.listError ? state.listError
    : state.prefix ? `No resource under "${state.prefix}" is held.` : "No resource is held.";
  $("list-count").textContent = state.listError ? "" : `${fmtNumber(all.length)} held`
    + (state.listCapped ? ` (the first ${fmtNumber(all.length)} only)` : "");
  $("page-info").textContent = all.length ? `${state.page * PAGE_SIZE + 1}–${state.page * PAGE_SIZE + slice.length} of ${fmtNumber(all.length)}` : "";
  $("page-prev").disabled = state.page === 0;
  $("page-next").disabled = state.page >= pages - 1;
  tick();
}

$("resource-rows").addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-action]");
  if (!b) return;
  const tr = b.closest("tr[data-resource]");
  if (b.dataset.action === "select") select(tr.dataset.resource, true);
  else if (b.dataset.action === "break") openBreak(tr.dataset.resource, Number(b.dataset.holders), b);
});
$("page-prev").addEventListener("click", () => { state.page--; renderList(); });
$("page-next").addEventListener("click", () => { state.page++; renderList(); });

let filterTimer = null;
$("filter").addEventListener("input", () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    const p = $("filter").value.trim();
    if (p === state.prefix) return;
    state.prefix = p;
    state.page = 0;
    writeHash();
    startList();
  }, 300);
});

// ---- one resource: its watch and its events ----------------------------------------------

function select(name, focusDetail) {
  state.selected = name;
  state.detail = null;
  state.detailError = null;
  state.detailPartition = null;
  state.events = [];
  state.eventsNext = null;
  state.eventsGap = false;
  writeHash();
  for (const tr of $("resource-rows").children)
    tr.setAttribute("aria-selected", tr.dataset.resource === name ? "true" : "false");
  renderDetail();
  renderEvents();
  start("detail", detailRound);
  start("events", eventsRound);
  if (focusDetail && window.matchMedia("(max-width: 980px)").matches) $("detail").focus();
}

async function detailRound(signal) {
  const name = state.selected;
  const d = state.detail;
  const watch = d && typeof d.index === "number";
  const res = await api.request(`/v1/resources/${resourcePath(name)}`
    + (watch ? `?index=${d.index}&wait_ms=${WAIT_MS}` : ""),
  { signal, timeoutMs: watch ? HELD_TIMEOUT_MS : 15000 });
  if (res.status === 503) throw new Retry(state.unavailable && state.unavailable.retryMs);
  if (res.status !== 200) {
    state.detailError = messageOf(res);
    renderDetail();
    return null;
  }
  stamp([res.body], performance.now());
  state.detail = res.body;
  // A partitioned group names the resource's partition and the server that owns it; one
  // that is not the owner the map shows has moved: the map is read again.
  const partition = res.headers.get("Mutexd-Partition");
  const owner = res.headers.get("Mutexd-Served-By");
  state.detailPartition = partition === null ? null : { partition: Number(partition), owner };
  if (partition !== null && owner && state.owners && state.owners.get(Number(partition)) !== owner)
    refreshServers();
  state.detailError = null;
  renderDetail();
  return 0;
}

function renderDetail() {
  const d = state.detail;
  $("detail-empty").hidden = Boolean(state.selected);
  $("detail-body").hidden = !state.selected;
  $("detail-title").textContent = state.selected || "Resource";
  $("detail").dataset.resource = state.selected || "";
  const holders = (d && d.holders) || [];
  const br = $("detail-break");
  br.hidden = !(state.admin && holders.length);
  br.dataset.resource = state.selected || "";
  br.dataset.holders = holders.length;
  if (!state.selected) return;
  const facts = [];
  const fact = (k, v) => facts.push(el("dt", {}, k), el("dd", {}, v));
  if (state.detailError) fact("Error", state.detailError);
  else if (!d) fact("State", "loading…");
  else {
    fact("State", stateBadge(d));
    fact("Limit", d.limit > 1 ? `${d.limit} (a semaphore)` : "1");
    fact("Waiters", fmtNumber(d.waiters));
    fact("Change index", fmtNumber(d.index));
    const p = state.detailPartition;
    if (p) fact("Partition", el("span", { dataset: { partition: p.partition } }, String(p.partition),
      p.owner ? el("span", { class: "muted" }, " · served by ", el("span", { class: "mono" }, p.owner)) : ""));
  }
  $("detail-facts").replaceChildren(...facts);
  $("detail-holders").replaceChildren(...(holders.length ? holders.map((h) => {
    const left = el("span", { class: "left", dataset: { deadline: h.deadline, ttl: h.ttl_ms } },
      fmtLeft(h.deadline - performance.now()));
    return el("tr", { dataset: { owner: h.owner, token: h.fencing_token, shared: h.shared ? "true" : "false" } },
      el("td", { class: "mono", title: h.metadata ? JSON.stringify(h.metadata) : undefined }, h.owner),
      el("td", { class: "num token" }, "#" + h.fencing_token),
      el("td", {}, kindOf(h, d.limit)),
      el("td", { class: "num" }, left, el("span", { class: "ttlbar", "aria-hidden": "true" }, el("span"))),
      el("td", { class: "muted", title: h.renewed_at }, fmtAgo(h.renewed_at)));
  }) : [el("tr", {}, el("td", { colspan: 5, class: "muted" }, d ? "No holder: the resource is free." : "…"))]));
  tick();
}

$("detail-break").addEventListener("click", (ev) => {
  const b = ev.currentTarget;
  openBreak(b.dataset.resource, Number(b.dataset.holders), b);
});

async function eventsRound(signal) {
  const name = state.selected;
  const after = state.eventsNext;
  const res = await api.request(`/v1/events?prefix=${enc(name)}&limit=100`
    + (after !== null ? `&after=${enc(after)}&wait_ms=${WAIT_MS}` : ""),
  { signal, timeoutMs: after !== null ? HELD_TIMEOUT_MS : 15000 });
  if (res.status === 404 || res.status === 400) {
    $("events-note").hidden = false;
    $("events-note").textContent = res.status === 404
      ? "This server keeps no event feed (GET /v1/events), or has it turned off (--event-history 0)."
      : `The event feed refused the request: ${messageOf(res)}`;
    return null;
  }
  if (res.status === 503) throw new Retry(state.unavailable && state.unavailable.retryMs);
  if (res.status !== 200) {
    $("events-note").hidden = false;
    $("events-note").textContent = `Events: ${messageOf(res)}`;
    return null;
  }
  $("events-note").hidden = true;
  const list = (res.body.events || []).filter((e) => e.resource === name); // a prefix matches more
  if (res.body.truncated && after !== null) state.eventsGap = true;
  state.events = state.events.concat(list).slice(-EVENTS_KEPT);
  // `next` covers the events the prefix matched beyond this resource too. On a partitioned
  // group it is a position, and an event's index is only its partition's: the last index
  // seen is the way on only for a server whose answer has no `next`.
  const next = res.body.next;
  const last = list.length ? list[list.length - 1].index : after;
  state.eventsNext = typeof next === "number" || typeof next === "string" ? next : (last || 0);
  renderEvents();
  return 0;
}

function renderEvents() {
  const items = state.events.slice().reverse().map((e) => el("li", {
    dataset: { index: e.index, partition: e.partition ?? "", type: e.type, owner: e.owner || "", token: e.fencing_token ?? "" },
    title: typeof e.partition === "number" ? `partition ${e.partition}` : undefined,
  },
  el("time", { datetime: e.at, title: e.at }, fmtClock(e.at)),
  el("span", { class: "ev-type", dataset: { type: e.type } }, e.type),
  el("span", { class: "mono owner" }, e.owner || "—",
    e.shared ? el("span", { class: "muted" }, " · shared") : "",
    e.limit > 1 ? el("span", { class: "muted" }, ` · limit ${e.limit}`) : ""),
  el("span", { class: "token num" }, e.fencing_token !== undefined && e.fencing_token !== null ? "#" + e.fencing_token : "")));
  if (state.eventsGap) items.push(el("li", { class: "muted" }, "Older events were dropped by the server."));
  if (!items.length && state.eventsNext !== null) items.push(el("li", { class: "muted" }, "No recent event."));
  $("events").replaceChildren(...items);
}

// ---- break -------------------------------------------------------------------------------

let breakFrom = null;

function openBreak(resource, holders, from) {
  breakFrom = from;
  const d = $("break-dialog");
  d.dataset.resource = resource;
  $("break-title").textContent = `Break ${resource}?`;
  $("break-what").replaceChildren(
    "This ends ", el("strong", {}, holders === 1 ? "the lease" : `all ${holders} leases`),
    " of ", el("code", {}, resource), " at once, whoever holds ", holders === 1 ? "it" : "them",
    ". The next waiters are granted; a holder finds out at its next renewal (lease_lost).");
  $("break-reason").value = "";
  $("break-error").hidden = true;
  $("break-confirm").disabled = false;
  d.showModal();
  $("break-reason").focus();
}

$("break-cancel").addEventListener("click", () => $("break-dialog").close());
$("break-dialog").addEventListener("close", () => {
  if (breakFrom && breakFrom.isConnected) breakFrom.focus();
  breakFrom = null;
});
$("break-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const d = $("break-dialog");
  const resource = d.dataset.resource;
  const reason = $("break-reason").value.trim();
  if (!reason) { $("break-reason").focus(); return; }
  $("break-confirm").disabled = true;
  let res;
  try {
    res = await api.request(`/v1/resources/${resourcePath(resource)}/break`,
      { method: "POST", body: { reason } });
  } catch (e) {
    if (e instanceof Unauthorized) { d.close(); return; }
    res = null;
    $("break-error").textContent = `Not sent: ${e.message}`;
  }
  if (res && res.status === 200) {
    d.close();
    toast(res.body.broken ? `Broke the leases of ${resource}.` : `${resource} had no lease to break.`);
    return;
  }
  if (res) $("break-error").textContent = res.status === 403
    ? `This token may not break leases: ${messageOf(res)}` : messageOf(res);
  $("break-error").hidden = false;
  $("break-confirm").disabled = false;
});

// ---- figures and the server group (slow timer) -------------------------------------------

// A server that said it is in no group (404) is not asked again: it joins none without a
// restart, and a server of a group names its active in every answer (Mutexd-Served-By).
function refreshSlow() {
  refreshFigures();
  if (!state.alone) refreshServers();
}

async function refreshFigures() {
  let res;
  try {
    res = await api.request("/metrics", { timeoutMs: 10000 });
  } catch (e) {
    return; // the list's loop says when the server is down
  }
  const n = $("figures-note");
  if (res.status !== 200 || typeof res.body !== "string") {
    n.hidden = false;
    n.textContent = res.status === 403 ? "This token lacks the metrics scope." : `/metrics: ${messageOf(res)}`;
    return;
  }
  n.hidden = true;
  const now = performance.now();
  const cur = parseProm(res.body);
  const f = figures(cur, state.prevMetrics, (now - state.prevMetricsAt) / 1000);
  state.prevMetrics = cur;
  state.prevMetricsAt = now;
  if (f.commitMs !== null) state.commitMs = f.commitMs; // no commit since: the last one seen
  $("fig-leases").textContent = fmtNumber(f.leases);
  $("fig-waiters").textContent = fmtNumber(f.waiters);
  $("fig-grants").textContent = f.grantsPerSecond === null ? "—" : fmtNumber(f.grantsPerSecond, f.grantsPerSecond < 10 ? 1 : 0);
  $("fig-commit").textContent = state.commitMs === null ? "—" : `${fmtNumber(state.commitMs, state.commitMs < 10 ? 2 : 1)} ms`;
  $("figures-when").textContent = `at ${new Date().toLocaleTimeString()}`;
}

async function refreshServers() {
  let res;
  try {
    res = await api.request("/v1/servers", { timeoutMs: 10000 });
  } catch (e) {
    return;
  }
  const note2 = $("servers-note");
  const table = $("servers-table");
  if (res.status === 200 && res.body && res.body.self && res.body.self.role === "alone") {
    state.alone = true;
    note2.hidden = false;
    note2.textContent = "Not in a server group: this server runs alone (without --ha).";
    table.hidden = true;
    $("group-facts").replaceChildren();
    return;
  }
  if (res.status !== 200) {
    note2.hidden = false;
    note2.textContent = res.status === 503 ? `The group cannot be described now (${reasonOf(res.body)}).` : messageOf(res);
    return;
  }
  state.alone = false;
  note2.hidden = true;
  const g = res.body;
  // A standby answers this itself, without Mutexd-Served-By: after a takeover its answer may
  // be the first to name the new active (the held watches say so only when they end). Only
  // a newer generation counts, so a standby that has not seen the takeover yet changes nothing.
  if (g.active && (state.generation === null || g.active.generation > state.generation)) {
    state.generation = g.active.generation;
    api.noteServedBy(g.active.url);
  }
  // A partitioned group has no one active: each partition has its owner, and each server
  // its share. A group of one partition, or a server alone, shows none of this.
  const parts = g.partitions && g.partitions.count > 1 ? g.partitions : null;
  const owners = parts ? parts.owners || [] : [];
  state.owners = parts ? new Map(owners.map((o) => [o.partition, o.url])) : null;
  const facts = [];
  const fact = (k, v) => facts.push(el("dt", {}, k), el("dd", {}, v));
  const share = (s) => (s && Array.isArray(s.partitions) ? s.partitions : []);
  fact("This server", el("span", {}, el("span", { class: "mono" }, g.self ? g.self.url : "—"),
    g.self ? ` (${g.self.role})` : "",
    parts && g.self ? ` · owns ${fmtNumber(share(g.self).length)} of ${fmtNumber(parts.count)}` : ""));
  if (parts) {
    const orphans = owners.filter((o) => !o.url).length;
    fact("Partitions", el("span", { id: "partition-count", dataset: { count: parts.count } },
      `${fmtNumber(parts.count)} over ${fmtNumber((g.servers || []).length)} servers`,
      orphans ? el("span", {}, " ", el("span", { class: "badge warn" }, `${fmtNumber(orphans)} without an owner: a takeover is in progress`)) : ""));
  } else if (g.active) {
    fact("Active", el("span", { class: "mono role-active" }, g.active.url));
    fact("Generation", fmtNumber(g.active.generation));
    fact("Since", el("span", { title: g.active.since }, `${fmtClock(g.active.since)} (${fmtAgo(g.active.since)})`));
  } else {
    fact("Active", el("span", { class: "badge warn" }, "none: a takeover is in progress"));
  }
  $("group-facts").replaceChildren(...facts);
  table.hidden = false;
  $("share-head").hidden = !parts;
  $("server-rows").replaceChildren(...(g.servers || []).map((s) => {
    const active = g.active && s.url === g.active.url;
    const mine = share(s);
    const dataset = { server: s.url, role: s.role };
    if (parts) dataset.partitions = mine.join(",");
    return el("tr", { dataset },
      el("td", { class: "mono" + (active ? " role-active" : "") }, s.url, g.self && s.url === g.self.url ? el("span", { class: "muted" }, " (this)") : ""),
      el("td", {}, s.role),
      el("td", { class: "num" }, active || s.lag_changes === undefined || s.lag_changes === null ? "—"
        : `${fmtNumber(s.lag_changes)} ch · ${fmtDuration(s.lag_ms || 0)}`),
      el("td", { class: "muted", title: s.seen_at || "" }, s.seen_at ? fmtAgo(s.seen_at) : "—"),
      parts ? el("td", { class: "share", dataset: { count: mine.length } }, fmtNumber(mine.length),
        mine.length ? el("span", { class: "mono" }, `: ${fmtRanges(mine)}`) : "") : null);
  }));
  $("partition-map").hidden = !parts;
  $("partition-rows").replaceChildren(...owners.map((o) => el("tr", {
    dataset: { partition: o.partition, owner: o.url || "", generation: o.generation ?? "" },
  },
  el("td", { class: "num" }, String(o.partition)),
  o.url ? el("td", { class: "mono" }, o.url, g.self && o.url === g.self.url ? el("span", { class: "muted" }, " (this)") : "")
    : el("td", {}, el("span", { class: "badge warn" }, "none: a takeover is in progress")),
  el("td", { class: "num" }, o.generation === undefined || o.generation === null ? "—" : fmtNumber(o.generation)),
  el("td", { class: "muted", title: o.since || "" }, o.since ? fmtAgo(o.since) : "—"))));
}

// ---- the countdowns: 10 times a second, text and bar, nothing else moves ------------------

function tick() {
  const now = performance.now();
  for (const e of document.querySelectorAll(".left[data-deadline]")) {
    const left = Number(e.dataset.deadline) - now;
    const ttl = Number(e.dataset.ttl) || 1;
    const text = fmtLeft(left);
    if (e.textContent !== text) e.textContent = text;
    e.classList.toggle("gone", left <= 0);
    e.classList.toggle("low", left > 0 && (left < 3000 || left < ttl * 0.2));
    const bar = e.nextElementSibling && e.nextElementSibling.firstElementChild;
    if (bar) bar.style.transform = `scaleX(${Math.max(0, Math.min(1, left / ttl)).toFixed(3)})`;
  }
}
setInterval(tick, 100);

// ---- the address bar keeps the filter and the chosen resource ------------------------------

function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  state.prefix = p.get("prefix") || "";
  state.selected = p.get("r") || null;
  $("filter").value = state.prefix;
}

function writeHash() {
  const p = new URLSearchParams();
  if (state.prefix) p.set("prefix", state.prefix);
  if (state.selected) p.set("r", state.selected);
  const h = p.toString();
  history.replaceState(null, "", h ? "#" + h : location.pathname + location.search);
}

document.addEventListener("visibilitychange", () => { if (!document.hidden && slowTimer) refreshSlow(); });
boot();
