/*-------------------------------------------------------------------------
 *
 * ack.c
 *		What a bot reports about a leased item: complete(), complete_batch(),
 *		fail(), release(), extend_lease() and checkpoint().
 *
 * Every statement here names the item by (queue_name, item_id) and the
 * caller's lease_token, so a bot whose lease was taken over (the item
 * re-claimed under a new token) or ended (released, failed, buried)
 * matches no row: the call returns false or NULL and changes nothing.
 * That is the whole fencing rule, enforced by the row lock each UPDATE or
 * DELETE takes on the item.
 *
 * cancel() of a processing item negates its lease_token (and records who,
 * when and why, in SQL).  extend_lease() and checkpoint(), which look for
 * the token the bot holds, then find nothing; complete() still finds the
 * item by either sign and wins; fail() and release() of it make it a dead
 * letter (cancelled) instead of a retry (queue._cancel_end).  The sign
 * keeps these statements valid on a database whose schema predates the
 * cancel columns, until ALTER EXTENSION queue UPDATE.
 *
 * complete() moves the row to item_done in one DELETE ... RETURNING feeding
 * an INSERT.  complete_batch() finds each (item_id, lease_token) pair by
 * its primary key, one probe per pair, and deletes the versions found by
 * TID: no statistics (nor their absence before the first ANALYZE) can turn
 * it into a scan of the queue, nor into a join of every row with every
 * pair.  The TIDs are of versions the statement's snapshot sees; a row
 * updated since is followed to its latest version, whose token must still
 * be one of the caller's (a token names one lease of one item: the
 * sequence never repeats it).  fail() decides between a retry with backoff and a dead
 * letter; dead-lettering is an SQL function (queue._bury), off the common
 * path, and every outcome is reported to the breaker (breaker.c).
 *
 * src/ack.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "nodes/value.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_complete);
PG_FUNCTION_INFO_V1(queue_complete_batch);
PG_FUNCTION_INFO_V1(queue_fail);
PG_FUNCTION_INFO_V1(queue_release);
PG_FUNCTION_INFO_V1(queue_extend_lease);
PG_FUNCTION_INFO_V1(queue_checkpoint);

/*
 * Lookups repeated when the version an item lookup found was changed
 * before the statement got to it (item_lookup.c); each repeat follows a
 * change that committed meanwhile, so one suffices unless the item is
 * changed again and again.
 */
#define LOOKUP_MAX_RETRIES 3

static int	int64_cmp(const void *a, const void *b);

static SPIPlanPtr complete_tid_plan = NULL;
static SPIPlanPtr complete_batch_tid_plan = NULL;
static SPIPlanPtr dedup_done_plan = NULL;
static SPIPlanPtr dedup_done_batch_plan = NULL;
static SPIPlanPtr completed_events_plan = NULL;
static SPIPlanPtr fail_lock_plan = NULL;
static SPIPlanPtr fail_lock_plan_v1 = NULL;
static SPIPlanPtr failure_log_plan = NULL;
static SPIPlanPtr retry_plan = NULL;
static SPIPlanPtr citus_retry_plan = NULL;
static SPIPlanPtr bury_plan = NULL;
static SPIPlanPtr release_plan = NULL;
static SPIPlanPtr release_plan_v1 = NULL;
static SPIPlanPtr extend_plan = NULL;
static SPIPlanPtr extend_plan_v1 = NULL;
static SPIPlanPtr lease_lock_plan = NULL;
static SPIPlanPtr checkpoint_plan_v1 = NULL;
static SPIPlanPtr checkpoint_plan = NULL;
static SPIPlanPtr cancelled_plan = NULL;
static SPIPlanPtr cancel_end_plan = NULL;

/*
 * What a completion writes: the history row; the rows completed come back.
 * The completion is timed by its statement, as the claim is (claimed_at):
 * a bot that claims and completes in one transaction never finished before
 * it claimed.
 */
#define COMPLETE_HISTORY \
	"h AS (INSERT INTO queue.item_done (queue_name, item_id, payload, result, attempts, worker, " \
	"       enqueued_at, claimed_at, completed_at, dedup_key, correlation_id, progress) " \
	"SELECT queue_name, item_id, payload, $4, attempt, worker, enqueued_at, claimed_at, " \
	"       pg_catalog.statement_timestamp(), dedup_key, correlation_id, progress FROM d) " \
	"SELECT item_id, dedup_key, attempt, worker, lease_token" OP("<") "0 AS cancel_requested FROM d"

/*
 * complete's and complete_batch's statements on a plain server (under Citus:
 * queue_citus_complete), with the items found by TID
 * (item_lookup.c): $5 is the TID of complete's item, or of each of
 * complete_batch's items whose token matched.
 */
#define COMPLETE_TID_SQL \
	"WITH d AS (DELETE FROM queue.item_live " \
	"            WHERE ctid" OP("=") "$5 AND queue_name" OP("=") OUTER_QUEUE_FILTER \
	"              AND item_id" OP("=") "$2 AND pg_catalog.abs(lease_token)" OP("=") "$3 " \
	"           RETURNING *), " \
	COMPLETE_HISTORY

#define COMPLETE_BATCH_TID_SQL \
	"WITH d AS (DELETE FROM queue.item_live i " \
	"            WHERE i.ctid" OP("=") "ANY ($5) " \
	"              AND i.queue_name" OP("=") OUTER_QUEUE_FILTER " " \
	"              AND pg_catalog.abs(i.lease_token)" OP("=") "ANY ($3) " \
	"           RETURNING i.*), " \
	COMPLETE_HISTORY

#define DEDUP_DONE_SQL \
	"INSERT INTO queue.dedup_done (queue_name, dedup_key, item_id, completed_at) " \
	"VALUES ($1, $2, $3, pg_catalog.statement_timestamp()) " \
	"ON CONFLICT (queue_name, dedup_key) DO UPDATE " \
	"   SET item_id = EXCLUDED.item_id, completed_at = EXCLUDED.completed_at"

#define DEDUP_DONE_BATCH_SQL \
	"INSERT INTO queue.dedup_done (queue_name, dedup_key, item_id, completed_at) " \
	"SELECT $1, u.k, u.i, pg_catalog.statement_timestamp() " \
	"  FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($3::pg_catalog.int8[])) AS u(k, i) " \
	" WHERE u.k IS NOT NULL " \
	"ON CONFLICT (queue_name, dedup_key) DO UPDATE " \
	"   SET item_id = EXCLUDED.item_id, completed_at = EXCLUDED.completed_at"

/* a completion that overtook a cancel request says so, as log_completion's */
#define COMPLETED_EVENTS_SQL \
	"INSERT INTO queue.events (queue_name, item_id, kind, worker, attempt, details) " \
	"SELECT $1, u.i, 'completed', u.w, u.a, " \
	"       CASE WHEN u.c THEN '{\"cancel_requested\": true}'::pg_catalog.jsonb " \
	"            ELSE '{}'::pg_catalog.jsonb END " \
	"  FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.int8[]), pg_catalog.unnest($3::pg_catalog.text[]), " \
	"                  pg_catalog.unnest($4::pg_catalog.int4[]), " \
	"                  pg_catalog.unnest($5::pg_catalog.bool[])) AS u(i, w, a, c)"

