/*-------------------------------------------------------------------------
 *
 * breaker.c
 *		The circuit breaker's hot-path side: the half-open probe and the
 *		outcomes that decide it.
 *
 * The breaker's state machine has one home: this file and
 * schema/25_breaker.sql.  States (queue_config.breaker_state):
 *
 *	 closed --trip--> open --cooldown over, a dequeue--> probing
 *	 probing --probe completed--> closed
 *	 probing --probe failed, released or its lease ran out--> open
 *
 * A probe whose lease ran out stays the breaker's probe_item_id (a late
 * complete of it still closes the breaker) until a dequeue one cooldown
 * after the lease's end takes the next probe.
 *
 * Tripping, closing and the probe's verdict are SQL (queue._breaker_*),
 * off the common path; this file decides, from the cached settings, when
 * a call needs them, and grants the probe.  The breaker never touches the
 * operator's pause (queue_config.paused, pause_reason, paused_at): a
 * queue paused with pause() hands out nothing, probes included, until
 * resume(), whatever the breaker does meanwhile.
 *
 * Concurrency: the probe is granted by an UPDATE of the queue's settings
 * row selected FOR UPDATE SKIP LOCKED, so of racing dequeuers exactly one
 * wins and the others return no rows without waiting.
 *
 * Outcomes are counted as they happen, in queue.breaker_bucket: one row
 * per queue, 10-second bucket and backend (its BackendId, unique among
 * the backends alive at a time), so the trip rule sums a few small rows
 * instead of counting the window's history.  A backend only ever updates
 * its own rows: completers of one queue never wait for each other, and no
 * lock order with the breaker lock can arise.
 *
 * src/breaker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "storage/backendid.h"
#include "utils/timestamp.h"

#include "queue.h"

static SPIPlanPtr probe_plan = NULL;
static SPIPlanPtr probe_set_plan = NULL;
static SPIPlanPtr probe_extend_plan = NULL;
static SPIPlanPtr probe_undo_plan = NULL;
static SPIPlanPtr probe_done_plan = NULL;
static SPIPlanPtr probe_back_plan = NULL;
static SPIPlanPtr check_plan = NULL;
static SPIPlanPtr count_plan = NULL;

PG_FUNCTION_INFO_V1(queue_breaker_count_sql);

/*
 * half-open: the first dequeue after the cooldown becomes the probe.  A
 * probe is one until its lease ends: probe_expires_at follows the lease
 * when its bot extends it (extend_lease, heartbeat: PROBE_EXTEND_SQL).  A
 * probe whose lease ran out is a failed probe (a lost lease counts as a
 * failure): the next probe comes one cooldown after that lease's end.
 */
#define PROBE_SQL \
	"WITH c AS (SELECT queue_name FROM queue.queue_config " \
	"            WHERE queue_name" OP("=") "$1 AND NOT paused " \
	"              AND ((breaker_state" OP("=") "'open' " \
	"                    AND (breaker_opened_at" OP("+") "breaker_cooldown)" OP("<=") "pg_catalog.statement_timestamp()) " \
	"                OR (breaker_state" OP("=") "'probing' " \
	"                    AND (probe_expires_at" OP("+") "breaker_cooldown)" OP("<=") "pg_catalog.statement_timestamp())) " \
	"              FOR UPDATE SKIP LOCKED) " \
	"UPDATE queue.queue_config q SET breaker_state = 'probing', probe_item_id = NULL, " \
	"       probe_expires_at = 'infinity' " \
	"  FROM c WHERE q.queue_name" OP("=") "c.queue_name"

/*
 * The probe's lease was extended: its end moves along.  The settings row
 * is taken without waiting (the caller holds the item, and alter_queue or
 * drop_queue may hold the row while they wait for items).
 */
#define PROBE_EXTEND_SQL \
	"WITH c AS (SELECT queue_name FROM queue.queue_config " \
	"            WHERE queue_name" OP("=") "$1 AND breaker_state" OP("=") "'probing' " \
	"              AND probe_item_id" OP("=") "$2 " \
	"              FOR UPDATE SKIP LOCKED) " \
	"UPDATE queue.queue_config q SET probe_expires_at = $3 " \
	"  FROM c WHERE q.queue_name" OP("=") "c.queue_name"

#define PROBE_SET_SQL \
	"UPDATE queue.queue_config SET probe_item_id = $2, probe_expires_at = $3 " \
	" WHERE queue_name" OP("=") "$1"

