-- ======================================================================
-- The C functions of the hot path lose their SET clauses: PostgreSQL
-- applied and undid them through the GUC machinery on every call.  Their
-- statements now run with pg_catalog as the whole search path and without
-- JIT, set where they connect to SPI (src/statement_scope.c).
-- ======================================================================

ALTER FUNCTION queue.enqueue(text, jsonb, int, timestamptz, text, timestamptz, int, text, text, text, text[]) RESET ALL;
ALTER FUNCTION queue.enqueue_batch(text, jsonb[], int, timestamptz, text[], timestamptz, int, text[], text[], text[]) RESET ALL;
ALTER FUNCTION queue.dequeue(text, text, int, interval) RESET ALL;
ALTER FUNCTION queue.complete(text, bigint, bigint, jsonb) RESET ALL;
ALTER FUNCTION queue.complete_batch(text, bigint[], bigint[], jsonb) RESET ALL;
ALTER FUNCTION queue.fail(text, bigint, bigint, text, text, boolean, interval) RESET ALL;
ALTER FUNCTION queue.release(text, bigint, bigint, timestamptz) RESET ALL;
ALTER FUNCTION queue.extend_lease(text, bigint, bigint, interval) RESET ALL;
ALTER FUNCTION queue.checkpoint(text, bigint, bigint, jsonb) RESET ALL;
