#!/usr/bin/env python3
"""pgbouncer_load.py DSN QUEUE CLIENTS ITEMS -- the bot cycle through a pooler.

CLIENTS threads, each with its own connection (autocommit: every call is
its own transaction, so consecutive calls of one client may run on
different server connections), first produce ITEMS items each, then work
the queue until it is empty: dequeue, checkpoint, extend_lease, and
complete, or fail transiently (every 7th item, on its first attempt) or
permanently (every 13th).  Prints one JSON object: what each call returned,
counted over all clients, and the ids each client completed or buried.
"""
import json
import sys
import threading
import time

import psycopg2

dsn, queue, clients, per_client = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lock = threading.Lock()
out = {'produced': [], 'completed': [], 'dead': [], 'retried': 0, 'lost': 0,
       'checkpoints': 0, 'extends': 0, 'errors': []}
ready = threading.Barrier(clients)


def client(n):
    try:
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        cur = conn.cursor()
        ready.wait()          # all clients connected at once
        ids = []
        for i in range(per_client):
            k = n * per_client + i
            cur.execute("SELECT queue.enqueue(%s, %s::jsonb)", (queue, json.dumps({'k': k})))
            ids.append(cur.fetchone()[0])
        with lock:
            out['produced'] += ids
        idle_since = None
        while True:
            cur.execute("SELECT item_id, lease_token, payload, attempt FROM queue.dequeue(%s, %s)",
                        (queue, 'pgb-%d' % n))
            row = cur.fetchone()
            if row is None:
                cur.execute("SELECT count(*) FROM queue.items WHERE queue_name = %s", (queue,))
                if cur.fetchone()[0] == 0:
                    break
                idle_since = idle_since or time.time()
                if time.time() - idle_since > 60:
                    raise RuntimeError('items left but none claimable for 60 s')
                time.sleep(0.05)
                continue
            idle_since = None
            item_id, token, payload, attempt = row
            k = payload['k']
            cur.execute("SELECT queue.checkpoint(%s, %s, %s, %s::jsonb)",
                        (queue, item_id, token, json.dumps({'step': 1, 'by': n})))
            cp = cur.fetchone()[0]
            cur.execute("SELECT queue.extend_lease(%s, %s, %s, '1 min')", (queue, item_id, token))
            ext = cur.fetchone()[0]
            if k % 13 == 0:
                cur.execute("SELECT queue.fail(%s, %s, %s, 'bad input', 'BAD_INPUT', permanent => true)",
                            (queue, item_id, token))
                res = cur.fetchone()[0]
                with lock:
                    out['dead' if res == 'dead' else 'errors'].append(item_id if res == 'dead' else 'fail: %r' % res)
            elif k % 7 == 0 and attempt == 1:
                cur.execute("SELECT queue.fail(%s, %s, %s, 'ERP timeout', 'ERP_TIMEOUT', retry_in => '0')",
                            (queue, item_id, token))
                res = cur.fetchone()[0]
                with lock:
                    if res == 'retrying':
                        out['retried'] += 1
                    else:
                        out['errors'].append('transient fail: %r' % res)
            else:
                cur.execute("SELECT queue.complete(%s, %s, %s, %s::jsonb)",
                            (queue, item_id, token, json.dumps({'by': n})))
                done = cur.fetchone()[0]
                with lock:
                    if done:
                        out['completed'].append(item_id)
                    else:
                        out['lost'] += 1
            with lock:
                out['checkpoints'] += 1 if cp else 0
                out['extends'] += 1 if ext is not None else 0
        conn.close()
    except Exception as e:   # reported, counted as a failure by the test
        with lock:
            out['errors'].append('client %d: %s' % (n, e))


threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
start = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
out['seconds'] = round(time.time() - start, 2)
print(json.dumps(out))