#define FAIL_LOCK_SQL_WITH(lost_counted) \
	"SELECT attempt, max_attempts, worker, lease_token" OP("<") "0 AS cancel_requested, " \
	"       " lost_counted " AS lost_counted " \
	"  FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND item_id" OP("=") "$2 " \
	"   AND pg_catalog.abs(lease_token)" OP("=") "$3 FOR UPDATE"
#define FAIL_LOCK_SQL FAIL_LOCK_SQL_WITH("lost_counted")
/* before the update to 0.2.0 (lease losses were counted at re-claim only) */
#define FAIL_LOCK_SQL_V1 FAIL_LOCK_SQL_WITH("false")

/* is the caller's lease one whose cancel was requested? */
#define CANCELLED_SQL \
	"SELECT worker FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND item_id" OP("=") "$2 " \
	"   AND lease_token" OP("=") "(" OP("-") "$3) AND lease_token" OP("<") "0"

/* fail() or release() of a cancel-requested item: a dead letter (cancelled) */
#define CANCEL_END_SQL \
	"SELECT queue._cancel_end($1, $2, $3, $4, $5)"

/*
 * A failure is counted at the time of the fail() call (its statement's
 * start), as a completion is stamped in the history, not at the start of
 * its transaction: a bot that claims, works and fails inside one
 * transaction has its failure in the last hour and the breaker's window
 * when it reports it (queue._record_failure likewise).
 */
#define FAILURE_LOG_SQL \
	"INSERT INTO queue.failure_log (queue_name, item_id, attempt, worker, kind, error_code, error, at) " \
	"VALUES ($1, $2, $3, $4, $5, $6, $7, " \
	"        GREATEST(pg_catalog.statement_timestamp(), pg_catalog.now()))"

#define RETRY_SQL_WITH(attempt, worker) \
	"UPDATE queue.item_live " \
	"   SET lease_token = NULL, lease_expires_at = NULL, worker = NULL, " \
	"       visible_at = pg_catalog.now()" OP("+") "$3, " \
	"       run_at = pg_catalog.now()" OP("+") "$3, " \
	"       priority = base_priority, last_error = $4, error_code = $5, " \
	"       errors = errors" OP("||") "pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(" \
	"         'attempt', " attempt ", 'at', pg_catalog.now(), 'worker', " worker ", " \
	"         'error', $4, 'error_code', $5)) " \
	" WHERE queue_name" OP("=") "$1 AND item_id" OP("=") "$2 " \
	"RETURNING run_at"

#define RETRY_SQL RETRY_SQL_WITH("attempt", "worker")

/*
 * Under Citus, which refuses stable functions over the columns in an
 * UPDATE of a distributed table: the attempt and worker read under the
 * row lock, as parameters.
 */
#define CITUS_RETRY_SQL RETRY_SQL_WITH("$6", "$7")

#define BURY_SQL \
	"SELECT queue._bury($1, $2, $3, $4, $5)"

#define RELEASE_SQL_WITH(attempt) \
	"UPDATE queue.item_live i " \
	"   SET lease_token = NULL, lease_expires_at = NULL, worker = NULL, " \
	"       attempt = " attempt ", " \
	"       visible_at = greatest($4, pg_catalog.now()), run_at = $4, " \
	"       priority = i.base_priority " \
	"  FROM (SELECT x.worker, x.attempt FROM queue.item_live x " \
	"         WHERE x.queue_name" OP("=") "$1 AND x.item_id" OP("=") "$2) held " \
	" WHERE i.queue_name" OP("=") "$1 AND i.item_id" OP("=") "$2 " \
	"   AND i.lease_token" OP("=") "$3 AND i.lease_token" OP(">") "0 " \
	"RETURNING held.attempt, held.worker"

#define RELEASE_SQL RELEASE_SQL_WITH( \
	"CASE WHEN i.lost_counted THEN i.attempt " \
	"     ELSE greatest(i.attempt" OP("-") "1, 0) END, lost_counted = false")
/* before the update to 0.2.0 (no lost_counted: every release gives it back) */
#define RELEASE_SQL_V1 RELEASE_SQL_WITH("greatest(i.attempt" OP("-") "1, 0)")

#define EXTEND_SQL_WITH(session) \
	"UPDATE queue.item_live " \
	"   SET lease_expires_at = pg_catalog.statement_timestamp()" OP("+") "$4, " \
	"       visible_at = pg_catalog.statement_timestamp()" OP("+") "$4, " \
	"       cap_stripe = coalesce($5, cap_stripe) " \
	session \
	" WHERE queue_name" OP("=") "$1 AND item_id" OP("=") "$2 " \
	"   AND lease_token" OP("=") "$3 AND lease_token" OP(">") "0 " \
	"RETURNING lease_expires_at, worker"

/*
 * The lease's row, locked before anything is decided: whether the lease is
 * unexpired is judged once it is held (a statement's own test would use the
 * statement's start, so an extension that waited for the row past the
 * expiry would renew it without asking the caps; and Citus allows no clock
 * in an UPDATE's WHERE).
 */
#define LEASE_LOCK_SQL \
	"SELECT worker, cap_stripe, lease_expires_at FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND item_id" OP("=") "$2 " \
	"   AND lease_token" OP("=") "$3 AND lease_token" OP(">") "0 FOR UPDATE"

#define CHECKPOINT_SQL_WITH(session) \
	"UPDATE queue.item_live " \
	"   SET progress = coalesce(progress, '{}'::pg_catalog.jsonb)" OP("||") "$4 " \
	session \
	" WHERE queue_name" OP("=") "$1 AND item_id" OP("=") "$2 " \
	"   AND lease_token" OP("=") "$3 AND lease_token" OP(">") "0 " \
	"RETURNING progress, worker"

/* Extending or checkpointing a lease binds it to the calling connection
 * (src/worker.c); the column is absent before 0.2.0's update. */
#define LEASE_SESSION ", lease_session = queue._session_key() "
/* a revived lease that sweep counted as lost may be lost (and counted) again */
#define EXTEND_SQL EXTEND_SQL_WITH(LEASE_SESSION ", lost_counted = false ")
#define EXTEND_SQL_V1 EXTEND_SQL_WITH("")
#define CHECKPOINT_SQL CHECKPOINT_SQL_WITH(LEASE_SESSION)
#define CHECKPOINT_SQL_V1 CHECKPOINT_SQL_WITH("")

/*
 * Arguments every lease call starts with: (queue_name, item_id,
 * lease_token).  Validates them, loads the queue and checks worker access.
 * Leaves an SPI connection open.
 */
static char *
begin_lease_call(FunctionCallInfo fcinfo, QueueConfig *cfg)
{
	char	   *queue_name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));

	queue_check_not_null(PG_ARGISNULL(1), "item_id");
	queue_check_not_null(PG_ARGISNULL(2), "lease_token");
	queue_spi_connect();
	queue_load_config(queue_name, cfg);
	queue_check_access(cfg, QUEUE_ACCESS_WORKER);
	queue_check_writable(fcinfo);
	return queue_name;
}

/*
 * A completion that overtook a cancel request is recorded whatever the
 * audit level leaves out of completions ('none' still keeps nothing), so
 * that the events show the request and the completion that won.
 */
