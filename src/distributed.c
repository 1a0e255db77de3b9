/*-------------------------------------------------------------------------
 *
 * distributed.c
 *		What the hot path does differently on a Citus cluster.
 *
 * On a Citus cluster (see queue.distribute()) the tables holding items
 * are distributed by queue name, and a statement on them must name its
 * queue for Citus to send it to the one node holding that queue.  The
 * kept generic plans the hot path uses on a plain server have the queue
 * name as a parameter, which Citus cannot route ("could not create
 * distributed plan"), so under Citus queue_prepare_cached keeps plans
 * that are planned for each call with its values bound: Citus then routes
 * each statement to the queue's shard, executed locally when the call was
 * delegated to the node holding it.  Measured on loopback (README,
 * "Scale-out"), planning per call costs less than the round trip it sits
 * behind; on a plain server nothing changes.
 *
 * Citus also refuses volatile functions in an UPDATE of a distributed
 * table: the claim takes its lease token as a parameter there, drawn here
 * from this node's sequence (each node draws from its own range, see
 * queue._prepare_node()).
 *
 * The claim has a statement of its own under Citus (queue_citus_claim):
 * Citus refuses, in a statement that updates a distributed table, a
 * volatile function (the lease token's nextval, drawn here per statement
 * instead: the items of one batch share it, tokens stay unique per lease
 * of an item) and a stable function inside a CASE (the error entry of a
 * lost lease, built in the candidate SELECT instead).  The claimed rows
 * are found again by the primary key (queue_name, item_id), which a
 * per-call plan finds with the queue name bound.  The plain server's
 * claim (dequeue.c) is untouched.
 *
 * complete and complete_batch move rows to item_done in one statement on a
 * plain server (a DELETE ... RETURNING feeding an INSERT in a CTE).  Citus
 * plans an INSERT ... SELECT from a CTE through intermediate results that
 * it sends to every node, so under Citus they are two statements, each
 * routed to the queue's node: the DELETE, then the INSERT of the returned
 * rows (queue_citus_complete).
 *
 * And Citus 12.1 crashes the backend (a NULL pointer hashed) when it
 * delegates a call whose distribution argument is NULL, before the called
 * function can refuse it: SELECT queue.dequeue(NULL, 'w') took the whole
 * coordinator into crash recovery.  Under Citus a planner hook, installed
 * after Citus's and so run before it, raises the queue's own error for a
 * call of a queue function whose queue_name (a required argument: those
 * are the delegated ones) is NULL.
 *
 * src/distributed.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/planner.h"
#include "utils/array.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "queue.h"

static SPIPlanPtr token_plan = NULL;
static SPIPlanPtr queue_local_plan = NULL;
static SPIPlanPtr citus_claim_plan = NULL;
static SPIPlanPtr citus_hinted_claim_plan = NULL;
static SPIPlanPtr citus_lane_claim_plan = NULL;
static SPIPlanPtr citus_complete_plan = NULL;
static SPIPlanPtr citus_complete_batch_plan = NULL;
static SPIPlanPtr citus_history_plan = NULL;
static planner_hook_type prev_planner_hook = NULL;

#define TOKEN_SQL \
	"SELECT pg_catalog.nextval('queue.lease_token_seq'::pg_catalog.regclass)"

/*
 * queue_citus_loaded
 *		Whether this server runs Citus; decided once per backend.
 *
 * Citus is a preloaded library, so what a backend finds at its first
 * statement holds for its life.  On a plain server this costs one lookup
 * per backend and changes nothing else.
 */
bool
queue_citus_loaded(void)
{
	static int	citus_loaded = -1;

	if (citus_loaded < 0)
		citus_loaded = GetConfigOption("citus.version", true, false) != NULL ? 1 : 0;
	return citus_loaded == 1;
}

/*
 * queue_citus_seen_usecs
 *		How old a worker's last_seen may grow under Citus before a call of
 *		the worker writes it: a quarter of queue.worker_offline_after, at
 *		most CITUS_SEEN_MAX_USECS.  worker_registry is a reference table:
 *		each write is a two-phase commit on every node under an exclusive
 *		lock of its shard there, which serialises all such writes of the
 *		cluster (measured: at every 5 s per worker name, 16 busy bots spent
 *		seconds waiting for each other).
 */
#define CITUS_SEEN_MAX_USECS (30 * USECS_PER_SEC)

