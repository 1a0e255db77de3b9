/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *		Producing items: enqueue() and enqueue_batch(), and the audit-event
 *		helper shared by the hot path.
 *
 * Dedup among live items rests on the partial unique index
 * item_live_dedup_idx: INSERT ... ON CONFLICT DO NOTHING either inserts or
 * finds the live holder of the key, and concurrent producers of one key
 * serialise on that index entry, so two live items never share a key.  A
 * queue with dedup_window also consults dedup_done, where complete() keeps
 * the keys of recently completed items: before the INSERT, and again after
 * an INSERT that went in, since the holder's completion may have committed
 * while the INSERT waited on the row it deleted (an item inserted so is
 * taken back and the completed one's id returned).
 *
 * An item past its expires_at is never handed out (the next dequeue or
 * sweep that meets it makes it a dead letter), so its key holds nothing:
 * a producer that meets such a holder makes it that dead letter (expired)
 * itself and inserts.  A processing item past expires_at finishes first,
 * and keeps its key meanwhile.
 *
 * With the queue's notify on, NOTIFY queue_<name> is sent with an empty
 * payload when the transaction commits, once per queue however many items
 * it adds (notify.c).
 *
 * src/enqueue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_enqueue);
PG_FUNCTION_INFO_V1(queue_enqueue_batch);

/* Attempts to settle a dedup conflict whose holder keeps vanishing. */
#define DEDUP_RETRIES 10

static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr plain_insert_plan = NULL;
static SPIPlanPtr flow_insert_plan = NULL;
static SPIPlanPtr holder_plan = NULL;
static SPIPlanPtr window_plan = NULL;
static SPIPlanPtr event_plan = NULL;
static SPIPlanPtr ids_plan = NULL;
static SPIPlanPtr batch_insert_plan = NULL;
static SPIPlanPtr plain_batch_insert_plan = NULL;
static SPIPlanPtr flow_batch_insert_plan = NULL;
static SPIPlanPtr batch_holder_plan = NULL;
static SPIPlanPtr batch_window_plan = NULL;
static SPIPlanPtr batch_event_plan = NULL;
static SPIPlanPtr undo_plan = NULL;
static SPIPlanPtr expired_holders_plan = NULL;
static SPIPlanPtr bury_expired_plan = NULL;

/*
 * Without a dedup key the insert cannot conflict: it skips ON CONFLICT and
 * so PostgreSQL's speculative insertion (a token, and a second WAL record
 * to confirm the tuple).
 */
#define ON_CONFLICT_SQL \
	"ON CONFLICT (queue_name, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING "

#define INSERT_SQL_WITH(conflict) \
	"INSERT INTO queue.item_live (queue_name, priority, visible_at, base_priority, run_at, " \
	"       max_attempts, expires_at, dedup_key, correlation_id, payload) " \
	"VALUES ($1, $2, greatest($3, pg_catalog.now()), $2, $3, $4, $5, $6, $7, $8) " \
	conflict \
	"RETURNING item_id"
#define INSERT_SQL INSERT_SQL_WITH(ON_CONFLICT_SQL)
#define PLAIN_INSERT_SQL INSERT_SQL_WITH("")

/*
 * An item with a group, a limit key or requires (flow control, flow.c).
 * Items without them keep the statements above, which also serve a 0.1.0
 * schema between the library's install and ALTER EXTENSION UPDATE.
 */
#define FLOW_INSERT_SQL \
	"INSERT INTO queue.item_live (queue_name, priority, visible_at, base_priority, run_at, " \
	"       max_attempts, expires_at, dedup_key, correlation_id, payload, " \
	"       group_key, limit_key, requires) " \
	"VALUES ($1, $2, greatest($3, pg_catalog.now()), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) " \
	ON_CONFLICT_SQL \
	"RETURNING item_id"

/* an expired holder: see EXPIRED_HOLDERS_SQL */
#define HOLDER_SQL \
	"SELECT item_id, " \
	"       coalesce(expires_at" OP("<=") "pg_catalog.statement_timestamp() " \
	"                AND NOT (lease_token IS NOT NULL " \
	"                         AND lease_expires_at" OP(">") "pg_catalog.statement_timestamp()), " \
	"                false) " \
	"  FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND dedup_key" OP("=") "$2"

#define WINDOW_SQL \
	"SELECT item_id FROM queue.dedup_done " \
	" WHERE queue_name" OP("=") "$1 AND dedup_key" OP("=") "$2 " \
	"   AND completed_at" OP(">") "(pg_catalog.now()" OP("-") "$3)"

#define EVENT_SQL \
	"INSERT INTO queue.events (queue_name, item_id, kind, worker, attempt, details) " \
	"VALUES ($1, $2, $3, $4, $5, $6)"

#define IDS_SQL \
	"SELECT pg_catalog.array_agg(pg_catalog.nextval('queue.item_id_seq'::pg_catalog.regclass)) " \
	"  FROM pg_catalog.generate_series(1, $1)"

#define BATCH_INSERT_SQL_WITH(conflict) \
	"INSERT INTO queue.item_live (queue_name, item_id, priority, visible_at, base_priority, " \
	"       run_at, max_attempts, expires_at, dedup_key, payload) " \
	"SELECT $1, u.id, $4, greatest($5, pg_catalog.now()), $4, $5, $6, $7, u.k, u.p " \
	"  FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.int8[]), pg_catalog.unnest($3::pg_catalog.jsonb[]), " \
	"                  pg_catalog.unnest($8::pg_catalog.text[])) AS u(id, p, k) " \
	" WHERE u.id IS NOT NULL " \
	conflict \
	"RETURNING item_id"