static void
log_completion(const char *queue_name, char audit, int64 item_id, const char *worker,
			   int32 attempt, bool cancel_requested)
{
	if (!cancel_requested)
		queue_log_event(queue_name, audit, item_id, "completed", worker, attempt, NULL);
	else
		queue_log_event(queue_name, audit == 'n' ? 'n' : 'a', item_id, "completed", worker,
						attempt, "{\"cancel_requested\": true}");
}

/*
 * fail() or release() of an item whose cancel was requested: it becomes a
 * dead letter (cancelled), with the bot's error, if any, in its errors,
 * and counts as no outcome (a probe is given back).  error_arg and
 * error_code_arg are the caller's argument numbers, -1 for none.  True when
 * the lease was current.
 */
static bool
end_cancelled(const QueueConfig *cfg, Datum *values, FunctionCallInfo fcinfo,
			  int error_arg, int error_code_arg)
{
	Oid			t[5] = {TEXTOID, INT8OID, INT8OID, TEXTOID, TEXTOID};
	Datum		v[5];
	char		n[5] = {' ', ' ', ' ', 'n', 'n'};
	bool		isnull;
	bool		done;

	v[0] = values[0];
	v[1] = values[1];
	v[2] = values[2];
	v[3] = v[4] = (Datum) 0;
	if (error_arg >= 0 && !PG_ARGISNULL(error_arg))
	{
		v[3] = PG_GETARG_DATUM(error_arg);
		n[3] = ' ';
	}
	if (error_code_arg >= 0 && !PG_ARGISNULL(error_code_arg))
	{
		v[4] = PG_GETARG_DATUM(error_code_arg);
		n[4] = ' ';
	}
	queue_spi_exec_one(queue_prepare_cached(&cancel_end_plan, CANCEL_END_SQL, 5, t),
					   v, n, false, 0, SPI_OK_SELECT, "ending cancelled item");
	done = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (done)
		queue_breaker_released(cfg, values[0], DatumGetInt64(values[1]));
	return done;
}

/*
 * record_completion
 *		What follows one completion: the dedup key kept for dedup_window,
 *		the completed event, the breaker's counts and the worker's sign of
 *		life.  values[0] and values[1] are the queue and the item id.
 */
static void
record_completion(QueueConfig *cfg, const char *queue_name, Datum *values, bool key_null,
				  Datum key, int32 attempts, const char *worker, bool cancel_requested)
{
	if (!key_null && cfg->has_dedup_window)
	{
		Oid			dt[3] = {TEXTOID, TEXTOID, INT8OID};
		Datum		dv[3];

		dv[0] = values[0];
		dv[1] = key;
		dv[2] = values[1];
		queue_spi_exec(queue_prepare_cached(&dedup_done_plan, DEDUP_DONE_SQL, 3, dt),
					   dv, NULL, false, 0, SPI_OK_INSERT, "recording dedup key");
	}
	log_completion(queue_name, cfg->audit, DatumGetInt64(values[1]), worker, attempts,
				   cancel_requested);
	queue_breaker_count(cfg, values[0], 1, 0);
	queue_breaker_outcome(cfg, values[0], DatumGetInt64(values[1]), true);
	if (worker != NULL)
		queue_worker_alive(CStringGetTextDatum(worker));
}

/*
 * queue.complete(queue_name text, item_id bigint, lease_token bigint,
 *				  result jsonb = NULL) returns boolean
 *
 * Moves the item to the history with result.  False when lease_token is
 * not the item's current lease (or the item is unknown).
 */
Datum
queue_complete(PG_FUNCTION_ARGS)
{
	QueueConfig cfg;
	char	   *queue_name = begin_lease_call(fcinfo, &cfg);
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	bool		done;

	if (!PG_ARGISNULL(3))
		queue_check_jsonb_size(PG_GETARG_DATUM(3), "result");
	values[0] = CStringGetTextDatum(queue_name);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	if (PG_ARGISNULL(3))
		nulls[3] = 'n';
	if (!queue_citus_loaded())
	{
		QueueCompleted c;

		switch (queue_complete_direct(values[0], DatumGetInt64(values[1]),
									  DatumGetInt64(values[2]), values[3], nulls[3] == 'n', &c))
		{
			case QUEUE_DIRECT_DONE:
				record_completion(&cfg, queue_name, values, c.key_null, c.key, c.attempts,
								  c.worker, c.cancel_requested);
				queue_spi_finish();
				PG_RETURN_BOOL(true);
			case QUEUE_DIRECT_NONE:
				queue_spi_finish();
				PG_RETURN_BOOL(false);
			case QUEUE_DIRECT_STATEMENT:
			case QUEUE_DIRECT_BUSY: /* (only other modes) */
			case QUEUE_DIRECT_NOT_HELD:
				break;
		}
	}
	if (queue_citus_loaded())
		queue_citus_complete(values, nulls, false);
	else
	{
		Oid			tidtypes[5] = {TEXTOID, INT8OID, INT8OID, JSONBOID, TIDOID};
		ItemPointerData tid;

		for (int tries = 0;; tries++)
		{
			Snapshot	snapshot = queue_lookup_snapshot();
			bool		found = queue_item_tid(snapshot, values[0], DatumGetInt64(values[1]),
											   0, &tid);

			values[4] = PointerGetDatum(&tid);
			nulls[4] = found ? ' ' : 'n';
			queue_spi_exec_fixed(queue_prepare_cached(&complete_tid_plan, COMPLETE_TID_SQL,
													  5, tidtypes),
								 values, nulls, snapshot, SPI_OK_SELECT, "completing item");
			UnregisterSnapshot(snapshot);
			/* the version found was changed meanwhile: find the new one */
			if (SPI_processed == 1 || !found || tries >= LOOKUP_MAX_RETRIES)
				break;
		}
	}
	done = (SPI_processed == 1);
	if (done)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		key_null;
		bool		isnull;
		Datum		key = SPI_getbinval(tup, desc, 2, &key_null);
		int32		attempts = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		char	   *worker = SPI_getvalue(tup, desc, 4);
		bool		cancel_requested = DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull));

		record_completion(&cfg, queue_name, values, key_null,
						  key_null ? (Datum) 0 : SPI_datumTransfer(key, false, -1),
						  attempts, worker, cancel_requested);
	}
	queue_spi_finish();
	PG_RETURN_BOOL(done);
}

/*
 * The shape of COMPLETE_HISTORY's result (item_id, dedup_key, attempt,
 * worker, cancel_requested), for the rows completed directly.
 */