int64
queue_citus_seen_usecs(void)
{
	return Min(CITUS_SEEN_MAX_USECS, (int64) queue_worker_offline_after * USECS_PER_SEC / 4);
}

/*
 * queue_claim_token
 *		A fresh lease token for one claim statement under Citus.
 *
 * Must be called inside an SPI connection.
 */
int64
queue_claim_token(void)
{
	bool		isnull;
	Datum		d;

	if (SPI_execute_plan(queue_prepare_cached(&token_plan, TOKEN_SQL, 0, NULL),
						 NULL, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "queue: drawing a lease token failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return DatumGetInt64(d);
}

/*
 * queue_citus_queue_local
 *		Whether the shards of queue `qname` are on this node, under Citus.
 *
 * A statement on them then runs in this backend (Citus's local execution),
 * and so do the deferred triggers its rows fire at commit: what this
 * backend notes for them (queue._group_promoted_note) reaches them.  A
 * call delegated to the queue's node runs there; one inside BEGIN ...
 * COMMIT on the coordinator does not.  Must be called inside an SPI
 * connection.
 */
#define QUEUE_LOCAL_SQL \
	"SELECT 1 FROM pg_catalog.pg_dist_placement p " \
	"  JOIN pg_catalog.pg_dist_local_group g ON g.groupid" OP("=") "p.groupid " \
	" WHERE p.shardid" OP("=") \
	"       pg_catalog.get_shard_id_for_distribution_column('queue.item_live'::pg_catalog.regclass, $1)"

bool
queue_citus_queue_local(Datum qname)
{
	Oid			argtypes[1] = {TEXTOID};

	queue_spi_exec(queue_prepare_cached(&queue_local_plan, QUEUE_LOCAL_SQL, 1, argtypes),
				   &qname, NULL, true, 1, SPI_OK_SELECT, "finding the queue's node");
	return SPI_processed > 0;
}

/*
 * The claim under Citus, with dequeue.c's parameters ($1 queue, $2 limit,
 * $3 worker, $4 lease, $5 cap stripe, $6 and $7 where it starts) and the
 * lease token as $8; its result has the columns of dequeue.c's claim.
 */
#define CITUS_CLAIM_SQL_WITH(start) \
	"WITH cand AS MATERIALIZED (" \
	"  SELECT i.item_id, i.priority AS prio, i.visible_at AS since, " \
	"         (i.lease_token IS NOT NULL AND NOT i.lost_counted) AS lost, " \
	"         pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(" \
	"           'attempt', i.attempt, 'at', i.lease_expires_at, 'worker', i.worker, " \
	"           'error', 'lease expired', 'error_code', 'lease_expired')) AS lost_entry, " \
	"         (i.expires_at IS NOT NULL AND i.expires_at" OP("<=") "pg_catalog.statement_timestamp()) AS expired, " \
	"         (i.lease_token IS NOT NULL AND (i.attempt" OP(">=") "i.max_attempts " \
	"                                        OR i.lease_token" OP("<") "0)) AS spent " \
	"    FROM queue.item_live i " \
	"   WHERE i.queue_name" OP("=") "$1 " \
	"     AND i.visible_at" OP("<=") "pg_catalog.statement_timestamp() " \
	start \
	"     AND (i.requires IS NULL OR i.requires" OP("<@") \
	"          (SELECT w.labels FROM queue.worker_registry w WHERE w.worker" OP("=") "$3)) " \
	"   ORDER BY i.priority, i.visible_at, i.item_id " \
	"   LIMIT $2 " \
	"   FOR UPDATE SKIP LOCKED), " \
	"claimed AS (" \
	"  UPDATE queue.item_live i " \
	"     SET attempt = i.attempt" OP("+") "1, lease_token = $8, " \
	"         worker = $3, claimed_at = pg_catalog.statement_timestamp(), cap_stripe = $5, " \
	"         priority = i.base_priority" OP("+") "((i.priority" OP("/") FLOW_BAND ")" OP("*") FLOW_BAND "), " \
	"         lease_session = queue._session_key(), lost_counted = false, " \
	"         lease_expires_at = pg_catalog.statement_timestamp()" OP("+") "$4, " \
	"         visible_at = pg_catalog.statement_timestamp()" OP("+") "$4, " \
	"         errors = CASE WHEN c.lost THEN i.errors" OP("||") "c.lost_entry ELSE i.errors END, " \
	"         last_error = CASE WHEN c.lost THEN 'lease expired' ELSE i.last_error END, " \
	"         error_code = CASE WHEN c.lost THEN 'lease_expired' ELSE i.error_code END " \
	"    FROM cand c " \
	"   WHERE i.queue_name" OP("=") "$1 AND i.item_id" OP("=") "c.item_id " \
	"     AND NOT c.expired AND NOT c.spent " \
	"  RETURNING i.item_id, i.lease_token, i.payload, i.progress, i.attempt, i.max_attempts, " \
	"            i.base_priority, i.enqueued_at, i.lease_expires_at, i.dedup_key, i.correlation_id) " \
	"SELECT cl.*, NULL::pg_catalog.int4, NULL::pg_catalog.timestamptz, NULL::pg_catalog.bool, " \
	"       " CLAIM_ROW_LEASED " AS kind " \
	"  FROM claimed cl " \
	"UNION ALL " \
	"SELECT c.item_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, " \
	"       c.prio, c.since, c.lost, " \
	"       CASE WHEN c.expired THEN " CLAIM_ROW_EXPIRED " WHEN c.spent THEN " CLAIM_ROW_SPENT \
	"            ELSE " CLAIM_ROW_CANDIDATE " END " \
	"  FROM cand c " \
	"ORDER BY 12 NULLS FIRST, 13, 1"

/* the head of the queue, below the limited keys' band (flow.c) */
#define CITUS_CLAIM_SQL \
	CITUS_CLAIM_SQL_WITH("     AND i.priority" OP("<") FLOW_BAND " ")
/* from where this backend last found claimable rows (dequeue.c) */
#define CITUS_HINTED_CLAIM_SQL \
	CITUS_CLAIM_SQL_WITH("     AND i.priority" OP("<") FLOW_BAND \
						 "     AND ROW(i.priority, i.visible_at)" OP(">=") "ROW($6, $7) ")
/* one limited key's lane */
#define CITUS_LANE_CLAIM_SQL \
	CITUS_CLAIM_SQL_WITH("     AND i.limit_key" OP("=") "$6::pg_catalog.text " \
						 "     AND i.priority" OP(">=") FLOW_BAND " ")

/*
 * queue_citus_claim
 *		Run dequeue.c's claim in its Citus form (see the file header):
 *		values and nulls hold its five parameters; lane_key (lane) or
 *		hint_priority and hint_since (hinted) say where it starts.  The
 *		result is in SPI_tuptable, as from dequeue.c's claim.
 */
void
queue_citus_claim(Datum *values, const char *nulls, bool lane, Datum lane_key,
				  bool hinted, int32 hint_priority, TimestampTz hint_since)
{
	Oid			argtypes[8] = {TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT2OID,
	INT4OID, TIMESTAMPTZOID, INT8OID};
	Datum		v[8];
	char		n[8];
	SPIPlanPtr	plan;

	memcpy(v, values, sizeof(Datum) * 5);
	memcpy(n, nulls, 5);
	v[5] = Int32GetDatum(hint_priority);
	v[6] = TimestampTzGetDatum(hint_since);
	n[5] = n[6] = hinted ? ' ' : 'n';
	v[7] = Int64GetDatum(queue_claim_token());
	n[7] = ' ';
	if (lane)
	{
		argtypes[5] = TEXTOID;
		v[5] = lane_key;
		n[5] = ' ';
		plan = queue_prepare_cached(&citus_lane_claim_plan, CITUS_LANE_CLAIM_SQL, 8, argtypes);
	}
	else if (hinted)
		plan = queue_prepare_cached(&citus_hinted_claim_plan, CITUS_HINTED_CLAIM_SQL, 8, argtypes);
	else
		plan = queue_prepare_cached(&citus_claim_plan, CITUS_CLAIM_SQL, 8, argtypes);
	queue_spi_exec(plan, v, n, false, 0, SPI_OK_SELECT, "claim");
}

/*
 * complete's and complete_batch's DELETE under Citus: its first five
 * columns are those of their plain statements (ack.c), the others go to
 * item_done.
 */
#define CITUS_COMPLETED_COLUMNS \
	"RETURNING i.item_id, i.dedup_key, i.attempt, i.worker, i.lease_token" OP("<") "0, " \
	"          i.payload, i.enqueued_at, i.claimed_at, i.correlation_id, i.progress"
#define CITUS_COMPLETE_SQL \
	"DELETE FROM queue.item_live i " \
	" WHERE i.queue_name" OP("=") "$1 AND i.item_id" OP("=") "$2 " \
	"   AND pg_catalog.abs(i.lease_token)" OP("=") "$3 " \
	CITUS_COMPLETED_COLUMNS
#define CITUS_COMPLETE_BATCH_SQL \
	"DELETE FROM queue.item_live i " \
	" WHERE i.queue_name" OP("=") "$1 AND i.item_id" OP("=") "ANY ($2) " \
	"   AND (i.item_id, pg_catalog.abs(i.lease_token))" OP("=") "ANY (" \
	"       SELECT u.id, u.tok FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.int8[]), " \
	"                                          pg_catalog.unnest($3::pg_catalog.int8[])) AS u(id, tok)) " \
	CITUS_COMPLETED_COLUMNS
#define CITUS_HISTORY_SQL \
	"INSERT INTO queue.item_done (queue_name, item_id, payload, result, attempts, worker, " \
	"       enqueued_at, claimed_at, completed_at, dedup_key, correlation_id, progress) " \
	"SELECT $1, u.i, u.p, $2, u.a, u.w, u.e, u.c, pg_catalog.statement_timestamp(), u.k, u.r, u.g " \
	"  FROM ROWS FROM (pg_catalog.unnest($3::pg_catalog.int8[]), pg_catalog.unnest($4::pg_catalog.jsonb[]), " \
	"                  pg_catalog.unnest($5::pg_catalog.int4[]), pg_catalog.unnest($6::pg_catalog.text[]), " \
	"                  pg_catalog.unnest($7::pg_catalog.timestamptz[]), pg_catalog.unnest($8::pg_catalog.timestamptz[]), " \
	"                  pg_catalog.unnest($9::pg_catalog.text[]), pg_catalog.unnest($10::pg_catalog.text[]), " \
	"                  pg_catalog.unnest($11::pg_catalog.jsonb[])) AS u(i, p, a, w, e, c, k, r, g)"

/* Column col (1-based) of the n rows of t, as an array of type elemtype. */
static Datum
column_array(SPITupleTable *t, uint64 n, int col, Oid elemtype)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *nulls = palloc(sizeof(bool) * Max(n, 1));
	int			dims[1];
	int			lbs[1] = {1};
	int16		typlen;
	bool		typbyval;
	char		typalign;

	for (uint64 r = 0; r < n; r++)
		elems[r] = SPI_getbinval(t->vals[r], t->tupdesc, col, &nulls[r]);
	dims[0] = (int) n;
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, elemtype,
											  typlen, typbyval, typalign));
}