/*
 * A batch's keyed rows go in key order, and a key some live item holds
 * locks that holder (DO UPDATE whose WHERE is false updates nothing but
 * locks the row it met), so the holder is still there when its id is
 * looked up: a batch waits for keys (an uncommitted insert, a locked
 * holder) only in key order, and two batches never wait for each other in
 * a cycle.  A holder stays locked until the batch's transaction ends: a
 * claim skips it meanwhile, a complete of it waits.  Only the first
 * position of a key repeated in the batch is inserted (DO UPDATE may not
 * meet a row of its own statement); the others take its id.
 */
#define KEY_ORDER " ORDER BY u.k, u.id "
#define BATCH_ON_CONFLICT_SQL \
	"ON CONFLICT (queue_name, dedup_key) WHERE dedup_key IS NOT NULL " \
	"DO UPDATE SET payload = item_live.payload WHERE false "
#define BATCH_INSERT_SQL BATCH_INSERT_SQL_WITH(KEY_ORDER BATCH_ON_CONFLICT_SQL)
#define PLAIN_BATCH_INSERT_SQL BATCH_INSERT_SQL_WITH("")

/*
 * Under Citus a keyed insert runs as the query of a SELECT: Citus reports
 * the rows an INSERT ... SELECT ... ON CONFLICT RETURNING sent, not the
 * rows it returned, and SPI refuses that count ("consistency check on SPI
 * tuple count failed").  As a CTE it runs first, routed to the queue's
 * node, and the SELECT returns what it returned.
 */
#define CITUS_RETURNING(sql) "WITH ins AS (" sql ") SELECT item_id FROM ins"

#define FLOW_BATCH_INSERT_SQL \
	"INSERT INTO queue.item_live (queue_name, item_id, priority, visible_at, base_priority, " \
	"       run_at, max_attempts, expires_at, dedup_key, payload, group_key, limit_key, requires) " \
	"SELECT $1, u.id, $4, greatest($5, pg_catalog.now()), $4, $5, $6, $7, u.k, u.p, u.g, u.l, $11 " \
	"  FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.int8[]), pg_catalog.unnest($3::pg_catalog.jsonb[]), " \
	"                  pg_catalog.unnest($8::pg_catalog.text[]), pg_catalog.unnest($9::pg_catalog.text[]), " \
	"                  pg_catalog.unnest($10::pg_catalog.text[])) AS u(id, p, k, g, l) " \
	" WHERE u.id IS NOT NULL " \
	KEY_ORDER BATCH_ON_CONFLICT_SQL \
	"RETURNING item_id"

#define BATCH_HOLDER_SQL \
	"SELECT dedup_key, item_id FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND dedup_key" OP("=") "ANY ($2)"

#define BATCH_WINDOW_SQL \
	"SELECT dedup_key, item_id FROM queue.dedup_done " \
	" WHERE queue_name" OP("=") "$1 AND dedup_key" OP("=") "ANY ($2) " \
	"   AND completed_at" OP(">") "(pg_catalog.now()" OP("-") "$3)"

/*
 * The holders of these keys that are past their expires_at and not under
 * a current lease, locked, made dead letters (expired) as dequeue and sweep
 * make them; one row per holder buried.
 */
#define EXPIRED_HOLDERS_SQL \
	"WITH h AS MATERIALIZED (" \
	"  SELECT item_id FROM queue.item_live " \
	"   WHERE queue_name" OP("=") "$1 AND dedup_key" OP("=") "ANY ($2) " \
	"     AND expires_at" OP("<=") "pg_catalog.statement_timestamp() " \
	"     AND NOT (lease_token IS NOT NULL " \
	"              AND lease_expires_at" OP(">") "pg_catalog.statement_timestamp()) " \
	"   ORDER BY item_id FOR UPDATE) " \
	"SELECT queue._bury($1, h.item_id, 'expired', NULL, NULL) FROM h"

/*
 * Under Citus the holders are locked by one statement and buried one by
 * one: Citus pushes a function called per row of a query over a
 * distributed table into the shard query, where _bury's own statements
 * are refused ("cannot execute a distributed query from a query on a
 * shard").
 */
#define EXPIRED_HOLDER_IDS_SQL \
	"SELECT item_id FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND dedup_key" OP("=") "ANY ($2) " \
	"   AND expires_at" OP("<=") "pg_catalog.statement_timestamp() " \
	"   AND NOT (lease_token IS NOT NULL " \
	"            AND lease_expires_at" OP(">") "pg_catalog.statement_timestamp()) " \
	" ORDER BY item_id FOR UPDATE"
#define BURY_EXPIRED_SQL \
	"SELECT queue._bury($1, $2, 'expired', NULL, NULL)"

/* Items just inserted whose key turned out to be completed in the window. */
#define UNDO_SQL \
	"DELETE FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND item_id" OP("=") "ANY ($2)"

#define BATCH_EVENT_SQL \
	"INSERT INTO queue.events (queue_name, item_id, kind, attempt) " \
	"SELECT $1, i, 'enqueued', 0 FROM pg_catalog.unnest($2::pg_catalog.int8[]) AS i"

/* Hash support for char * keys (the key is the pointer, hashed as text). */
static uint32
string_hash_ptr(const void *key, Size keysize)
{
	const char *s = *(const char *const *) key;

	return string_hash(s, strlen(s) + 1);
}

static int
string_match_ptr(const void *key1, const void *key2, Size keysize)
{
	return strcmp(*(const char *const *) key1, *(const char *const *) key2);
}

/*
 * queue_audit_keeps
 *		Whether a queue with this audit level records events of this kind.
 */