static TupleDesc
completed_row_desc(void)
{
	TupleDesc	desc = CreateTemplateTupleDesc(5);

	TupleDescInitEntry(desc, 1, "item_id", INT8OID, -1, 0);
	TupleDescInitEntry(desc, 2, "dedup_key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 3, "attempt", INT4OID, -1, 0);
	TupleDescInitEntry(desc, 4, "worker", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 5, "cancel_requested", BOOLOID, -1, 0);
	return desc;
}

/* A pair of complete_batch: its item id and its place in the arrays. */
typedef struct PendingPair
{
	int64		id;
	int			pos;
} PendingPair;

static int
pending_pair_cmp(const void *a, const void *b)
{
	const PendingPair *x = (const PendingPair *) a;
	const PendingPair *y = (const PendingPair *) b;

	if (x->id != y->id)
		return (x->id > y->id) - (x->id < y->id);
	return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Rounds of taking a batch's items all at once (see complete_batch_by_tid). */
#define ALL_AT_ONCE_ROUNDS 10

/*
 * complete_direct_round
 *		One pass of complete_batch's direct completions (complete_direct.c)
 *		over the pairs todo[0 .. ntodo - 1] (positions in the arrays), in
 *		the completer mode given: the rows completed are appended to rows,
 *		the pairs the statement must do to stmt, and in QUEUE_COMPLETER_HELD
 *		mode the pairs whose items this transaction does not hold to later.
 *		In QUEUE_COMPLETER_NOWAIT mode returns true as soon as another
 *		transaction holds one of the items (*busy: its version); what the
 *		pass did is then to be rolled back.  With the direct path unusable
 *		every pair goes to stmt.
 */
static bool
complete_direct_round(Datum *values, char *nulls, Datum *id_elems, Datum *tok_elems,
					  QueueCompleterMode mode, const int *todo, int ntodo,
					  int *stmt, int *nstmt, int *later, int *nlater,
					  HeapTuple *rows, int *nrows, TupleDesc desc, ItemPointer busy)
{
	QueueCompleter *c = queue_completer_begin(mode);

	if (c == NULL)
	{
		memmove(stmt + *nstmt, todo, sizeof(int) * ntodo);	/* (todo may be stmt) */
		*nstmt += ntodo;
		return false;
	}
	for (int p = 0; p < ntodo; p++)
	{
		int			i = todo[p];
		QueueCompleted done;
		Datum		rv[5];
		bool		rn[5] = {false, false, false, false, false};

		CHECK_FOR_INTERRUPTS();
		switch (queue_completer_one(c, values[0], DatumGetInt64(id_elems[i]),
									DatumGetInt64(tok_elems[i]), values[3],
									nulls[3] == 'n', &done))
		{
			case QUEUE_DIRECT_DONE:
				rv[0] = id_elems[i];
				rv[1] = done.key;
				rn[1] = done.key_null;
				rv[2] = Int32GetDatum(done.attempts);
				rv[3] = done.worker ? CStringGetTextDatum(done.worker) : (Datum) 0;
				rn[3] = done.worker == NULL;
				rv[4] = BoolGetDatum(done.cancel_requested);
				rows[(*nrows)++] = heap_form_tuple(desc, rv, rn);
				break;
			case QUEUE_DIRECT_STATEMENT:
				stmt[(*nstmt)++] = i;
				break;
			case QUEUE_DIRECT_NONE:
				break;
			case QUEUE_DIRECT_NOT_HELD:
				later[(*nlater)++] = i;
				break;
			case QUEUE_DIRECT_BUSY:
				*busy = done.busy;
				queue_completer_end(c);
				return true;
		}
	}
	queue_completer_end(c);
	return false;
}

/*
 * complete_direct_round_at_once
 *		complete_direct_round in QUEUE_COMPLETER_NOWAIT mode, in a
 *		subtransaction that is rolled back when an item is busy (returns
 *		true, *busy its version), kept otherwise.
 */
static bool
complete_direct_round_at_once(Datum *values, char *nulls, Datum *id_elems, Datum *tok_elems,
							  const int *todo, int ntodo, int *stmt, int *nstmt,
							  HeapTuple *rows, int *nrows, TupleDesc desc, ItemPointer busy)
{
	QueueSubxact sx;
	bool		is_busy;

	queue_subxact_begin(&sx);
	PG_TRY();
	{
		is_busy = complete_direct_round(values, nulls, id_elems, tok_elems,
										QUEUE_COMPLETER_NOWAIT, todo, ntodo, stmt, nstmt,
										NULL, NULL, rows, nrows, desc, busy);
	}
	PG_CATCH();
	{
		ReThrowError(queue_subxact_catch(&sx));
	}
	PG_END_TRY();
	queue_subxact_end(&sx, !is_busy);
	return is_busy;
}

/*
 * complete_batch_by_tid
 *		complete_batch on a plain server: the items of (ids, toks) pairs
 *		whose token is the item's current lease are completed directly
 *		(complete_direct.c); those the direct path leaves to the statement
 *		are found through the primary key (item_lookup.c) and deleted by
 *		TID.  A pair whose
 *		version was changed after the lookup's snapshot (a heartbeat, a
 *		cancel request) is looked up again, up to LOOKUP_MAX_RETRIES
 *		times.  Returns the rows completed.
 */
static void
complete_batch_by_tid(Datum *values, char *nulls, ArrayType *ids, ArrayType *toks,
					  HeapTuple **rows_out, TupleDesc *desc_out, int *nrows_out)
{
	Oid			tidtypes[5] = {TEXTOID, INT8ARRAYOID, INT8ARRAYOID, JSONBOID, TIDARRAYOID};
	Datum	   *id_elems;
	Datum	   *tok_elems;
	bool	   *id_nulls;
	bool	   *tok_nulls;
	int			nids;
	int			ntoks;
	int		   *pending;
	int			npending = 0;
	HeapTuple  *rows;
	int			nrows = 0;
	TupleDesc	desc = NULL;

	deconstruct_array(ids, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &id_elems, &id_nulls, &nids);
	deconstruct_array(toks, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &tok_elems, &tok_nulls, &ntoks);
	pending = palloc(sizeof(int) * Max(nids, 1));
	rows = palloc(sizeof(HeapTuple) * Max(nids, 1));
	for (int i = 0; i < nids && i < ntoks; i++)
		if (!id_nulls[i] && !tok_nulls[i] && DatumGetInt64(tok_elems[i]) > 0)
			pending[npending++] = i;

	/*
	 * Lock order, items first and in item id order (as heartbeat, restart
	 * and sweep take them): the pairs are completed in id order, not in the
	 * order the caller gave (dequeue's claim order), or a batch and a
	 * heartbeat of its worker could each hold an item the other waits for.
	 */
	if (npending > 1)
	{
		PendingPair *pairs = palloc(sizeof(PendingPair) * npending);

		for (int p = 0; p < npending; p++)
		{
			pairs[p].id = DatumGetInt64(id_elems[pending[p]]);
			pairs[p].pos = pending[p];
		}
		qsort(pairs, npending, sizeof(PendingPair), pending_pair_cmp);
		for (int p = 0; p < npending; p++)
			pending[p] = pairs[p].pos;
		pfree(pairs);
	}

	/*
	 * Directly where possible (complete_direct.c), the rest by statement.
	 * A batch of several items takes them all at once: it never waits for
	 * one while it holds another, since a producer's enqueue_batch locks the
	 * holders of its keys in key order, not in item id order.  The items
	 * this transaction holds already (claimed in it) go first: no other
	 * transaction can hold them.  Of the others, when another transaction
	 * holds one, all are let go again (the round's subtransaction is rolled
	 * back), that one is waited for alone, and it starts over; after
	 * ALL_AT_ONCE_ROUNDS rounds it waits for each in item id order.
	 */
	if (npending > 0)
	{
		int		   *todo = palloc(sizeof(int) * npending);
		int			ntodo = 0;
		int			nstmt = 0;

		desc = completed_row_desc();
		if (npending > 1 && TransactionIdIsValid(GetTopTransactionIdIfAny()))
			(void) complete_direct_round(values, nulls, id_elems, tok_elems,
										 QUEUE_COMPLETER_HELD, pending, npending,
										 pending, &nstmt, todo, &ntodo, rows, &nrows,
										 desc, NULL);
		else
		{
			memcpy(todo, pending, sizeof(int) * npending);
			ntodo = npending;
		}
		for (int round = 0, nrows0 = nrows, nstmt0 = nstmt; ntodo > 0; round++)
		{
			ItemPointerData busy;

			if (ntodo == 1 || round >= ALL_AT_ONCE_ROUNDS)
			{
				(void) complete_direct_round(values, nulls, id_elems, tok_elems,
											 QUEUE_COMPLETER_WAIT, todo, ntodo,
											 pending, &nstmt, NULL, NULL, rows, &nrows,
											 desc, NULL);
				break;
			}
			if (!complete_direct_round_at_once(values, nulls, id_elems, tok_elems,
											   todo, ntodo, pending, &nstmt,
											   rows, &nrows, desc, &busy))
				break;
			nrows = nrows0;
			nstmt = nstmt0;
			queue_completer_wait(&busy);
		}
		npending = nstmt;
		pfree(todo);
	}

	for (int tries = 0; npending > 0; tries++)
	{
		Snapshot	snapshot = queue_lookup_snapshot();
		QueueItemLookup *lookup = queue_item_lookup_begin(snapshot);
		ItemPointerData *tids = palloc(sizeof(ItemPointerData) * npending);
		Datum	   *tid_elems = palloc(sizeof(Datum) * npending);
		int			ntids = 0;
		int			nfound = 0;
		int64	   *done_ids;
		int			ndone_now;

		for (int p = 0; p < npending; p++)
		{
			int			i = pending[p];

			CHECK_FOR_INTERRUPTS();
			if (queue_item_lookup(lookup, values[0], DatumGetInt64(id_elems[i]),
								  DatumGetInt64(tok_elems[i]), &tids[ntids]))
			{
				tid_elems[ntids] = PointerGetDatum(&tids[ntids]);
				ntids++;
				pending[nfound++] = i;
			}
		}
		queue_item_lookup_end(lookup);
		npending = nfound;
		values[4] = PointerGetDatum(construct_array(tid_elems, ntids, TIDOID,
													sizeof(ItemPointerData), false,
													TYPALIGN_SHORT));
		nulls[4] = ' ';
		queue_spi_exec_fixed(queue_prepare_cached(&complete_batch_tid_plan, COMPLETE_BATCH_TID_SQL,
												  5, tidtypes),
							 values, nulls, snapshot, SPI_OK_SELECT, "completing items");
		UnregisterSnapshot(snapshot);

		ndone_now = (int) SPI_processed;
		desc = SPI_tuptable->tupdesc;
		done_ids = palloc(sizeof(int64) * Max(ndone_now, 1));
		for (int r = 0; r < ndone_now; r++)
		{
			bool		isnull;

			rows[nrows++] = SPI_tuptable->vals[r];
			done_ids[r] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], desc, 1, &isnull));
		}
		if (ndone_now >= npending || tries >= LOOKUP_MAX_RETRIES)
			break;

		/* what was found but not completed was changed meanwhile: again */
		qsort(done_ids, ndone_now, sizeof(int64), int64_cmp);
		nfound = 0;
		for (int p = 0; p < npending; p++)
		{
			int64		id = DatumGetInt64(id_elems[pending[p]]);

			if (bsearch(&id, done_ids, ndone_now, sizeof(int64), int64_cmp) == NULL)
				pending[nfound++] = pending[p];
		}
		npending = nfound;
	}
	*rows_out = rows;
	*desc_out = desc;
	*nrows_out = nrows;
}

