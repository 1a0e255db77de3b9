-- The workers view is filtered per queue like the other views, and its
-- 24-hour counts read indexes led by the worker.  The update builds the
-- two indexes (a write lock on item_done and failure_log while it runs).

CREATE INDEX IF NOT EXISTS item_done_worker_idx ON queue.item_done (worker, completed_at);
CREATE INDEX IF NOT EXISTS failure_log_worker_idx ON queue.failure_log (worker, at);

CREATE OR REPLACE VIEW queue.workers WITH (security_barrier) AS
SELECT w.worker,
       CASE
         WHEN w.last_seen < now() - make_interval(secs => queue._worker_offline_after()) THEN 'offline'
         WHEN w.draining THEN 'draining'
         WHEN EXISTS (SELECT 1 FROM queue.maintenance_window m
                       WHERE m.worker = w.worker AND m.starts_at <= now() AND m.ends_at > now())
           THEN 'maintenance'
         WHEN f.in_flight > 0 THEN 'active'
         ELSE 'idle'
       END AS status,
       w.last_seen, f.in_flight, d.completed_24h, fl.failed_24h, d.mean_run_time,
       CASE WHEN d.completed_24h + fl.failed_24h > 0
            THEN round(d.completed_24h::numeric / (d.completed_24h + fl.failed_24h), 4) END
         AS success_rate,
       w.capacity, w.draining,
       CASE WHEN a.admin OR w.queues IS NULL THEN w.queues
            ELSE ARRAY(SELECT u.q FROM unnest(w.queues) AS u(q) WHERE queue._can_read(u.q)) END
         AS queues,
       w.info, w.registered_at
  FROM queue.worker_registry w
 CROSS JOIN LATERAL (
        SELECT pg_has_role(queue._caller(), 'queue_admin', 'MEMBER') AS admin,
               -- a queue every reader may read and every worker may work
               EXISTS (SELECT 1 FROM queue.queue_config o
                        WHERE NOT o.restrict_reader AND NOT o.restrict_worker) AS open_queue) a
 CROSS JOIN LATERAL (
        SELECT count(*) AS in_flight
          FROM queue.queue_config q
          JOIN queue.item_live i ON i.queue_name = q.queue_name AND i.worker = w.worker
         WHERE i.lease_token IS NOT NULL AND i.lease_expires_at > now()
           AND (a.admin OR queue._can_read(q.queue_name))) f
 CROSS JOIN LATERAL (
        SELECT count(*) AS completed_24h, avg(h.completed_at - h.claimed_at) AS mean_run_time
          FROM queue.item_done h
         WHERE h.worker = w.worker AND h.completed_at > now() - interval '24 hours'
           AND (a.admin OR queue._can_read(h.queue_name))) d
 CROSS JOIN LATERAL (
        SELECT count(*) AS failed_24h
          FROM queue.failure_log x
         WHERE x.worker = w.worker AND x.at > now() - interval '24 hours'
           AND (a.admin OR queue._can_read(x.queue_name))) fl
 WHERE a.admin
    OR pg_has_role(queue._caller(), coalesce(w.registered_by::oid, 0::oid), 'MEMBER')
    OR EXISTS (SELECT 1 FROM unnest(w.queues) AS u(q) WHERE queue._can_read(u.q))
    OR (w.queues IS NULL AND a.open_queue)
    OR f.in_flight > 0 OR d.completed_24h > 0 OR fl.failed_24h > 0;
COMMENT ON VIEW queue.workers
    IS 'Workers the caller may see (every worker for an admin; else those it registered, that work queues it may read, or registered for every queue while one is open to all): status, in-flight items, 24 h results in those queues';

-- the view calls queue._caller() as the reader
GRANT EXECUTE ON FUNCTION queue._caller() TO queue_reader, queue_producer, queue_worker, queue_admin;