bool
queue_audit_keeps(char audit, const char *kind)
{
	static const char *const queue_level[] = {
		"paused", "resumed", "purged", "breaker_open", "breaker_closed",
		"queue_dropped", NULL
	};
	static const char *const success_path[] = {
		"enqueued", "claimed", "completed", "released", NULL
	};

	if (audit == 'a')
		return true;
	for (int i = 0; queue_level[i]; i++)
		if (strcmp(kind, queue_level[i]) == 0)
			return true;
	if (audit == 'n')
		return false;
	for (int i = 0; success_path[i]; i++)
		if (strcmp(kind, success_path[i]) == 0)
			return false;
	return true;
}

/*
 * queue_log_event
 *		Append an event unless the queue's audit level leaves it out.
 *		Inside an SPI connection.
 */
void
queue_log_event(const char *queue_name, char audit, int64 item_id,
				const char *kind, const char *worker, int32 attempt,
				const char *details_json)
{
	Oid			argtypes[6] = {TEXTOID, INT8OID, TEXTOID, TEXTOID, INT4OID, JSONBOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	if (!queue_audit_keeps(audit, kind))
		return;
	values[0] = CStringGetTextDatum(queue_name);
	values[1] = Int64GetDatum(item_id);
	if (item_id == 0)
		nulls[1] = 'n';
	values[2] = CStringGetTextDatum(kind);
	if (worker)
		values[3] = CStringGetTextDatum(worker);
	else
		nulls[3] = 'n';
	values[4] = Int32GetDatum(attempt);
	values[5] = DirectFunctionCall1(jsonb_in, CStringGetDatum(details_json ? details_json : "{}"));
	queue_spi_exec(queue_prepare_cached(&event_plan, EVENT_SQL, 6, argtypes),
				   values, nulls, false, 0, SPI_OK_INSERT, "recording event");
}

/*
 * Resolve the arguments shared by enqueue and enqueue_batch: run_at
 * (NULL = now), expires_at (NULL = now + item_ttl, or none) and
 * max_attempts (NULL = the queue's).
 */
static void
resolve_common(const QueueConfig *cfg, FunctionCallInfo fcinfo,
			   int run_at_arg, int expires_arg, int max_attempts_arg,
			   TimestampTz *run_at, bool *has_expires, TimestampTz *expires_at,
			   int32 *max_attempts)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	/*
	 * NB: "already past" is judged at this statement's start, as the claim
	 * judges expiry (statement_timestamp()): a transaction's start may lie
	 * well before the call, and an item whose expires_at lies between the
	 * two would be enqueued already expired.
	 */
	TimestampTz stmt = Max(now, GetCurrentStatementStartTimestamp());

	*run_at = PG_ARGISNULL(run_at_arg) ? now : PG_GETARG_TIMESTAMPTZ(run_at_arg);
	queue_check_run_at(*run_at);

	*has_expires = false;
	if (!PG_ARGISNULL(expires_arg))
	{
		*expires_at = PG_GETARG_TIMESTAMPTZ(expires_arg);
		*has_expires = true;
		if (*expires_at <= stmt)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("expires_at %s is not in the future",
							timestamptz_to_str(*expires_at)),
					 errhint("An item that has already expired would be dead-lettered unseen; pass a later time or NULL.")));
	}
	else if (cfg->has_item_ttl)
	{
		*expires_at = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
															  TimestampTzGetDatum(now),
															  IntervalPGetDatum(&cfg->item_ttl)));
		*has_expires = true;
	}

	*max_attempts = cfg->max_attempts;
	if (!PG_ARGISNULL(max_attempts_arg))
	{
		*max_attempts = PG_GETARG_INT32(max_attempts_arg);
		if (*max_attempts < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_attempts must be at least 1, not %d", *max_attempts)));
	}
}

/*
 * The item that completed with this key within the queue's dedup window,
 * if any.  Inside the SPI connection.
 */
static bool
window_holder(const char *queue_name, Datum key, const QueueConfig *cfg, int64 *item_id)
{
	Oid			wtypes[3] = {TEXTOID, TEXTOID, INTERVALOID};
	Datum		wvalues[3];
	bool		isnull;

	wvalues[0] = CStringGetTextDatum(queue_name);
	wvalues[1] = key;
	wvalues[2] = IntervalPGetDatum(&cfg->dedup_window);
	queue_spi_exec(queue_prepare_cached(&window_plan, WINDOW_SQL, 3, wtypes),
				   wvalues, NULL, false, 1, SPI_OK_SELECT, "dedup window lookup");
	if (SPI_processed != 1)
		return false;
	*item_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
	return true;
}

/*
 * Does a live item hold this key (past its expires_at or not)?  Inside the
 * SPI connection.
 */
static bool
live_holder(const char *queue_name, Datum key)
{
	Oid			htypes[2] = {TEXTOID, TEXTOID};
	Datum		hvalues[2];

	hvalues[0] = CStringGetTextDatum(queue_name);
	hvalues[1] = key;
	queue_spi_exec(queue_prepare_cached(&holder_plan, HOLDER_SQL, 2, htypes),
				   hvalues, NULL, false, 1, SPI_OK_SELECT, "dedup lookup");
	return SPI_processed == 1;
}

/*
 * Make dead letters (expired) of the holders of these keys that are past
 * their expires_at (see the header).  Returns how many; their keys are
 * free for this transaction's next insert.  Inside the SPI connection.
 */