static int
int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * queue.complete_batch(queue_name text, item_ids bigint[],
 *						lease_tokens bigint[], result jsonb = NULL)
 *	returns int
 *
 * Completes every (item_id, lease_token) pair whose token is current in
 * one statement; returns how many were completed.
 */
Datum
queue_complete_batch(PG_FUNCTION_ARGS)
{
	char	   *queue_name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	QueueConfig cfg;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	ArrayType  *ids;
	ArrayType  *toks;
	int			ndone;
	char	  **alive;
	int			nalive = 0;
	HeapTuple  *done_rows;
	TupleDesc	done_desc;

	queue_check_not_null(PG_ARGISNULL(1), "item_ids");
	queue_check_not_null(PG_ARGISNULL(2), "lease_tokens");
	ids = PG_GETARG_ARRAYTYPE_P(1);
	toks = PG_GETARG_ARRAYTYPE_P(2);
	queue_check_one_dimensional(ids, "item_ids");
	queue_check_one_dimensional(toks, "lease_tokens");
	queue_check_batch_length(ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)), "item_ids");
	queue_check_no_null_elements(ids, "item_ids",
								 "Pass the item_id and lease_token dequeue returned for each item to complete.");
	queue_check_no_null_elements(toks, "lease_tokens",
								 "Pass the item_id and lease_token dequeue returned for each item to complete.");
	if (!PG_ARGISNULL(3))
		queue_check_jsonb_size(PG_GETARG_DATUM(3), "result");
	if (ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)) !=
		ArrayGetNItems(ARR_NDIM(toks), ARR_DIMS(toks)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("item_ids has %d elements but lease_tokens has %d",
						ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)),
						ArrayGetNItems(ARR_NDIM(toks), ARR_DIMS(toks))),
				 errhint("Pass the lease_token dequeue returned with each item_id, in the same order.")));

	queue_spi_connect();
	queue_load_config(queue_name, &cfg);
	queue_check_access(&cfg, QUEUE_ACCESS_WORKER);
	queue_check_writable(fcinfo);

	values[0] = CStringGetTextDatum(queue_name);
	values[1] = PointerGetDatum(ids);
	values[2] = PointerGetDatum(toks);
	values[3] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	if (PG_ARGISNULL(3))
		nulls[3] = 'n';
	if (queue_citus_loaded())
	{
		queue_citus_complete(values, nulls, true);
		ndone = (int) SPI_processed;
		done_rows = SPI_tuptable->vals;
		done_desc = SPI_tuptable->tupdesc;
	}
	else
		complete_batch_by_tid(values, nulls, ids, toks, &done_rows, &done_desc, &ndone);

	/* completions that overtook a cancel request ('all' records every one below) */
	for (int r = 0; r < ndone && cfg.audit == 'f'; r++)
	{
		HeapTuple	tup = done_rows[r];
		TupleDesc	desc = done_desc;
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		if (DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull)))
			log_completion(queue_name, cfg.audit,
						   DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull)),
						   SPI_getvalue(tup, desc, 4),
						   DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull)), true);
	}

	/*
	 * Each worker of the batch (usually one) gave a sign of life, below:
	 * the names sorted, so that each distinct one is seen once however
	 * many items and workers the batch has.
	 */
	alive = palloc(sizeof(char *) * Max(ndone, 1));
	for (int r = 0; r < ndone; r++)
	{
		char	   *w = SPI_getvalue(done_rows[r], done_desc, 4);

		CHECK_FOR_INTERRUPTS();
		if (w != NULL)
			alive[nalive++] = w;
	}
	qsort(alive, nalive, sizeof(char *), pg_qsort_strcmp);

	queue_breaker_count(&cfg, values[0], ndone, 0);
	if (ndone > 0 && (cfg.has_dedup_window || cfg.audit == 'a' || cfg.breaker_state == 'p'))
	{
				Datum	   *done_ids = palloc(sizeof(Datum) * ndone);
		Datum	   *keys = palloc(sizeof(Datum) * ndone);
		bool	   *key_nulls = palloc(sizeof(bool) * ndone);
		Datum	   *workers = palloc(sizeof(Datum) * ndone);
		bool	   *worker_nulls = palloc(sizeof(bool) * ndone);
		Datum	   *attempts = palloc(sizeof(Datum) * ndone);
		bool	   *attempt_nulls = palloc(sizeof(bool) * ndone);
		Datum	   *cancels = palloc(sizeof(Datum) * ndone);
		int			dims[1] = {ndone};
		int			lbs[1] = {1};
		bool		isnull;

		for (int r = 0; r < ndone; r++)
		{
			CHECK_FOR_INTERRUPTS();
			done_ids[r] = SPI_getbinval(done_rows[r], done_desc, 1, &isnull);
			keys[r] = SPI_getbinval(done_rows[r], done_desc, 2, &key_nulls[r]);
			attempts[r] = SPI_getbinval(done_rows[r], done_desc, 3, &attempt_nulls[r]);
			workers[r] = SPI_getbinval(done_rows[r], done_desc, 4, &worker_nulls[r]);
			cancels[r] = SPI_getbinval(done_rows[r], done_desc, 5, &isnull);
			if (isnull)
				cancels[r] = BoolGetDatum(false);
		}
		if (cfg.has_dedup_window)
		{
			Oid			dt[3] = {TEXTOID, TEXTARRAYOID, INT8ARRAYOID};
			Datum		dv[3];

			dv[0] = values[0];
			dv[1] = PointerGetDatum(construct_md_array(keys, key_nulls, 1, dims, lbs,
													   TEXTOID, -1, false, TYPALIGN_INT));
			dv[2] = PointerGetDatum(construct_array(done_ids, ndone, INT8OID, 8,
													FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			queue_spi_exec(queue_prepare_cached(&dedup_done_batch_plan, DEDUP_DONE_BATCH_SQL, 3, dt),
						   dv, NULL, false, 0, SPI_OK_INSERT, "recording dedup keys");
		}
		if (cfg.audit == 'a')
		{
			Oid			et[5] = {TEXTOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID, BOOLARRAYOID};
			Datum		ev[5];

			ev[0] = values[0];
			ev[1] = PointerGetDatum(construct_array(done_ids, ndone, INT8OID, 8,
													FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			ev[2] = PointerGetDatum(construct_md_array(workers, worker_nulls, 1, dims, lbs,
													   TEXTOID, -1, false, TYPALIGN_INT));
			ev[3] = PointerGetDatum(construct_md_array(attempts, attempt_nulls, 1, dims, lbs,
													   INT4OID, 4, true, TYPALIGN_INT));
			ev[4] = PointerGetDatum(construct_array(cancels, ndone, BOOLOID, 1, true,
													TYPALIGN_CHAR));
			queue_spi_exec(queue_prepare_cached(&completed_events_plan, COMPLETED_EVENTS_SQL, 5, et),
						   ev, NULL, false, 0, SPI_OK_INSERT, "recording events");
		}
		for (int r = 0; r < ndone; r++)
		{
			CHECK_FOR_INTERRUPTS();
			queue_breaker_outcome(&cfg, values[0], DatumGetInt64(done_ids[r]), true);
		}
	}
	for (int i = 0; i < nalive; i++)
		if (i == 0 || strcmp(alive[i], alive[i - 1]) != 0)
			queue_worker_alive(CStringGetTextDatum(alive[i]));
	queue_spi_finish();
	PG_RETURN_INT32(ndone);
}

/*
 * Backoff before the next attempt after a transient failure of `attempt`:
 * least(backoff_max, backoff_base * backoff_factor^(attempt-1)), spread by
 * +/- backoff_jitter, computed as that SQL expression computes it on
 * intervals (interval * float8, least by interval comparison), so that
 * once added to now() a month of backoff is a calendar month and a year a
 * calendar year, as for fail's retry_in.  A power too large for a float8
 * (a large factor, or many attempts), or a product far past backoff_max,
 * is capped at backoff_max before any multiplication could overflow an
 * interval; a backoff_base of 0 stays 0 (0 times an overflowed power is
 * NaN, not the cap).
 */
static Interval
backoff_interval(const QueueConfig *cfg, int32 attempt)
{
	double		power = pow(cfg->backoff_factor, Max(attempt - 1, 0));
	double		approx = cfg->backoff_base_s * power;
	Interval	delay;

	if (cfg->backoff_base_s <= 0)
	{
		memset(&delay, 0, sizeof(delay));
		return delay;
	}
	if (isinf(approx) || isnan(approx) || approx > 2.0 * cfg->backoff_max_s)
		delay = cfg->backoff_max;
	else
	{
		delay = *DatumGetIntervalP(DirectFunctionCall2(interval_mul,
													   IntervalPGetDatum(&cfg->backoff_base),
													   Float8GetDatum(power)));
		if (DatumGetInt32(DirectFunctionCall2(interval_cmp, IntervalPGetDatum(&delay),
											  IntervalPGetDatum(&cfg->backoff_max))) > 0)
			delay = cfg->backoff_max;
	}
	if (cfg->backoff_jitter > 0)
		delay = *DatumGetIntervalP(DirectFunctionCall2(interval_mul, IntervalPGetDatum(&delay),
													   Float8GetDatum(1.0 + cfg->backoff_jitter *
																	  (2.0 * pg_prng_double(&pg_global_prng_state) - 1.0))));
	return delay;
}

/*
 * queue.fail(queue_name text, item_id bigint, lease_token bigint,
 *			  error text, error_code text = NULL, permanent boolean = false,
 *			  retry_in interval = NULL) returns text
 *
 * Reports a failed attempt.  Returns 'retrying' when the item will be
 * claimable again after the backoff (or exactly retry_in, no jitter),
 * 'dead' when it became a dead letter (permanent, or its attempts are
 * spent), NULL when lease_token is not the item's current lease.
 */
Datum
queue_fail(PG_FUNCTION_ARGS)
{
	QueueConfig cfg;
	char	   *queue_name;
	bool		permanent;
	Oid			argtypes[3] = {TEXTOID, INT8OID, INT8OID};
	Datum		values[3];
	int32		attempt;
	int32		max_attempts;
	bool		isnull;
	bool		worker_null;
	Datum		worker;
	bool		dead;
	const char *outcome;
	double		retry_s = -1;

	queue_check_not_null(PG_ARGISNULL(3), "error");
	queue_check_not_null(PG_ARGISNULL(5), "permanent");
	queue_check_text_size(PG_GETARG_DATUM(3), "error");
	if (!PG_ARGISNULL(4))
		queue_check_text_size(PG_GETARG_DATUM(4), "error_code");
	permanent = PG_GETARG_BOOL(5);
	if (!PG_ARGISNULL(6))
	{
		Interval   *iv = PG_GETARG_INTERVAL_P(6);

		retry_s = queue_interval_seconds(iv);
		if (retry_s < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("retry_in must not be negative, not \"%s\"",
							DatumGetCString(DirectFunctionCall1(interval_out,
																IntervalPGetDatum(iv)))),
					 errhint("Pass '0 s' to make the item claimable again at once.")));
		queue_check_interval_bound(iv, "retry_in");
	}
	queue_name = begin_lease_call(fcinfo, &cfg);

	values[0] = CStringGetTextDatum(queue_name);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	queue_spi_exec(queue_schema_current() ?
				   queue_prepare_cached(&fail_lock_plan, FAIL_LOCK_SQL, 3, argtypes) :
				   queue_prepare_cached(&fail_lock_plan_v1, FAIL_LOCK_SQL_V1, 3, argtypes),
				   values, NULL, false, 1, SPI_OK_SELECT, "locking item");
	if (SPI_processed == 0)
	{
		queue_spi_finish();
		PG_RETURN_NULL();
	}
	attempt = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	max_attempts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	worker = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &worker_null),
							   false, -1);
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull)))
	{
		/* cancel requested: a dead letter, no retry and no failed outcome */
		end_cancelled(&cfg, values, fcinfo, 3, 4);
		if (!worker_null)
			queue_worker_alive(worker);
		queue_spi_finish();
		PG_RETURN_TEXT_P(cstring_to_text("dead"));
	}
	dead = permanent || attempt >= max_attempts;

	/*
	 * The failed attempt, for failed_1h, the breaker and worker stats;
	 * unless sweep already counted this lease as lost: a late fail by its
	 * holder is the same attempt, counted once.
	 */
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull)))
	{
		Oid			ft[7] = {TEXTOID, INT8OID, INT4OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Datum		fv[7];
		char		fn[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

		fv[0] = values[0];
		fv[1] = values[1];
		fv[2] = Int32GetDatum(attempt);
		fv[3] = worker;
		fn[3] = worker_null ? 'n' : ' ';
		fv[4] = CStringGetTextDatum(permanent ? "permanent" : "transient");
		fv[5] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
		fn[5] = PG_ARGISNULL(4) ? 'n' : ' ';
		fv[6] = PG_GETARG_DATUM(3);
		queue_spi_exec(queue_prepare_cached(&failure_log_plan, FAILURE_LOG_SQL, 7, ft),
					   fv, fn, false, 0, SPI_OK_INSERT, "recording failure");
		queue_breaker_count(&cfg, values[0], 0, 1);
	}
	{
		char	   *code = PG_ARGISNULL(4) ? NULL : TextDatumGetCString(PG_GETARG_DATUM(4));
		char	   *err = TextDatumGetCString(PG_GETARG_DATUM(3));
		StringInfoData details;

		initStringInfo(&details);
		appendStringInfoString(&details, "{\"error\": ");
		escape_json(&details, err);
		appendStringInfoString(&details, ", \"error_code\": ");
		if (code)
			escape_json(&details, code);
		else
			appendStringInfoString(&details, "null");
		appendStringInfo(&details, ", \"permanent\": %s}", permanent ? "true" : "false");
		queue_log_event(queue_name, cfg.audit, DatumGetInt64(values[1]), "failed",
						worker_null ? NULL : TextDatumGetCString(worker), attempt, details.data);
	}

	if (dead)
	{
		Oid			bt[5] = {TEXTOID, INT8OID, TEXTOID, TEXTOID, TEXTOID};
		Datum		bv[5];
		char		bn[5] = {' ', ' ', ' ', ' ', ' '};

		bv[0] = values[0];
		bv[1] = values[1];
		bv[2] = CStringGetTextDatum(permanent ? "permanent" : "max_attempts");
		bv[3] = PG_GETARG_DATUM(3);
		bv[4] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
		bn[4] = PG_ARGISNULL(4) ? 'n' : ' ';
		queue_spi_exec(queue_prepare_cached(&bury_plan, BURY_SQL, 5, bt),
					   bv, bn, false, 0, SPI_OK_SELECT, "dead-lettering");
		outcome = "dead";
	}
	else
	{
		Oid			rt[7] = {TEXTOID, INT8OID, INTERVALOID, TEXTOID, TEXTOID, INT4OID, TEXTOID};
		Datum		rv[7];
		char		rn[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
		char		details[128];
		Interval	backoff;

		rv[0] = values[0];
		rv[1] = values[1];
		if (retry_s < 0)
		{
			/* the backoff, an interval added to now() as retry_in is */
			backoff = backoff_interval(&cfg, attempt);
			rv[2] = IntervalPGetDatum(&backoff);
		}
		else
		{
			/* retry_in as given: a month is a calendar month, a day a calendar day */
			rv[2] = PG_GETARG_DATUM(6);
		}
		rv[3] = PG_GETARG_DATUM(3);
		rv[4] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
		rn[4] = PG_ARGISNULL(4) ? 'n' : ' ';
		rv[5] = Int32GetDatum(attempt);
		rv[6] = worker;
		rn[6] = worker_null ? 'n' : ' ';
		queue_spi_exec_one(queue_citus_loaded() ?
						   queue_prepare_cached(&citus_retry_plan, CITUS_RETRY_SQL, 7, rt) :
						   queue_prepare_cached(&retry_plan, RETRY_SQL, 5, rt),
						   rv, rn, false, 0, SPI_OK_UPDATE_RETURNING, "scheduling retry");

		/*
		 * The wait the event reports is the one the item got, from now() to
		 * its run_at: a month or a year of retry_in or backoff is a calendar
		 * one, which queue_interval_seconds would count as 30 or 360 days.
		 */
		{
			bool		isnull;
			TimestampTz run_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
																   SPI_tuptable->tupdesc,
																   1, &isnull));

			retry_s = (double) (run_at - GetCurrentTransactionStartTimestamp()) / USECS_PER_SEC;
		}
		snprintf(details, sizeof(details), "{\"retry_in_seconds\": %.3f}", retry_s);
		queue_log_event(queue_name, cfg.audit, DatumGetInt64(values[1]), "retrying",
						worker_null ? NULL : TextDatumGetCString(worker), attempt, details);
		outcome = "retrying";
	}

	queue_breaker_outcome(&cfg, values[0], DatumGetInt64(values[1]), false);
	if (!worker_null)
		queue_worker_alive(worker);
	queue_spi_finish();
	PG_RETURN_TEXT_P(cstring_to_text(outcome));
}

