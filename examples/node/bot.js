#!/usr/bin/env node
// A queue bot in Node.js with node-postgres (pg): claim, work step by step, report.
//
//   QUEUE_DSN=postgres://bot@db/ops node bot.js invoices [worker-name]
//
// Claims one item at a time, runs its steps (work() stands for the real
// work), saves each finished step with checkpoint() so a retry resumes
// there, extends the lease before each step, and completes the item or
// fails it with an error code.  A lost lease (another worker now holds the
// item) is not an error: the bot drops the item and goes on.  On SIGTERM it
// finishes the step it is in, releases the item (no attempt counted) and
// exits 0.  It sleeps on LISTEN queue_<name> between items, with a slow
// poll as a fallback; the LISTEN needs a direct connection
// (QUEUE_LISTEN_DSN) when QUEUE_DSN goes through PgBouncer in transaction
// pooling.  Without QUEUE_DSN, pg reads PGHOST, PGPORT, PGDATABASE, PGUSER.
'use strict';
const os = require('os');
const { Client } = require('pg');

const QUEUE = process.argv[2];
const WORKER = process.argv[3] || `node-${os.hostname()}-${process.pid}`;
const POLL_MS = Number(process.env.QUEUE_POLL || 30) * 1000; // between polls when nothing wakes us
let stopping = false;
let wake = null; // ends the idle wait early (NOTIFY, SIGTERM)

class TransientError extends Error {} // worth another attempt later (a timeout, a locked record)
class PermanentError extends Error {} // retrying will not help (bad input)

const log = (msg) => console.error(`${new Date().toISOString().slice(11, 19)} ${WORKER}: ${msg}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const connection = (dsn) => (dsn ? { connectionString: dsn } : {});

function idle(ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => wake(), ms);
    wake = () => { clearTimeout(timer); wake = null; resolve(); };
  });
}

// One queue call, its own transaction; returns the first column of the first row.
async function call(db, text, ...args) {
  const { rows, fields } = await db.query(text, args);
  return rows.length ? rows[0][fields[0].name] : null;
}

// The real work of one step goes here.  This one sleeps, and fails on request.
async function work(payload, step, attempt) {
  if (payload.fail === 'permanent') throw new PermanentError(`cannot process ${JSON.stringify(payload)}`);
  if (payload.fail === 'transient' && attempt === 1) throw new TransientError('ERP did not answer');
  const until = Date.now() + 1000 * Number(payload.step_seconds ?? 0.1);
  while (Date.now() < until) await sleep(50);
}

// Runs the steps not yet done; returns 'done', 'lost', 'released' or 'failed'.
async function processItem(db, item) {
  const { item_id: id, lease_token: token, payload, progress, attempt } = item;
  const steps = Number(payload.steps ?? 1);
  const first = Number((progress || {}).step ?? 0);
  for (let step = first + 1; step <= steps; step++) {
    if (stopping) {
      await call(db, 'SELECT queue.release($1, $2, $3)', QUEUE, id, token);
      log(`released item ${id} at step ${step}`);
      return 'released';
    }
    if ((await call(db, 'SELECT queue.extend_lease($1, $2, $3)', QUEUE, id, token)) === null) return 'lost';
    try {
      await work(payload, step, attempt);
    } catch (e) {
      if (!(e instanceof TransientError || e instanceof PermanentError)) throw e;
      const permanent = e instanceof PermanentError;
      const state = await call(db, 'SELECT queue.fail($1, $2, $3, $4, $5, permanent => $6)',
        QUEUE, id, token, e.message, permanent ? 'BAD_INPUT' : 'ERP_TIMEOUT', permanent);
      log(`item ${id} failed (${state || 'lease lost'}): ${e.message}`);
      return state ? 'failed' : 'lost';
    }
    if (step < steps && !(await call(db, 'SELECT queue.checkpoint($1, $2, $3, $4)',
      QUEUE, id, token, { step }))) return 'lost';
  }
  const result = { steps, resumed_from: first, worker: WORKER };
  if (!(await call(db, 'SELECT queue.complete($1, $2, $3, $4)', QUEUE, id, token, result))) return 'lost';
  return 'done';
}

// Claims and processes items until SIGTERM; a lost connection throws.
async function serve() {
  const db = new Client(connection(process.env.QUEUE_DSN));
  const listener = new Client(connection(process.env.QUEUE_LISTEN_DSN || process.env.QUEUE_DSN));
  db.on('error', (e) => log(`connection error: ${e.message}`));
  listener.on('error', (e) => log(`listen connection error: ${e.message}`));
  listener.on('notification', () => wake && wake());
  try {
    await db.connect();
    await listener.connect();
    await listener.query(`LISTEN ${listener.escapeIdentifier(`queue_${QUEUE}`)}`);
    await call(db, 'SELECT queue.register_worker($1, restart => true)', WORKER); // a predecessor's leases end
    log(`working on queue ${QUEUE}`);
    while (!stopping) {
      const { rows } = await db.query(
        'SELECT item_id, lease_token, payload, progress, attempt FROM queue.dequeue($1, $2)', [QUEUE, WORKER]);
      if (rows.length === 0) { await idle(POLL_MS); continue; } // until a NOTIFY, SIGTERM or the poll
      const outcome = await processItem(db, rows[0]);
      if (outcome === 'lost') log(`lost the lease of item ${rows[0].item_id}; another worker has it`);
      else if (outcome === 'done') log(`completed item ${rows[0].item_id}`);
    }
  } finally {
    await Promise.allSettled([db.end(), listener.end()]);
  }
}

async function main() {
  const stop = () => { stopping = true; if (wake) wake(); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  for (let delay = 1; !stopping; delay = Math.min(delay * 2, 30)) {
    try {
      await serve();
    } catch (e) {
      // the item in hand, if any, comes back when its lease runs out
      log(`database connection lost (${e.message}); reconnecting in ${delay} s`);
      if (!stopping) await idle(delay * 1000);
    }
  }
  log('stopped');
}

main();