static int
bury_expired_holders(Datum qname, Datum *keys, int nkeys)
{
	Oid			types[2] = {TEXTOID, TEXTARRAYOID};
	Datum		values[2];

	if (nkeys == 0)
		return 0;
	values[0] = qname;
	values[1] = PointerGetDatum(construct_array(keys, nkeys, TEXTOID, -1, false, TYPALIGN_INT));
	if (queue_citus_loaded())
	{
		Oid			btypes[2] = {TEXTOID, INT8OID};
		int			nheld;
		int64	   *held;
		bool		isnull;

		queue_spi_exec(queue_prepare_cached(&expired_holders_plan, EXPIRED_HOLDER_IDS_SQL, 2, types),
					   values, NULL, false, 0, SPI_OK_SELECT, "locking expired holders");
		nheld = (int) SPI_processed;
		held = palloc(sizeof(int64) * Max(nheld, 1));
		for (int i = 0; i < nheld; i++)
			held[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
												  SPI_tuptable->tupdesc, 1, &isnull));
		for (int i = 0; i < nheld; i++)
		{
			values[1] = Int64GetDatum(held[i]);
			CHECK_FOR_INTERRUPTS();
			queue_spi_exec(queue_prepare_cached(&bury_expired_plan, BURY_EXPIRED_SQL, 2, btypes),
						   values, NULL, false, 0, SPI_OK_SELECT, "dead-lettering an expired holder");
		}
		pfree(held);
		return nheld;
	}
	queue_spi_exec(queue_prepare_cached(&expired_holders_plan, EXPIRED_HOLDERS_SQL, 2, types),
				   values, NULL, false, 0, SPI_OK_SELECT, "dead-lettering expired holders");
	return (int) SPI_processed;
}

/*
 * Take back items this call just inserted (their keys were completed within
 * the dedup window after all).  Inside the SPI connection.
 */
static void
undo_inserts(Datum qname, Datum *item_ids, int nitems)
{
	Oid			types[2] = {TEXTOID, INT8ARRAYOID};
	Datum		values[2];

	values[0] = qname;
	values[1] = PointerGetDatum(construct_array(item_ids, nitems, INT8OID, 8,
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	queue_spi_exec(queue_prepare_cached(&undo_plan, UNDO_SQL, 2, types),
				   values, NULL, false, 0, SPI_OK_DELETE, "taking back items");
	if (SPI_processed != (uint64) nitems)
		elog(ERROR, "queue: took back " UINT64_FORMAT " of %d items", SPI_processed, nitems);
}

/*
 * queue.enqueue(queue_name text, payload jsonb, priority int = 2,
 *				 run_at timestamptz = now(), dedup_key text = NULL,
 *				 expires_at timestamptz = NULL, max_attempts int = NULL,
 *				 correlation_id text = NULL, group_key text = NULL,
 *				 limit_key text = NULL, requires text[] = NULL) returns bigint
 *
 * Adds one item and returns its id; with a dedup_key held by a live item
 * (or completed within dedup_window) returns that item's id instead.
 * NULL run_at means now, NULL expires_at means now() + item_ttl (or never),
 * NULL max_attempts the queue's setting.  group_key, limit_key and
 * requires (flow control, NULL = none; not in 0.1.0's signature) are
 * checked by flow.c and acted on by the triggers of schema/45_flow.sql.
 */
Datum
queue_enqueue(PG_FUNCTION_ARGS)
{
	char	   *queue_name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	Datum		payload;
	int32		priority;
	TimestampTz run_at;
	TimestampTz expires_at = 0;
	bool		has_expires;
	int32		max_attempts;
	bool		has_key = !PG_ARGISNULL(4);
	QueueConfig cfg;
	int64		item_id = 0;
	bool		found = false;
	bool		inserted = false;
	bool		requires_null = PG_NARGS() <= 10 || PG_ARGISNULL(10);
	Datum		requires = (Datum) 0;
	bool		flow = false;

	queue_check_not_null(PG_ARGISNULL(1), "payload");
	queue_check_not_null(PG_ARGISNULL(2), "priority");
	payload = PG_GETARG_DATUM(1);
	priority = PG_GETARG_INT32(2);
	queue_check_priority(priority);
	queue_check_payload(payload, "payload");
	if (!PG_ARGISNULL(4))
		queue_check_dedup_key(PG_GETARG_DATUM(4), "dedup_key");
	if (!PG_ARGISNULL(7))
		queue_check_text_size(PG_GETARG_DATUM(7), "correlation_id");
	if (PG_NARGS() > 10)
	{
		flow_check_key(PG_GETARG_DATUM(8), PG_ARGISNULL(8), "group_key");
		flow_check_key(PG_GETARG_DATUM(9), PG_ARGISNULL(9), "limit_key");
		requires = flow_check_requires(PG_GETARG_DATUM(10), &requires_null);
		flow = !PG_ARGISNULL(8) || !PG_ARGISNULL(9) || !requires_null;
	}

	queue_spi_connect();
	queue_load_config(queue_name, &cfg);
	queue_check_access(&cfg, QUEUE_ACCESS_PRODUCER);
	queue_check_writable(fcinfo);
	resolve_common(&cfg, fcinfo, 3, 5, 6, &run_at, &has_expires, &expires_at, &max_attempts);

	/*
	 * A key completed within the dedup window stands for its item, unless
	 * a live item holds the key (one enqueued before the window was set, or
	 * a replay): the live holder wins, found by the insert below (which
	 * also buries a holder past its expires_at, and looks at the window
	 * again after it).
	 */
	if (has_key && cfg.has_dedup_window &&
		window_holder(queue_name, PG_GETARG_DATUM(4), &cfg, &item_id))
		found = !live_holder(queue_name, PG_GETARG_DATUM(4));

	for (int tries = 0; !found && tries < DEDUP_RETRIES; tries++)
	{
		Oid			argtypes[11] = {TEXTOID, INT4OID, TIMESTAMPTZOID, INT4OID,
		TIMESTAMPTZOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID, TEXTARRAYOID};
		Datum		values[11];
		char		nulls[11] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', 'n', 'n', 'n'};
		SPIPlanPtr	plan;
		Oid			htypes[2] = {TEXTOID, TEXTOID};
		Datum		hvalues[2];
		bool		isnull;

		values[0] = CStringGetTextDatum(queue_name);
		values[1] = Int32GetDatum(priority);
		values[2] = TimestampTzGetDatum(run_at);
		values[3] = Int32GetDatum(max_attempts);
		values[4] = TimestampTzGetDatum(expires_at);
		if (!has_expires)
			nulls[4] = 'n';
		values[5] = has_key ? PG_GETARG_DATUM(4) : (Datum) 0;
		if (!has_key)
			nulls[5] = 'n';
		values[6] = PG_ARGISNULL(7) ? (Datum) 0 : PG_GETARG_DATUM(7);
		if (PG_ARGISNULL(7))
			nulls[6] = 'n';
		values[7] = payload;
		if (flow)
		{
			for (int a = 8; a <= 9; a++)
			{
				values[a] = PG_ARGISNULL(a) ? (Datum) 0 : PG_GETARG_DATUM(a);
				nulls[a] = PG_ARGISNULL(a) ? 'n' : ' ';
			}
			values[10] = requires;
			nulls[10] = requires_null ? 'n' : ' ';
			plan = queue_prepare_cached(&flow_insert_plan, FLOW_INSERT_SQL, 11, argtypes);
		}
		else if (has_key)
			plan = queue_prepare_cached(&insert_plan, INSERT_SQL, 8, argtypes);
		else
		{
			/* a plain item: inserted without the statement where possible */
			if (!queue_citus_loaded())
			{
				int64		id = queue_enqueue_direct(values[0], priority, run_at, max_attempts,
													  has_expires, expires_at, values[6],
													  nulls[6] == 'n', payload);

				if (id >= 0)
				{
					item_id = id;
					found = inserted = true;
					break;
				}
			}
			plan = queue_prepare_cached(&plain_insert_plan, PLAIN_INSERT_SQL, 8, argtypes);
		}

		queue_spi_exec(plan, values, nulls, false, 1, SPI_OK_INSERT_RETURNING, "inserting item");
		if (SPI_processed == 1)
		{
			item_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc, 1, &isnull));
			found = inserted = true;
			break;
		}

		/* The key is taken: return the live holder's id. */
		hvalues[0] = values[0];
		hvalues[1] = values[5];
		queue_spi_exec(queue_prepare_cached(&holder_plan, HOLDER_SQL, 2, htypes),
					   hvalues, NULL, false, 1, SPI_OK_SELECT, "dedup lookup");
		if (SPI_processed == 1)
		{
			bool		expired = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
															 SPI_tuptable->tupdesc, 2, &isnull));

			item_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc, 1, &isnull));
			found = true;
			/*
			 * A holder past expires_at holds nothing: bury it and insert
			 * again (also when another session buried it first).
			 */
			if (expired)
			{
				(void) bury_expired_holders(values[0], &values[5], 1);
				found = false;
			}
		}
		/* else the holder finished between the two statements: try again */
		CHECK_FOR_INTERRUPTS();
	}
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not settle dedup_key conflict on queue \"%s\"", queue_name),
				 errhint("Retry the transaction.")));

	/*
	 * NB: the holder's completion may have committed after the window
	 * lookup, while the INSERT waited on the row it deleted: the key is in
	 * dedup_done now, and this statement's snapshot sees it.
	 */
	if (inserted && has_key && cfg.has_dedup_window)
	{
		int64		done_id;

		if (window_holder(queue_name, PG_GETARG_DATUM(4), &cfg, &done_id))
		{
			Datum		mine = Int64GetDatum(item_id);

			undo_inserts(CStringGetTextDatum(queue_name), &mine, 1);
			item_id = done_id;
			inserted = false;
		}
	}

	if (inserted)
	{
		queue_log_event(queue_name, cfg.audit, item_id, "enqueued", NULL, 0, NULL);
		if (cfg.notify)
			queue_notify_on_commit(queue_name);
	}
	queue_spi_finish();
	PG_RETURN_INT64(item_id);
}

