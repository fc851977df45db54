// The dashboard's one way to its server: fetch with the bearer token (kept in this tab's
// sessionStorage only), timeouts, and what every answer may say about the server as a
// whole (401: ask for a token; 503: a takeover or not ready; Mutexd-Served-By: which server
// of a group answered). Requests go to this page's own origin only (the CSP says so too).

const TOKEN_KEY = "mutexd.token";

export class NetworkError extends Error {}
export class Unauthorized extends Error {}

export class Api {
  constructor() {
    this.token = sessionStorage.getItem(TOKEN_KEY) || "";
    this.servedBy = null;
    // Set by the page: onUnauthorized(hadToken), onServedBy(url, before),
    // onUnavailable(reason, retryMs), onAvailable(), onReachable().
    this.onUnauthorized = () => {};
    this.onServedBy = () => {};
    this.onUnavailable = () => {};
    this.onReachable = () => {};
    this.onAvailable = () => {};
  }

  setToken(token) {
    this.token = token;
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  }

  // The active server, as a Mutexd-Served-By header names it, or as GET /v1/servers does
  // (a standby answers that one itself, without the header).
  noteServedBy(served) {
    if (!served || served === this.servedBy) return;
    const before = this.servedBy;
    this.servedBy = served;
    this.onServedBy(served, before);
  }

  // -> {status, body (parsed JSON, text, or null), headers}. Throws NetworkError when the
  // server cannot be reached (or did not answer within timeoutMs), Unauthorized on 401,
  // and an AbortError when `signal` aborts.
  async request(path, { method = "GET", body, signal, timeoutMs = 15000 } = {}) {
    const headers = { Accept: "application/json" };
    if (this.token) headers.Authorization = "Bearer " + this.token;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), timeoutMs);
    const onAbort = () => timeout.abort();
    if (signal) signal.addEventListener("abort", onAbort, { once: true });
    let res;
    try {
      res = await fetch(path, {
        method, headers, signal: timeout.signal, cache: "no-store", credentials: "omit",
        body: body === undefined ? undefined : JSON.stringify(body),
        // The page's own Origin goes with a POST (the server admits its own origin); under
        // the page's no-referrer policy a browser would send "Origin: null" instead.
        referrerPolicy: "same-origin",
      });
    } catch (e) {
      if (signal && signal.aborted) throw e;
      throw new NetworkError(timeout.signal.aborted ? "no answer in time" : String(e.message || e));
    } finally {
      clearTimeout(timer);
      if (signal) signal.removeEventListener("abort", onAbort);
    }
    const type = res.headers.get("Content-Type") || "";
    let parsed = null;
    try {
      parsed = type.startsWith("application/json") ? await res.json() : await res.text();
    } catch (e) {
      if (signal && signal.aborted) throw e;
      throw new NetworkError("the answer was cut short");
    }
    this.onReachable();
    // On a partitioned group an answer about one resource names the owner of its partition
    // (with Mutexd-Partition), which is no change of the server the page talks to: only the
    // other answers say which server serves the page.
    if (!res.headers.has("Mutexd-Partition")) this.noteServedBy(res.headers.get("Mutexd-Served-By"));
    if (res.status === 401) {
      this.onUnauthorized(Boolean(this.token));
      throw new Unauthorized("a bearer token is needed");
    }
    if (res.status === 503) this.onUnavailable(reasonOf(parsed), retryAfterMs(res));
    else if (res.status < 500) this.onAvailable();
    return { status: res.status, body: parsed, headers: res.headers };
  }
}

export function reasonOf(body) {
  const e = body && body.error;
  return (e && (e.reason || e.message)) || (body && body.reason) || "unavailable";
}

export function messageOf(res) {
  const e = res.body && res.body.error;
  return e ? `${e.message} (${e.code})` : `HTTP ${res.status}`;
}

function retryAfterMs(res) {
  const s = Number(res.headers.get("Retry-After"));
  return Number.isFinite(s) && s > 0 ? s * 1000 : 0;
}

// Waits between attempts after a failure: 0.5 s doubling to 10 s, with jitter so that many
// tabs do not come back at once; reset() after a success.
export class Backoff {
  constructor(first = 500, most = 10000) {
    this.first = first;
    this.most = most;
    this.reset();
  }
  reset() { this.next = this.first; }
  delay() {
    const d = this.next * (0.8 + Math.random() * 0.4);
    this.next = Math.min(this.most, this.next * 2);
    return Math.round(d);
  }
}

export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => {
      clearTimeout(t);
      reject(new DOMException("aborted", "AbortError"));
    }, { once: true });
  });
}

export const enc = encodeURIComponent;
// A resource name in a path: its '/' stay, everything else is encoded.
export function resourcePath(name) {
  return name.split("/").map(enc).join("/");
}