/* nothing to probe with: open again, the cooldown counted as over */
#define PROBE_UNDO_SQL \
	"UPDATE queue.queue_config SET breaker_state = 'open', probe_item_id = NULL, " \
	"       probe_expires_at = NULL, " \
	"       breaker_opened_at = least(breaker_opened_at, " \
	"                             pg_catalog.now()" OP("-") "breaker_cooldown) " \
	" WHERE queue_name" OP("=") "$1 AND breaker_state" OP("=") "'probing'"

#define PROBE_DONE_SQL \
	"SELECT queue._breaker_probe_done($1, $2, $3)"

#define PROBE_BACK_SQL \
	"SELECT queue._breaker_probe_back($1, $2)"

#define CHECK_SQL \
	"SELECT queue._breaker_check($1)"

/*
 * this backend's running count of the current bucket (25_breaker.sql):
 * the bucket of the call that reported the outcomes, as the history and
 * the failure log stamp them, not of its transaction's start (which may
 * lie before the breaker's window)
 */
#define COUNT_SQL \
	"INSERT INTO queue.breaker_bucket AS b (queue_name, bucket_start, stripe, succeeded, failed) " \
	"VALUES ($1, pg_catalog.date_bin('10 s'::pg_catalog.interval, " \
	"                               GREATEST(pg_catalog.statement_timestamp(), pg_catalog.now()), " \
	"                               'epoch'::pg_catalog.timestamptz), $2, $3, $4) " \
	"ON CONFLICT (queue_name, bucket_start, stripe) DO UPDATE " \
	"   SET succeeded = b.succeeded" OP("+") "EXCLUDED.succeeded, " \
	"       failed = b.failed" OP("+") "EXCLUDED.failed"

/*
 * queue_breaker_gate
 *		May dequeue hand out items of this queue now?  BREAKER_PASS: claim
 *		as usual; BREAKER_PROBE: this call was granted the half-open probe
 *		(claim one item, then report it with queue_breaker_probe_claimed);
 *		BREAKER_BLOCK: hand out nothing.
 */
BreakerGate
queue_breaker_gate(const QueueConfig *cfg, Datum qname)
{
	Oid			t[1] = {TEXTOID};

	/* operator before breaker: a manual pause holds, probes included */
	if (cfg->paused)
		return BREAKER_BLOCK;
	if (cfg->breaker_state == 'c')
		return BREAKER_PASS;
	if ((cfg->breaker_state == 'o' && !cfg->cooldown_over) ||
		(cfg->breaker_state == 'p' && !cfg->probe_lost))
		return BREAKER_BLOCK;
	queue_spi_exec(queue_prepare_cached(&probe_plan, PROBE_SQL, 1, t),
				   &qname, NULL, false, 0, SPI_OK_UPDATE, "breaker probe update");
	return SPI_processed == 1 ? BREAKER_PROBE : BREAKER_BLOCK;
}

/*
 * queue_breaker_probe_claimed
 *		After a granted probe: record the probe item and its lease's end,
 *		or, when nothing could be claimed (probe_id 0), open the breaker
 *		again with its cooldown counted as over.
 */
void
queue_breaker_probe_claimed(Datum qname, int64 probe_id, TimestampTz expiry)
{
	Oid			t[3] = {TEXTOID, INT8OID, TIMESTAMPTZOID};
	Datum		v[3];

	v[0] = qname;
	v[1] = Int64GetDatum(probe_id);
	v[2] = TimestampTzGetDatum(expiry);
	if (probe_id != 0)
		queue_spi_exec(queue_prepare_cached(&probe_set_plan, PROBE_SET_SQL, 3, t),
					   v, NULL, false, 0, SPI_OK_UPDATE, "recording breaker probe");
	else
		queue_spi_exec(queue_prepare_cached(&probe_undo_plan, PROBE_UNDO_SQL, 1, t),
					   v, NULL, false, 0, SPI_OK_UPDATE, "resetting breaker probe");
}

/*
 * queue_breaker_extended
 *		An item's lease was extended to expiry: when it is the half-open
 *		probe, the probe lasts as long (no second probe comes out while its
 *		bot keeps it).  Inside an SPI connection.
 */
