#!/usr/bin/env node
// Leader election with mutexd.
//
// Start this program several times, against one server: one process leads the resource
// `leader-election/demo` and says so every second; the others try again every few seconds,
// and one of them takes over within a lease's TTL when the leader goes away (at once when it
// stops cleanly: SIGTERM or Ctrl-C release the lease). Each line names the process (its PID,
// and the host name, which tells containers apart: in each container the worker is PID 1), and
// the leader's lines carry its fencing token. The leader checks that its lease still holds (on
// the clock, not only as the last renewal saw it) right before each of its actions.
//
//   node clients/examples/node/leader.mjs
//
// Environment:
//   MUTEXD_URL       the server, or several comma-separated (default http://127.0.0.1:8080)
//   MUTEXD_RESOURCE  the resource to lead (default leader-election/demo)
//   MUTEXD_TTL_MS    the lease's TTL in ms (default 15000); renewed every third of it
//   MUTEXD_RETRY_S   seconds between attempts of a follower (default 5)
//   MUTEXD_TOKEN     bearer token, when the server requires one

import { hostname } from 'node:os';
import { Client, LeaseHeldError } from '../../node/index.js';

const url = process.env.MUTEXD_URL || 'http://127.0.0.1:8080';
const resource = process.env.MUTEXD_RESOURCE || 'leader-election/demo';
const ttlMs = positive('MUTEXD_TTL_MS', 15000);
const retryS = positive('MUTEXD_RETRY_S', 5);
const token = process.env.MUTEXD_TOKEN || undefined;
const BEAT_MS = 1000;
const HOST = hostname();

function positive(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!(Number.isFinite(n) && n > 0)) {
    process.stderr.write(`${name} must be a positive number, not ${JSON.stringify(raw)}\n`);
    process.exit(2);
  }
  return n;
}

// One line per call; stdout is written synchronously for files and pipes, so every line is
// out as soon as it is said.
function say(text, detail = '') {
  const d = new Date();
  const hms = [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
  process.stdout.write(`[${hms}] This process (${process.pid}) ${text} Host ${HOST}${detail}.\n`);
}

// Resolves after `ms`, or as soon as `signal` is aborted.
function pause(ms, signal) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done);
  });
}

const client = new Client(url, { token });
const stop = new AbortController();
process.on('SIGTERM', () => stop.abort());
process.on('SIGINT', () => stop.abort());

try {
  await client.runWhenLeader(
    resource,
    // The leader's work. `signal` is aborted the moment the lease is lost (or on SIGTERM):
    // stop at once. `lock.lost` compares the clock with the lease's deadline, so a leader
    // paused past it (SIGSTOP, a frozen VM) stops here instead of acting once more. Pass
    // lock.fencingToken to anything this work writes.
    async (signal, lock) => {
      while (!signal.aborted && !lock.lost) {
        say('is currently the leader.', `, fencing token ${lock.fencingToken}`);
        await pause(BEAT_MS, signal);
      }
    },
    {
      ttlMs,
      retryMs: retryS * 1000,
      signal: stop.signal,
      onRetry: (err) => {
        if (err instanceof LeaseHeldError) say(`could not acquire lease. Retrying in ${retryS} seconds.`);
        else say(`could not reach mutexd (${err.message}). Retrying in ${retryS} seconds.`);
      },
      onLost: (err) => say(`lost the lease (${err.message}).`),
    },
  );
} catch (err) {
  // Aborted by SIGTERM or SIGINT: the lease is released, and that is a clean exit.
  if (!stop.signal.aborted) {
    process.stderr.write(`${err.stack || err}\n`);
    process.exitCode = 1;
  }
} finally {
  client.close();
}
