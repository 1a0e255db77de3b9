#!/usr/bin/env python3
"""A queue bot in Python with psycopg2: claim, work step by step, report.

    QUEUE_DSN='host=db dbname=ops user=bot' python3 bot.py invoices [worker-name]

Claims one item at a time, runs its steps (work() stands for the real
work), saves each finished step with checkpoint() so a retry resumes there,
extends the lease before each step, and completes the item or fails it with
an error code.  A lost lease (another worker now holds the item) is not an
error: the bot drops the item and goes on.  On SIGTERM it finishes the step
it is in, releases the item (no attempt counted) and exits 0.  It sleeps on
LISTEN queue_<name> between items, with a slow poll as a fallback; the
LISTEN needs a direct connection (QUEUE_LISTEN_DSN) when QUEUE_DSN goes
through PgBouncer in transaction pooling.
"""
import json
import os
import select
import signal
import socket
import sys
import time

import psycopg2
from psycopg2 import sql

QUEUE = sys.argv[1]
WORKER = sys.argv[2] if len(sys.argv) > 2 else 'py-%s-%d' % (socket.gethostname(), os.getpid())
DSN = os.environ.get('QUEUE_DSN', '')
POLL = float(os.environ.get('QUEUE_POLL', '30'))       # seconds between polls when nothing wakes us
stopping = False


class TransientError(Exception):
    """Worth another attempt later (a timeout, a locked record)."""


class PermanentError(Exception):
    """Retrying will not help (bad input)."""


def on_term(signum, frame):
    global stopping
    stopping = True


def log(msg):
    print('%s %s: %s' % (time.strftime('%H:%M:%S'), WORKER, msg), file=sys.stderr, flush=True)


def call(conn, query, *args):
    """One queue call, its own transaction; returns the first column of the first row."""
    with conn.cursor() as cur:
        cur.execute(query, args)
        row = cur.fetchone()
        return row[0] if row else None


def work(payload, step, attempt):
    """The real work of one step goes here.  This one sleeps, and fails on request."""
    if payload.get('fail') == 'permanent':
        raise PermanentError('cannot process %r' % payload)
    if payload.get('fail') == 'transient' and attempt == 1:
        raise TransientError('ERP did not answer')
    deadline = time.time() + float(payload.get('step_seconds', 0.1))
    while time.time() < deadline:
        time.sleep(0.05)


def process(conn, item_id, token, payload, progress, attempt):
    """Runs the steps not yet done; returns 'done', 'lost', 'released' or 'failed'."""
    steps = int(payload.get('steps', 1))
    first = int((progress or {}).get('step', 0))
    for step in range(first + 1, steps + 1):
        if stopping:
            call(conn, 'SELECT queue.release(%s, %s, %s)', QUEUE, item_id, token)
            log('released item %s at step %d' % (item_id, step))
            return 'released'
        if call(conn, 'SELECT queue.extend_lease(%s, %s, %s)', QUEUE, item_id, token) is None:
            return 'lost'
        try:
            work(payload, step, attempt)
        except (TransientError, PermanentError) as e:
            permanent = isinstance(e, PermanentError)
            code = 'BAD_INPUT' if permanent else 'ERP_TIMEOUT'
            state = call(conn, 'SELECT queue.fail(%s, %s, %s, %s, %s, permanent => %s)',
                         QUEUE, item_id, token, str(e), code, permanent)
            log('item %s failed (%s): %s' % (item_id, state or 'lease lost', e))
            return 'failed' if state else 'lost'
        if step < steps and not call(conn, 'SELECT queue.checkpoint(%s, %s, %s, %s::jsonb)',
                                     QUEUE, item_id, token, json.dumps({'step': step})):
            return 'lost'
    result = {'steps': steps, 'resumed_from': first, 'worker': WORKER}
    if not call(conn, 'SELECT queue.complete(%s, %s, %s, %s::jsonb)',
                QUEUE, item_id, token, json.dumps(result)):
        return 'lost'
    return 'done'


def serve(wakeup):
    """Claims and processes items until SIGTERM; a lost connection raises."""
    conn = psycopg2.connect(DSN)
    conn.autocommit = True                    # every call is its own transaction
    listen = psycopg2.connect(os.environ.get('QUEUE_LISTEN_DSN', DSN))
    listen.autocommit = True
    with listen.cursor() as cur:
        cur.execute(sql.SQL('LISTEN {}').format(sql.Identifier('queue_' + QUEUE)))
    call(conn, 'SELECT queue.register_worker(%s, restart => true)', WORKER)   # a predecessor's leases end
    log('working on queue %s' % QUEUE)
    while not stopping:
        with conn.cursor() as cur:
            cur.execute('SELECT item_id, lease_token, payload, progress, attempt'
                        '  FROM queue.dequeue(%s, %s)', (QUEUE, WORKER))
            row = cur.fetchone()
        if row is None:                       # nothing now: wait for a NOTIFY, SIGTERM or the poll
            if listen in select.select([listen, wakeup], [], [], POLL)[0]:
                listen.poll()
                listen.notifies.clear()
            continue
        item_id, token, payload, progress, attempt = row
        outcome = process(conn, item_id, token, payload, progress, attempt)
        if outcome == 'lost':
            log('lost the lease of item %s; another worker has it' % item_id)
        elif outcome == 'done':
            log('completed item %s' % item_id)
    conn.close()
    listen.close()


def main():
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    wakeup, wfd = os.pipe()                   # a signal wakes the select() below
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    delay = 1
    while not stopping:
        try:
            serve(wakeup)
        except psycopg2.OperationalError as e:
            # the item in hand, if any, comes back when its lease runs out
            log('database connection lost (%s); reconnecting in %d s' % (str(e).strip(), delay))
            select.select([wakeup], [], [], delay)
            delay = min(delay * 2, 30)
    log('stopped')
    return 0


if __name__ == '__main__':
    sys.exit(main())