/*
 * queue_citus_complete
 *		complete's (batch false: $2 an item id, $3 its token) or
 *		complete_batch's (batch true: $2 and $3 arrays of them) statement in
 *		its Citus form (see the file header).  values and nulls hold the
 *		four parameters of ack.c's statement ($1 queue, $4 result); the
 *		completed rows are left in SPI_tuptable and SPI_processed, their
 *		first five columns those of ack.c's statement.
 */
void
queue_citus_complete(Datum *values, const char *nulls, bool batch)
{
	Oid			dt[3] = {TEXTOID, INT8OID, INT8OID};
	Oid			ht[11] = {TEXTOID, JSONBOID, INT8ARRAYOID, JSONBARRAYOID, INT4ARRAYOID,
		TEXTARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
	JSONBARRAYOID};
	Oid			elemtypes[9] = {INT8OID, JSONBOID, INT4OID, TEXTOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TEXTOID, TEXTOID, JSONBOID};
	/* columns of the DELETE's rows, in the order of the INSERT's arrays */
	int			cols[9] = {1, 6, 3, 4, 7, 8, 2, 9, 10};
	Datum		hv[11];
	char		hn[11];
	SPITupleTable *done;
	uint64		ndone;

	if (batch)
	{
		dt[1] = dt[2] = INT8ARRAYOID;
		queue_spi_exec(queue_prepare_cached(&citus_complete_batch_plan, CITUS_COMPLETE_BATCH_SQL,
											3, dt),
					   values, nulls, false, 0, SPI_OK_DELETE_RETURNING, "completing items");
	}
	else
		queue_spi_exec(queue_prepare_cached(&citus_complete_plan, CITUS_COMPLETE_SQL, 3, dt),
					   values, nulls, false, 0, SPI_OK_DELETE_RETURNING, "completing item");
	done = SPI_tuptable;
	ndone = SPI_processed;
	if (ndone > 0)
	{
		hv[0] = values[0];
		hn[0] = ' ';
		hv[1] = values[3];
		hn[1] = nulls[3];
		for (int c = 0; c < 9; c++)
		{
			hv[c + 2] = column_array(done, ndone, cols[c], elemtypes[c]);
			hn[c + 2] = ' ';
		}
		queue_spi_exec(queue_prepare_cached(&citus_history_plan, CITUS_HISTORY_SQL, 11, ht),
					   hv, hn, false, 0, SPI_OK_INSERT, "recording history");
	}
	/* NB: the INSERT replaced them; the DELETE's rows live until SPI_finish */
	SPI_tuptable = done;
	SPI_processed = ndone;
}