/* A dedup key found by resolve_keys and the item that holds it. */
typedef struct KeyHolder
{
	char	   *key;			/* hash key (HASH_STRINGS compares the text) */
	int64		item_id;
} KeyHolder;

/*
 * Mark the positions whose key an earlier pending position of the batch
 * carries: they are no longer pending, and first[i] is the position whose
 * id they take (-1 for every other position).
 */
typedef struct KeyFirst
{
	char	   *key;			/* hash key */
	int			pos;			/* its first pending position */
} KeyFirst;

static int *
first_of_keys(int n, Datum *keys, bool *key_nulls, bool *pending)
{
	int		   *first = palloc(sizeof(int) * n);
	HASHCTL		ctl;
	HTAB	   *seen;

	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(KeyFirst);
	ctl.hash = string_hash_ptr;
	ctl.match = string_match_ptr;
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("queue batch keys", n, &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	for (int i = 0; i < n; i++)
	{
		char	   *key;
		KeyFirst   *h;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		first[i] = -1;
		if (!pending[i] || key_nulls[i])
			continue;
		key = TextDatumGetCString(keys[i]);
		h = hash_search(seen, &key, HASH_ENTER, &found);
		if (found)
		{
			first[i] = h->pos;
			pending[i] = false;
		}
		else
		{
			h->key = key;
			h->pos = i;
		}
	}
	hash_destroy(seen);
	return first;
}

/*
 * Look dedup keys up with `plan` (rows of (key, id)) and record the id of
 * every position whose key is found and has no id yet.  A hash of the rows
 * keeps a batch of many keys linear.
 */
static void
resolve_keys(SPIPlanPtr plan, Datum *values, int n, Datum *keys, bool *key_nulls,
			 int64 *ids)
{
	HASHCTL		ctl;
	HTAB	   *holders;

	queue_spi_exec(plan, values, NULL, false, 0, SPI_OK_SELECT, "dedup lookup");
	if (SPI_processed == 0)
		return;

	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(KeyHolder);
	ctl.hash = string_hash_ptr;
	ctl.match = string_match_ptr;
	ctl.hcxt = CurrentMemoryContext;
	holders = hash_create("queue dedup keys", (long) SPI_processed, &ctl,
						  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		bool		found;
		char	   *key;
		KeyHolder  *h;

		CHECK_FOR_INTERRUPTS();
		key = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1);
		h = hash_search(holders, &key, HASH_ENTER, &found);

		h->key = key;
		h->item_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
												 SPI_tuptable->tupdesc, 2, &isnull));
	}
	for (int i = 0; i < n; i++)
	{
		char	   *key;
		KeyHolder  *h;

		CHECK_FOR_INTERRUPTS();
		if (ids[i] != 0 || key_nulls[i])
			continue;
		key = TextDatumGetCString(keys[i]);
		h = hash_search(holders, &key, HASH_FIND, NULL);
		if (h != NULL)
			ids[i] = h->item_id;
	}
	hash_destroy(holders);
}

