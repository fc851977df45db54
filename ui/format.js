// Small pure helpers for what the page shows: times, counts, element building (text only:
// a name or an owner is never parsed as HTML).

// A countdown of fixed width (the CSS gives it 8ch of tabular digits): "12.3 s", "4m 05s",
// "2h 07m", or "expired".
export function fmtLeft(ms) {
  if (!(ms > 0)) return "expired";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}

export function fmtDuration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return fmtLeft(ms).replace("expired", "0 s");
}

export function fmtAgo(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return "—";
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}

export function fmtClock(iso) {
  const t = new Date(iso);
  if (!Number.isFinite(t.getTime())) return "—";
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${p(t.getHours())}:${p(t.getMinutes())}:${p(t.getSeconds())}.${p(t.getMilliseconds(), 3)}`;
}

export function fmtNumber(n, digits = 0) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  return n.toLocaleString(undefined, { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

// A set of partition numbers as ranges, in order: [0, 1, 2, 5, 7, 8] -> "0–2, 5, 7–8".
export function fmtRanges(numbers) {
  const sorted = [...numbers].sort((a, b) => a - b);
  const out = [];
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    out.push(j > i ? `${sorted[i]}–${sorted[j]}` : String(sorted[i]));
    i = j + 1;
  }
  return out.join(", ");
}

// el("td", {class: "num", dataset: {token: 3}}, "text", child...)
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "dataset") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false)
    e.append(c instanceof Node ? c : String(c));
  return e;
}

// The kind of a lease, as people say it.
export function kindOf(holder, limit) {
  if (holder.shared) return "shared";
  return limit > 1 ? "semaphore" : "exclusive";
}