/* Is node a call of a queue function with a NULL queue_name first? */
static bool
null_queue_name_call(Node *node, ParamListInfo params)
{
	FuncExpr   *func;
	Node	   *arg;
	HeapTuple	proctup;
	Oid		   *argtypes;
	char	  **argnames = NULL;
	char	   *argmodes;
	bool		result;

	if (node == NULL || !IsA(node, FuncExpr))
		return false;
	func = (FuncExpr *) node;
	if (func->args == NIL)
		return false;
	arg = strip_implicit_coercions(linitial(func->args));
	if (IsA(arg, Const))
	{
		if (!((Const *) arg)->constisnull)
			return false;
	}
	else if (IsA(arg, Param) && ((Param *) arg)->paramkind == PARAM_EXTERN &&
			 params != NULL && ((Param *) arg)->paramid > 0 &&
			 ((Param *) arg)->paramid <= params->numParams)
	{
		ParamExternData workspace;
		ParamExternData *prm;
		int			id = ((Param *) arg)->paramid;

		prm = params->paramFetch != NULL ?
			params->paramFetch(params, id, false, &workspace) :
			&params->params[id - 1];
		if (prm == NULL || !prm->isnull)
			return false;
	}
	else
		return false;

	if (get_func_namespace(func->funcid) != get_namespace_oid("queue", true))
		return false;
	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(func->funcid));
	if (!HeapTupleIsValid(proctup))
		return false;
	/* a queue_name with a default (stats, health: NULL = every queue) is no call to refuse */
	result = get_func_arg_info(proctup, &argtypes, &argnames, &argmodes) > 0 &&
		argnames != NULL && strcmp(argnames[0], "queue_name") == 0 &&
		((Form_pg_proc) GETSTRUCT(proctup))->pronargdefaults <
		((Form_pg_proc) GETSTRUCT(proctup))->pronargs;
	ReleaseSysCache(proctup);
	return result;
}