/*
 * queue.release(queue_name text, item_id bigint, lease_token bigint,
 *				 run_at timestamptz = now()) returns boolean
 *
 * Gives a leased item back without counting the attempt (graceful
 * shutdown); it is claimable again from run_at (NULL = now).  A lease
 * that ran out and was already counted as lost (sweep or a dequeue met
 * it) keeps its attempt: that attempt was counted as failed.
 */
Datum
queue_release(PG_FUNCTION_ARGS)
{
	QueueConfig cfg;
	char	   *queue_name = begin_lease_call(fcinfo, &cfg);
	Oid			argtypes[4] = {TEXTOID, INT8OID, INT8OID, TIMESTAMPTZOID};
	Datum		values[4];
	bool		done;

	if (!PG_ARGISNULL(3))
		queue_check_run_at(PG_GETARG_TIMESTAMPTZ(3));
	values[0] = CStringGetTextDatum(queue_name);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = PG_ARGISNULL(3) ? TimestampTzGetDatum(GetCurrentTransactionStartTimestamp())
		: PG_GETARG_DATUM(3);
	queue_spi_exec(queue_schema_current() ?
				   queue_prepare_cached(&release_plan, RELEASE_SQL, 4, argtypes) :
				   queue_prepare_cached(&release_plan_v1, RELEASE_SQL_V1, 4, argtypes),
				   values, NULL, false, 0, SPI_OK_UPDATE_RETURNING, "releasing item");
	done = (SPI_processed == 1);
	if (done)
	{
		bool		isnull;
		int32		attempt = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
														  SPI_tuptable->tupdesc, 1, &isnull));
		char	   *worker = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

		/* the lease that ended: its worker and the attempt given back */
		queue_log_event(queue_name, cfg.audit, DatumGetInt64(values[1]), "released",
						worker, attempt, NULL);
		queue_breaker_released(&cfg, values[0], DatumGetInt64(values[1]));
		if (worker != NULL)
			queue_worker_alive(CStringGetTextDatum(worker));
	}
	else
	{
		/*
		 * NB: a cancel-requested lease (negated token) ends here instead.
		 * Read with a new snapshot: the release may have waited for the
		 * cancel that negated the token, committed after this statement
		 * began.
		 */
		Oid			t[3] = {TEXTOID, INT8OID, INT8OID};

		queue_spi_exec(queue_prepare_cached(&cancelled_plan, CANCELLED_SQL, 3, t),
					   values, NULL, false, 1, SPI_OK_SELECT, "looking for a cancel request");
		if (SPI_processed == 1)
		{
			char	   *worker = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

			done = end_cancelled(&cfg, values, fcinfo, -1, -1);
			if (done && worker != NULL)
				queue_worker_alive(CStringGetTextDatum(worker));
		}
	}
	queue_spi_finish();
	PG_RETURN_BOOL(done);
}