void
queue_breaker_extended(const QueueConfig *cfg, Datum qname, int64 item_id, TimestampTz expiry)
{
	Oid			t[3] = {TEXTOID, INT8OID, TIMESTAMPTZOID};
	Datum		v[3];

	if (cfg->breaker_state != 'p' || cfg->probe_item_id != item_id)
		return;
	v[0] = qname;
	v[1] = Int64GetDatum(item_id);
	v[2] = TimestampTzGetDatum(expiry);
	queue_spi_exec(queue_prepare_cached(&probe_extend_plan, PROBE_EXTEND_SQL, 3, t),
				   v, NULL, false, 0, SPI_OK_UPDATE, "extending breaker probe");
}

/*
 * count_outcomes
 *		Adds outcomes to this backend's row of the current bucket.  Inside
 *		an SPI connection.
 */
static void
count_outcomes(Datum qname, int64 succeeded, int64 failed)
{
	Oid			t[4] = {TEXTOID, INT4OID, INT8OID, INT8OID};
	Datum		v[4];

	v[0] = qname;
	v[1] = Int32GetDatum(MyBackendId);
	v[2] = Int64GetDatum(succeeded);
	v[3] = Int64GetDatum(failed);
	queue_spi_exec(queue_prepare_cached(&count_plan, COUNT_SQL, 4, t),
				   v, NULL, false, 0, SPI_OK_INSERT, "counting breaker outcomes");
}

/*
 * queue_breaker_count
 *		Items completed (succeeded) or attempts failed, counted for the trip
 *		rule while the queue has a breaker.  Called before the outcome is
 *		reported (queue_breaker_outcome), so that a probe's success is
 *		counted before the breaker it closes starts counting afresh.  A
 *		database still on 0.1.0's tables counts nothing.
 */
void
queue_breaker_count(const QueueConfig *cfg, Datum qname, int64 succeeded, int64 failed)
{
	if (!cfg->has_breaker || (succeeded == 0 && failed == 0) || !queue_schema_current())
		return;
	count_outcomes(qname, succeeded, failed);
}

/*
 * queue._breaker_count(queue_name text, succeeded bigint, failed bigint)
 *		returns void
 *
 * The same count for the SQL paths (lost leases, offline recovery); the
 * caller knows that the queue has a breaker.
 */
Datum
queue_breaker_count_sql(PG_FUNCTION_ARGS)
{
	queue_check_not_null(PG_ARGISNULL(0), "queue_name");
	queue_check_not_null(PG_ARGISNULL(1), "succeeded");
	queue_check_not_null(PG_ARGISNULL(2), "failed");
	queue_spi_connect();
	count_outcomes(PG_GETARG_DATUM(0), PG_GETARG_INT64(1), PG_GETARG_INT64(2));
	queue_spi_finish();
	PG_RETURN_VOID();
}

/*
 * queue_breaker_outcome
 *		An item's attempt ended: success (completed) or failure.  Settles
 *		the probe when the item was it; a failure may trip a closed breaker.
 */
void
queue_breaker_outcome(const QueueConfig *cfg, Datum qname, int64 item_id, bool success)
{
	if (cfg->breaker_state == 'p' && cfg->probe_item_id == item_id)
	{
		Oid			t[3] = {TEXTOID, INT8OID, BOOLOID};
		Datum		v[3];

		v[0] = qname;
		v[1] = Int64GetDatum(item_id);
		v[2] = BoolGetDatum(success);
		queue_spi_exec(queue_prepare_cached(&probe_done_plan, PROBE_DONE_SQL, 3, t),
					   v, NULL, false, 0, SPI_OK_SELECT, "settling breaker probe");
	}
	if (!success && cfg->has_breaker && cfg->breaker_state == 'c')
	{
		Oid			t[1] = {TEXTOID};

		queue_spi_exec(queue_prepare_cached(&check_plan, CHECK_SQL, 1, t),
					   &qname, NULL, false, 0, SPI_OK_SELECT, "breaker check");
	}
}

/*
 * queue_breaker_released
 *		An item was released (no outcome): when it was the probe, the
 *		breaker opens again with its cooldown over, so the next dequeue
 *		probes with another item.
 */
void
queue_breaker_released(const QueueConfig *cfg, Datum qname, int64 item_id)
{
	Oid			t[2] = {TEXTOID, INT8OID};
	Datum		v[2];

	if (cfg->breaker_state != 'p' || cfg->probe_item_id != item_id)
		return;
	v[0] = qname;
	v[1] = Int64GetDatum(item_id);
	queue_spi_exec(queue_prepare_cached(&probe_back_plan, PROBE_BACK_SQL, 2, t),
				   v, NULL, false, 0, SPI_OK_SELECT, "resetting breaker probe");
}
