// Just enough of the Prometheus text format (0.0.4) for the figures: samples by name and
// labels, comments skipped. -> Map of "name{labels}" (labels as the server wrote them, or
// none) to a number, and of bare "name" to the sum over all its label sets.

export function parseProm(text) {
  const samples = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const v = m[3] === "+Inf" ? Infinity : m[3] === "-Inf" ? -Infinity : Number(m[3]);
    if (Number.isNaN(v)) continue;
    if (m[2]) samples.set(m[1] + m[2], v);
    samples.set(m[1], (m[2] && samples.has(m[1]) ? samples.get(m[1]) : 0) + v);
  }
  return samples;
}

// The four figures, from two samples taken `dt` seconds apart (`prev` may be null: the
// rates are then unknown).
export function figures(cur, prev, dt) {
  const get = (s, k) => (s && s.has(k) ? s.get(k) : null);
  const out = {
    leases: get(cur, "mutexd_leases_held"),
    waiters: get(cur, "mutexd_waiters"),
    grantsPerSecond: null,
    commitMs: null,
  };
  if (prev && dt > 0) {
    const g1 = get(cur, "mutexd_grants_total"), g0 = get(prev, "mutexd_grants_total");
    if (g1 !== null && g0 !== null && g1 >= g0) out.grantsPerSecond = (g1 - g0) / dt;
    const s1 = get(cur, "mutexd_store_commit_seconds_sum"), s0 = get(prev, "mutexd_store_commit_seconds_sum");
    const c1 = get(cur, "mutexd_store_commit_seconds_count"), c0 = get(prev, "mutexd_store_commit_seconds_count");
    if (s1 !== null && s0 !== null && c1 !== null && c0 !== null && c1 > c0)
      out.commitMs = ((s1 - s0) / (c1 - c0)) * 1000;
  }
  return out;
}