/*
 * queue.extend_lease(queue_name text, item_id bigint, lease_token bigint,
 *					  extend_by interval = NULL) returns timestamptz
 *
 * Sets the lease's expiry to the statement's start + extend_by (NULL: the queue's
 * lease_timeout); returns it, or NULL when the lease is not current.
 */
Datum
queue_extend_lease(PG_FUNCTION_ARGS)
{
	QueueConfig cfg;
	char	   *queue_name;
	Oid			argtypes[5] = {TEXTOID, INT8OID, INT8OID, INTERVALOID, INT2OID};
	Datum		values[5];
	char		nulls[6] = "    n";
	Interval	by;
	Datum		result = (Datum) 0;
	bool		found;

	if (!PG_ARGISNULL(3))
	{
		by = *PG_GETARG_INTERVAL_P(3);
		queue_check_positive_interval(&by, "extend_by");
	}
	queue_name = begin_lease_call(fcinfo, &cfg);
	if (PG_ARGISNULL(3))
		by = cfg.lease_timeout;
	values[0] = CStringGetTextDatum(queue_name);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = IntervalPGetDatum(&by);
	values[4] = (Datum) 0;		/* the cap's share charged, when it changes */
	queue_spi_exec(queue_prepare_cached(&lease_lock_plan, LEASE_LOCK_SQL, 3, argtypes),
				   values, NULL, false, 1, SPI_OK_SELECT, "locking item");
	if (SPI_processed == 0)
	{
		queue_spi_finish();
		PG_RETURN_NULL();
	}
	else
	{
		bool		worker_null;
		bool		stripe_null;
		bool		isnull;
		Datum		worker;
		int			stripe;
		TimestampTz expires;

		worker = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
												 &worker_null), false, -1);
		stripe = DatumGetInt16(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
											 &stripe_null));
		expires = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
													3, &isnull));

		/*
		 * Caps stay exact: reviving an expired lease nobody re-claimed is a
		 * claim, refused (NULL) where the queue's or the worker's cap is full;
		 * charged, like a claim, to a share of the queue's cap with room.
		 */
		if (!isnull && expires <= GetCurrentTimestamp() && !worker_null)
		{
			int			charge;

			if (!queue_cap_admits_revival(&cfg, values[0], worker, DatumGetInt64(values[1]),
										  stripe_null ? -1 : stripe, &charge))
			{
				queue_spi_finish();
				PG_RETURN_NULL();
			}
			if (charge >= 0)
			{
				values[4] = Int16GetDatum((int16) charge);
				nulls[4] = ' ';
			}
		}
	}
	queue_spi_exec(queue_schema_current() ?
				   queue_prepare_cached(&extend_plan, EXTEND_SQL, 5, argtypes) :
				   queue_prepare_cached(&extend_plan_v1, EXTEND_SQL_V1, 5, argtypes),
				   values, nulls, false, 0, SPI_OK_UPDATE_RETURNING, "extending lease");
	found = (SPI_processed == 1);
	if (found)
	{
		bool		isnull;
		char	   *worker = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (worker != NULL)
			queue_worker_alive(CStringGetTextDatum(worker));
		/* the half-open probe lasts as long as its lease */
		queue_breaker_extended(&cfg, values[0], DatumGetInt64(values[1]),
							   DatumGetTimestampTz(result));
	}
	queue_spi_finish();
	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/*
 * queue.checkpoint(queue_name text, item_id bigint, lease_token bigint,
 *					progress jsonb) returns boolean
 *
 * Merges progress (a JSON object) into the item's progress, which
 * survives retries, dead-lettering and replay.
 */
