// Signals made of other signals, without touching any of them.

/**
 * A signal aborted as soon as any of `signals` is (undefined ones are left out), with that
 * signal's reason, and `dispose()`, which detaches it from them once it is no longer needed.
 * AbortSignal.any() where Node has it (18.17, 20.3 and later), else linkSignals().
 * @param {(AbortSignal | undefined)[]} signals
 * @returns {{ signal: AbortSignal, dispose: () => void }}
 */
export function anySignal(signals) {
  const live = signals.filter(Boolean);
  if (typeof AbortSignal.any === 'function') return { signal: AbortSignal.any(live), dispose() {} };
  return linkSignals(live);
}

/**
 * What AbortSignal.any() does, for the Node versions without it: a new AbortController that
 * listens to each signal; dispose() removes its listeners.
 * @param {AbortSignal[]} signals
 */
export function linkSignals(signals) {
  const controller = new AbortController();
  const undo = [];
  for (const s of signals) {
    if (s.aborted) {
      controller.abort(s.reason);
      break;
    }
    const onAbort = () => controller.abort(s.reason);
    s.addEventListener('abort', onAbort, { once: true });
    undo.push(() => s.removeEventListener('abort', onAbort));
  }
  return { signal: controller.signal, dispose: () => undo.forEach((f) => f()) };
}