/*
 * queue_planner
 *		Refuse, before Citus plans it, a top-level call of a queue function
 *		with a NULL queue name (see the file header).
 */
static PlannedStmt *
queue_planner(Query *parse, const char *query_string, int cursorOptions,
			  ParamListInfo boundParams)
{
	if (parse->commandType == CMD_SELECT)
	{
		ListCell   *lc;

		foreach(lc, parse->targetList)
		{
			if (null_queue_name_call((Node *) ((TargetEntry *) lfirst(lc))->expr, boundParams))
				queue_check_name((Datum) 0, true);
		}
		foreach(lc, parse->rtable)
		{
			RangeTblEntry *rte = (RangeTblEntry *) lfirst(lc);
			ListCell   *fc;

			if (rte->rtekind != RTE_FUNCTION)
				continue;
			foreach(fc, rte->functions)
			{
				if (null_queue_name_call(((RangeTblFunction *) lfirst(fc))->funcexpr, boundParams))
					queue_check_name((Datum) 0, true);
			}
		}
	}
	if (prev_planner_hook != NULL)
		return prev_planner_hook(parse, query_string, cursorOptions, boundParams);
	return standard_planner(parse, query_string, cursorOptions, boundParams);
}

/*
 * queue_distributed_init
 *		Under Citus, put queue_planner in front of Citus's planner.  Called
 *		by _PG_init; Citus must come first in shared_preload_libraries (it
 *		insists on it), so its hook is in place already.
 */
void
queue_distributed_init(void)
{
	if (!queue_citus_loaded())
		return;
	prev_planner_hook = planner_hook;
	planner_hook = queue_planner;
}