/*
 * After enqueue_batch's insert: the keys it inserted that were completed
 * within the dedup window meanwhile stand for their completed items (every
 * position with such a key gets that id), and the items inserted for them
 * are taken back.  Returns how many items stay inserted.
 */
static int
recheck_window(const QueueConfig *cfg, Datum *kvalues, int n, Datum *keys,
			   bool *key_nulls, int64 *ids, bool *to_insert)
{
	Oid			ktypes[3] = {TEXTOID, TEXTARRAYOID, INTERVALOID};
	Datum	   *mine = palloc(sizeof(Datum) * n);
	int64	   *done_ids = palloc0(sizeof(int64) * n);
	int			nmine = 0;
	int			nundo = 0;
	int			nkept = 0;

	for (int i = 0; i < n; i++)
		if (to_insert[i] && !key_nulls[i])
			mine[nmine++] = keys[i];
	kvalues[1] = PointerGetDatum(construct_array(mine, nmine, TEXTOID, -1, false, TYPALIGN_INT));
	resolve_keys(queue_prepare_cached(&batch_window_plan, BATCH_WINDOW_SQL, 3, ktypes),
				 kvalues, n, keys, key_nulls, done_ids);
	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (done_ids[i] != 0)
		{
			if (to_insert[i])
				mine[nundo++] = Int64GetDatum(ids[i]);
			ids[i] = done_ids[i];
			to_insert[i] = false;
		}
		nkept += to_insert[i];
	}
	if (nundo > 0)
		undo_inserts(kvalues[0], mine, nundo);
	return nkept;
}

/*
 * queue.enqueue_batch(queue_name text, payloads jsonb[], priority int = 2,
 *					   run_at timestamptz = now(), dedup_keys text[] = NULL,
 *					   expires_at timestamptz = NULL,
 *					   max_attempts int = NULL, group_keys text[] = NULL,
 *					   limit_keys text[] = NULL, requires text[] = NULL)
 *	returns setof bigint
 *
 * Adds many items in one statement and returns their ids in input order.
 * dedup_keys, when given, has one element per payload (NULL = no key); a
 * key repeated inside the batch yields the first one's id each time.
 * group_keys and limit_keys likewise; requires applies to every item.
 */