Datum
queue_checkpoint(PG_FUNCTION_ARGS)
{
	QueueConfig cfg;
	char	   *queue_name;
	Oid			argtypes[4] = {TEXTOID, INT8OID, INT8OID, JSONBOID};
	Datum		values[4];
	Jsonb	   *progress;
	bool		done;

	queue_check_not_null(PG_ARGISNULL(3), "progress");
	progress = PG_GETARG_JSONB_P(3);
	if (!JB_ROOT_IS_OBJECT(progress))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("progress must be a JSON object"),
				 errhint("Pass an object such as '{\"step\": 2}'; its keys are merged into the item's progress.")));
	queue_check_jsonb_size(PG_GETARG_DATUM(3), "progress");
	queue_name = begin_lease_call(fcinfo, &cfg);
	values[0] = CStringGetTextDatum(queue_name);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = JsonbPGetDatum(progress);
	queue_spi_exec(queue_schema_current() ?
				   queue_prepare_cached(&checkpoint_plan, CHECKPOINT_SQL, 4, argtypes) :
				   queue_prepare_cached(&checkpoint_plan_v1, CHECKPOINT_SQL_V1, 4, argtypes),
				   values, NULL, false, 0, SPI_OK_UPDATE_RETURNING, "checkpoint");
	done = (SPI_processed == 1);
	if (done)
	{
		bool		isnull;
		char	   *worker = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

		/* the merged progress is bounded, not only the piece (the error undoes it) */
		queue_check_jsonb_size(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											 1, &isnull), "progress");
		if (worker != NULL)
			queue_worker_alive(CStringGetTextDatum(worker));
	}
	queue_spi_finish();
	PG_RETURN_BOOL(done);
}
