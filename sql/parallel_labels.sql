-- Functions that take the queue lock or may write (the settings cache
-- loads through SPI) are not labelled PARALLEL SAFE: the planner would
-- otherwise be free to run them in a parallel worker.
\set VERBOSITY terse

-- case: the access check and item() take the queue's lock
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proparallel AS parallel
  FROM pg_proc p
 WHERE p.oid IN ('queue._check_access(text, text)'::regprocedure,
                 'queue.item(text, bigint)'::regprocedure,
                 'queue._lock_queue(text, boolean)'::regprocedure)
 ORDER BY 1::text;
