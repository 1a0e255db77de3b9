-- prometheus() reads each queue's totals and open alerts through
-- queue._prom_totals(), one call per queue, instead of correlated
-- subqueries over the item tables, and names its CTEs' columns inside
-- them: Citus plans neither correlated subqueries nor CTE column lists.

CREATE OR REPLACE FUNCTION queue._prom_totals(p_queue text, OUT processed bigint, OUT failed bigint,
                                   OUT dead jsonb, OUT alerts jsonb)
RETURNS record LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    t record;
    v_after timestamptz := '-infinity';
BEGIN
    SELECT m.processed, m.failed, m.dead, m.counted_until INTO t
      FROM queue.metrics_totals m WHERE m.queue_name = p_queue;
    IF FOUND THEN
        v_after := coalesce(t.counted_until, '-infinity');
    END IF;
    processed := coalesce(t.processed, 0)
        + (SELECT count(*) FROM queue.item_done d
            WHERE d.queue_name = p_queue AND d.completed_at >= v_after);
    failed := coalesce(t.failed, 0)
        + (SELECT count(*) FROM queue.failure_log f
            WHERE f.queue_name = p_queue AND f.at >= v_after);
    dead := queue._add_counts(coalesce(t.dead, '{}'),
                              queue._dead_by_reason(p_queue, v_after, 'infinity'));
    SELECT coalesce(jsonb_object_agg(x.kind, x.n), '{}') INTO alerts
      FROM (SELECT a.kind, count(*) AS n FROM queue.alerts a
             WHERE a.queue_name = p_queue AND a.cleared_at IS NULL
             GROUP BY a.kind) x;
END
$$;
COMMENT ON FUNCTION queue._prom_totals(text) IS 'Running totals and open alerts of a queue, for prometheus()';
REVOKE ALL ON FUNCTION queue._prom_totals(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION queue.prometheus()
RETURNS text LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_out text;
BEGIN
    WITH s AS MATERIALIZED (
        SELECT c.queue_name AS q, queue._prom_label(c.queue_name) AS ql, x.*,
               n.processed AS total_processed, n.failed AS total_failed,
               n.dead AS total_dead, n.alerts AS open_alerts
          FROM queue.queue_config c
         CROSS JOIN LATERAL queue._stats(c.queue_name) x
         CROSS JOIN LATERAL queue._prom_totals(c.queue_name) n
         WHERE queue._can_read(c.queue_name)),
    -- no column lists on the CTEs: Citus loses them when it plans the CTEs
    fam AS (SELECT v.ord, v.name, v.kind, v.help FROM (VALUES
        (1,  'queue_items', 'gauge', 'Live items by state: queued (claimable now), scheduled, processing, on_hold.'),
        (2,  'queue_dead_letters_open', 'gauge', 'Dead letters still new or in review.'),
        (3,  'queue_oldest_queued_age_seconds', 'gauge', 'How long the longest-waiting claimable item has been claimable.'),
        (4,  'queue_processed_last_hour', 'gauge', 'Items processed in the last hour.'),
        (5,  'queue_failed_last_hour', 'gauge', 'Failed attempts (lost leases included) in the last hour.'),
        (6,  'queue_wait_seconds', 'gauge', 'Time from enqueue to claim of the items processed in the last hour.'),
        (7,  'queue_run_seconds', 'gauge', 'Time from claim to completion of the items processed in the last hour.'),
        (8,  'queue_paused', 'gauge', '1 while the queue is paused (manually or by its circuit breaker).'),
        (9,  'queue_alerts_open', 'gauge', 'Open alerts by kind.'),
        (10, 'queue_processed_total', 'counter', 'Items processed (running total kept by snapshot_metrics).'),
        (11, 'queue_failed_total', 'counter', 'Failed attempts, lost leases included (running total kept by snapshot_metrics).'),
        (12, 'queue_dead_letters_total', 'counter', 'Items dead-lettered, by reason (running total kept by snapshot_metrics).')) AS v(ord, name, kind, help)),
    smp AS (
        SELECT 1 AS ord, s.q, k.n AS sub, format('queue=%s,state=%s', s.ql, queue._prom_label(k.state)) AS labels,
               k.v::numeric AS val
          FROM s CROSS JOIN LATERAL (VALUES (1, 'queued', s.queued), (2, 'scheduled', s.scheduled),
                                            (3, 'processing', s.processing),
                                            (4, 'on_hold', s.on_hold)) AS k(n, state, v)
        UNION ALL
        SELECT 2, s.q, 0, format('queue=%s', s.ql), s.dead FROM s
        UNION ALL
        -- nothing claimable: nobody has waited (0, as stats' NULL means)
        SELECT 3, s.q, 0, format('queue=%s', s.ql), coalesce(extract(epoch FROM s.oldest_queued_age), 0) FROM s
        UNION ALL
        SELECT 4, s.q, 0, format('queue=%s', s.ql), s.processed_1h FROM s
        UNION ALL
        SELECT 5, s.q, 0, format('queue=%s', s.ql), s.failed_1h FROM s
        UNION ALL
        SELECT 6, s.q, k.n, format('queue=%s,quantile=%s', s.ql, queue._prom_label(k.quantile)),
               extract(epoch FROM k.v)
          FROM s CROSS JOIN LATERAL (VALUES (1, '0.5', s.wait_p50), (2, '0.95', s.wait_p95)) AS k(n, quantile, v)
         WHERE k.v IS NOT NULL   -- no completion in the last hour: no quantile, not NaN
        UNION ALL
        SELECT 7, s.q, k.n, format('queue=%s,quantile=%s', s.ql, queue._prom_label(k.quantile)),
               extract(epoch FROM k.v)
          FROM s CROSS JOIN LATERAL (VALUES (1, '0.5', s.run_p50), (2, '0.95', s.run_p95)) AS k(n, quantile, v)
         WHERE k.v IS NOT NULL   -- no completion in the last hour: no quantile, not NaN
        UNION ALL
        SELECT 8, s.q, 0, format('queue=%s', s.ql), CASE WHEN s.paused THEN 1 ELSE 0 END FROM s
        UNION ALL
        SELECT 9, s.q, 0, format('queue=%s,kind=%s', s.ql, queue._prom_label(a.key)), a.value::numeric
          FROM s CROSS JOIN LATERAL jsonb_each_text(s.open_alerts) a
        UNION ALL
        SELECT 10, s.q, 0, format('queue=%s', s.ql), s.total_processed FROM s
        UNION ALL
        SELECT 11, s.q, 0, format('queue=%s', s.ql), s.total_failed FROM s
        UNION ALL
        SELECT 12, s.q, 0, format('queue=%s,reason=%s', s.ql, queue._prom_label(r.key)), r.value::numeric
          FROM s CROSS JOIN LATERAL jsonb_each_text(s.total_dead) r),
    lines AS (
        SELECT f.ord, ''::text AS q, -2 AS sub, ''::text AS labels,
               format('# HELP %s %s', f.name, f.help) AS line FROM fam f
        UNION ALL
        SELECT f.ord, '', -1, '', format('# TYPE %s %s', f.name, f.kind) FROM fam f
        UNION ALL
        SELECT m.ord, m.q, m.sub, m.labels,
               format('%s{%s} %s', f.name, m.labels, queue._prom_value(m.val))
          FROM smp m JOIN fam f ON f.ord = m.ord)
    SELECT string_agg(l.line, E'\n' ORDER BY l.ord, l.q, l.sub, l.labels) || E'\n'
      INTO v_out
      FROM lines l;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION queue.prometheus()
    IS 'Prometheus text exposition of stats (gauges) and counters of every queue the caller may read';