Datum
queue_enqueue_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue_name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	ArrayType  *payload_arr;
	Datum	   *payloads;
	bool	   *payload_nulls;
	int			n;
	Datum	   *keys = NULL;
	bool	   *key_nulls = NULL;
	bool		any_key = false;
	int32		priority;
	TimestampTz run_at;
	TimestampTz expires_at = 0;
	bool		has_expires;
	int32		max_attempts;
	QueueConfig cfg;
	int64	   *ids;
	bool	   *to_insert;
	int			ninserted = 0;
	MemoryContext callcxt = CurrentMemoryContext;
	bool		requires_null = PG_NARGS() <= 9 || PG_ARGISNULL(9);
	Datum		requires = (Datum) 0;
	bool		flow = false;

	queue_check_not_null(PG_ARGISNULL(1), "payloads");
	queue_check_not_null(PG_ARGISNULL(2), "priority");
	priority = PG_GETARG_INT32(2);
	queue_check_priority(priority);

	payload_arr = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(payload_arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("payloads must be a one-dimensional array")));
	queue_check_batch_length(ArrayGetNItems(ARR_NDIM(payload_arr), ARR_DIMS(payload_arr)),
							 "payloads");
	deconstruct_array(payload_arr, JSONBOID, -1, false, TYPALIGN_INT,
					  &payloads, &payload_nulls, &n);
	for (int i = 0; i < n; i++)
	{
		char		argname[64];

		CHECK_FOR_INTERRUPTS();
		snprintf(argname, sizeof(argname), "payloads[%d]", i + 1);
		queue_check_not_null(payload_nulls[i], argname);
		queue_check_payload(payloads[i], argname);
	}

	if (!PG_ARGISNULL(4))
	{
		ArrayType  *key_arr = PG_GETARG_ARRAYTYPE_P(4);
		int			nkeys;

		if (ARR_NDIM(key_arr) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dedup_keys must be a one-dimensional array")));
		deconstruct_array(key_arr, TEXTOID, -1, false, TYPALIGN_INT,
						  &keys, &key_nulls, &nkeys);
		if (nkeys != n)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dedup_keys has %d elements but payloads has %d", nkeys, n),
					 errhint("Pass one key per payload, NULL for items without a key.")));
		for (int i = 0; i < n; i++)
		{
			char		argname[64];

			CHECK_FOR_INTERRUPTS();
			if (key_nulls[i])
				continue;
			any_key = true;
			snprintf(argname, sizeof(argname), "dedup_keys[%d]", i + 1);
			queue_check_dedup_key(keys[i], argname);
		}
	}
	else
	{
		keys = palloc0(sizeof(Datum) * Max(n, 1));
		key_nulls = palloc(sizeof(bool) * Max(n, 1));
		memset(key_nulls, true, sizeof(bool) * Max(n, 1));
	}

	if (PG_NARGS() > 9)
	{
		flow_check_keys(PG_GETARG_DATUM(7), PG_ARGISNULL(7), n, "group_keys");
		flow_check_keys(PG_GETARG_DATUM(8), PG_ARGISNULL(8), n, "limit_keys");
		requires = flow_check_requires(PG_GETARG_DATUM(9), &requires_null);
		flow = !PG_ARGISNULL(7) || !PG_ARGISNULL(8) || !requires_null;
	}

	/* NB: allocated before SPI_connect, so they outlive SPI_finish */
	ids = palloc0(sizeof(int64) * Max(n, 1));
	to_insert = palloc0(sizeof(bool) * Max(n, 1));

	queue_spi_connect();
	queue_load_config(queue_name, &cfg);
	queue_check_access(&cfg, QUEUE_ACCESS_PRODUCER);
	queue_check_writable(fcinfo);
	resolve_common(&cfg, fcinfo, 3, 5, 6, &run_at, &has_expires, &expires_at, &max_attempts);

	if (n > 0)
	{
		Oid			ktypes[3] = {TEXTOID, TEXTARRAYOID, INTERVALOID};
		Datum		kvalues[3];
		Oid			itypes[11] = {TEXTOID, INT8ARRAYOID, JSONBARRAYOID, INT4OID,
		TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
		TEXTARRAYOID};
		Datum		ivalues[11];
		char		inulls[11] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', 'n', 'n', 'n'};
		SPIPlanPtr	plan;
		Datum	   *new_ids;
		bool	   *new_id_nulls;
		Datum	   *ins_ids;
		bool	   *ins_id_nulls;
		bool	   *pending;
		int		   *first;
		int			nnew;
		Oid			idtype = INT4OID;
		Datum		nval = Int32GetDatum(n);
		bool		isnull;
		bool		citus = queue_citus_loaded();

		kvalues[0] = CStringGetTextDatum(queue_name);
		kvalues[1] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
		kvalues[2] = IntervalPGetDatum(&cfg.dedup_window);

		/*
		 * Keys completed within the dedup window keep their old ids, unless
		 * a live item holds the key: those positions go to the insert,
		 * which returns (and locks) the live holder, or buries it when it
		 * is past its expires_at and looks at the window again after it.
		 */
		if (any_key && cfg.has_dedup_window)
		{
			bool		any_window = false;

			resolve_keys(queue_prepare_cached(&batch_window_plan, BATCH_WINDOW_SQL, 3, ktypes),
						 kvalues, n, keys, key_nulls, ids);
			for (int i = 0; i < n && !any_window; i++)
				any_window = (ids[i] != 0);
			if (any_window)
			{
				int64	   *live_ids = palloc0(sizeof(int64) * n);

				resolve_keys(queue_prepare_cached(&batch_holder_plan, BATCH_HOLDER_SQL, 2, ktypes),
							 kvalues, n, keys, key_nulls, live_ids);
				for (int i = 0; i < n; i++)
					if (live_ids[i] != 0)
						ids[i] = 0;
				pfree(live_ids);
			}
		}

		/* A plain batch is written without the statement (enqueue_direct.c). */
		if (!any_key && !flow && !queue_citus_loaded() &&
			queue_enqueue_direct_batch(kvalues[0], priority, run_at, max_attempts,
									   has_expires, expires_at, payloads, n, ids))
		{
			memset(to_insert, true, sizeof(bool) * n);
			ninserted = n;
		}
		else
		{
			/* Ids for all the rest, drawn in input order. */
			queue_spi_exec_one(queue_prepare_cached(&ids_plan, IDS_SQL, 1, &idtype),
							   &nval, NULL, false, 1, SPI_OK_SELECT, "drawing item ids");
			deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[0],
															   SPI_tuptable->tupdesc, 1, &isnull)),
							  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
							  &new_ids, &new_id_nulls, &nnew);
			if (nnew != n)
				elog(ERROR, "queue: drew %d item ids for %d payloads", nnew, n);

			ins_ids = palloc(sizeof(Datum) * n);
			ins_id_nulls = palloc(sizeof(bool) * n);
			pending = palloc(sizeof(bool) * n);
			for (int i = 0; i < n; i++)
			{
				pending[i] = (ids[i] == 0);
				to_insert[i] = false;
				ins_ids[i] = new_ids[i];
			}
			first = any_key ? first_of_keys(n, keys, key_nulls, pending) : NULL;
			ninserted = 0;

			ivalues[0] = CStringGetTextDatum(queue_name);
			ivalues[2] = PointerGetDatum(payload_arr);
			ivalues[3] = Int32GetDatum(priority);
			ivalues[4] = TimestampTzGetDatum(run_at);
			ivalues[5] = Int32GetDatum(max_attempts);
			ivalues[6] = TimestampTzGetDatum(expires_at);
			if (!has_expires)
				inulls[6] = 'n';
			ivalues[7] = PointerGetDatum(construct_md_array(keys, key_nulls, 1, &n,
															(int[]){1}, TEXTOID, -1,
															false, TYPALIGN_INT));
			if (flow)
			{
				for (int a = 7; a <= 8; a++)
				{
					ivalues[a + 1] = PG_ARGISNULL(a) ? (Datum) 0 : PG_GETARG_DATUM(a);
					inulls[a + 1] = PG_ARGISNULL(a) ? 'n' : ' ';
				}
				ivalues[10] = requires;
				inulls[10] = requires_null ? 'n' : ' ';
				plan = queue_prepare_cached(&flow_batch_insert_plan,
											citus ? CITUS_RETURNING(FLOW_BATCH_INSERT_SQL) : FLOW_BATCH_INSERT_SQL,
											11, itypes);
			}
			else if (any_key)
				plan = queue_prepare_cached(&batch_insert_plan,
											citus ? CITUS_RETURNING(BATCH_INSERT_SQL) : BATCH_INSERT_SQL,
											8, itypes);
			else
			{
				citus = false;
				plan = queue_prepare_cached(&plain_batch_insert_plan, PLAIN_BATCH_INSERT_SQL, 8, itypes);
			}

			/*
			 * Insert the pending positions; a position whose key a live item
			 * holds takes the holder's id (the holder is locked by the
			 * insert, see BATCH_ON_CONFLICT_SQL, so it is still there).
			 * Holders past expires_at are buried and their positions
			 * inserted by the next round.
			 */
			for (int round = 0;; round++)
			{
				int			npending = 0;
				int			nthis;
				bool		again = false;

				for (int i = 0; i < n; i++)
				{
					ins_id_nulls[i] = !pending[i];
					npending += pending[i] ? 1 : 0;
				}
				ivalues[1] = PointerGetDatum(construct_md_array(ins_ids, ins_id_nulls, 1, &n,
																(int[]){1}, INT8OID, 8,
																FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
				queue_spi_exec(plan, ivalues, inulls, false, 0,
							   citus ? SPI_OK_SELECT : SPI_OK_INSERT_RETURNING, "inserting items");
				nthis = (int) SPI_processed;
				ninserted += nthis;

				if (nthis == npending)
				{
					for (int i = 0; i < n; i++)
						if (pending[i])
						{
							ids[i] = DatumGetInt64(new_ids[i]);
							to_insert[i] = true;
							pending[i] = false;
						}
				}
				else
				{
					/* A hash of the ids that went in marks their positions. */
					HASHCTL		ctl;
					HTAB	   *went_in;
					Datum	   *held_keys = palloc(sizeof(Datum) * n);
					int			nheld = 0;

					ctl.keysize = sizeof(int64);
					ctl.entrysize = sizeof(int64);
					ctl.hcxt = CurrentMemoryContext;
					went_in = hash_create("queue inserted ids", Max(nthis, 1), &ctl,
										  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
					for (uint64 r = 0; r < SPI_processed; r++)
					{
						int64		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
																	 SPI_tuptable->tupdesc, 1, &isnull));

						CHECK_FOR_INTERRUPTS();
						(void) hash_search(went_in, &id, HASH_ENTER, NULL);
					}
					for (int i = 0; i < n; i++)
					{
						int64		id = DatumGetInt64(new_ids[i]);

						CHECK_FOR_INTERRUPTS();
						if (!pending[i])
							continue;
						if (hash_search(went_in, &id, HASH_FIND, NULL) != NULL)
						{
							ids[i] = id;
							to_insert[i] = true;
							pending[i] = false;
						}
						else if (!key_nulls[i])
							held_keys[nheld++] = keys[i];
					}
					hash_destroy(went_in);

					/* a holder past expires_at holds nothing: insert again */
					if (round < DEDUP_RETRIES &&
						bury_expired_holders(kvalues[0], held_keys, nheld) > 0)
						again = true;
					else
					{
						kvalues[1] = PointerGetDatum(construct_array(held_keys, nheld, TEXTOID, -1,
																	 false, TYPALIGN_INT));
						resolve_keys(queue_prepare_cached(&batch_holder_plan, BATCH_HOLDER_SQL, 2, ktypes),
									 kvalues, n, keys, key_nulls, ids);
					}
				}
				if (again)
					continue;
				for (int i = 0; i < n; i++)
				{
					if (first != NULL && first[i] >= 0)
						ids[i] = ids[first[i]];
					if (ids[i] == 0)
						elog(ERROR, "queue: no item for position %d of the batch on queue \"%s\"",
							 i + 1, queue_name);
				}
				break;
			}
		}

		/* NB: as in enqueue, a completion may have committed meanwhile */
		if (ninserted > 0 && any_key && cfg.has_dedup_window)
			ninserted = recheck_window(&cfg, kvalues, n, keys, key_nulls, ids, to_insert);

		if (ninserted > 0)
		{
			if (cfg.audit == 'a')
			{
				Oid			etypes[2] = {TEXTOID, INT8ARRAYOID};
				Datum		evalues[2];
				Datum	   *evt_ids = palloc(sizeof(Datum) * n);
				int			ne = 0;

				for (int i = 0; i < n; i++)
					if (to_insert[i])
						evt_ids[ne++] = Int64GetDatum(ids[i]);
				evalues[0] = kvalues[0];
				evalues[1] = PointerGetDatum(construct_array(evt_ids, ne, INT8OID, 8,
															 FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
				queue_spi_exec(queue_prepare_cached(&batch_event_plan, BATCH_EVENT_SQL, 2, etypes),
							   evalues, NULL, false, 0, SPI_OK_INSERT, "recording events");
			}
			if (cfg.notify)
				queue_notify_on_commit(queue_name);
		}
	}
	queue_spi_finish();

	/* Hand the ids back in input order. */
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(callcxt);

		InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
		for (int i = 0; i < n; i++)
		{
			Datum		v = Int64GetDatum(ids[i]);
			bool		isnull = false;

			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &v, &isnull);
		}
		MemoryContextSwitchTo(oldcxt);
	}
	return (Datum) 0;
}
