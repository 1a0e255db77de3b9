/*-------------------------------------------------------------------------
 *
 * flow.c
 *		Claim-time flow control: the lanes of limited keys and the
 *		queue-wide rate.
 *
 * Items of a limit_key that has a row in queue.flow_limit sit in a
 * priority band of their own (schema/45_flow.sql), out of the ordinary
 * claim's reach.  dequeue claims them lane by lane: flow_open_lanes()
 * locks, with FOR UPDATE SKIP LOCKED, up to a batch's worth of the
 * queue's keys whose ready_at has come, and works out under each lock how
 * much the key may still take: its max_in_flight less its current leases,
 * its rate less its claims (queue.flow_claim) in the window of `per`
 * ending now.  dequeue claims at most that much from the key
 * (dequeue.c), and flow_close_lane() records the claims of a rated key
 * and sets ready_at to when the key may next give something, so that a
 * full or throttled key costs later claims one index probe at most, never
 * a walk over its items.  The lock of a key's row is held to the end of
 * the transaction, so the count and the claim of one key never interleave
 * with another dequeuer's: the caps and rates are exact.  Keys whose lock
 * is taken are skipped, never waited for.
 *
 * The clock of the rate window is the wall clock read after the key's
 * lock is taken; claims are recorded at that instant, so recorded claims
 * of a key are in lock order and every window of `per` holds at most
 * `rate` of them.
 *
 * The queue-wide rate (limit_key '') works the same way on every claim of
 * the queue: flow_queue_rate_room() before the claim, flow_close_lane()
 * after it.
 *
 * Commits take their flow locks in one order.  When a transaction
 * commits, its deferred triggers lock a group's row in queue.flow_group
 * (queue._group_settle()) once per item that joined the group or per head
 * that left it, and wake a parked limited key by updating its row in
 * queue.flow_limit once per lease that ended or item that became due, in
 * the order the rows were written.  Two commits that touched the same
 * groups or keys in other orders would each hold one and wait for the
 * other.  So every row whose deferred trigger will take such a lock is
 * noted here as it is written (queue._group_touched() and
 * queue._key_touched(), AFTER ROW triggers), and the first deferred
 * trigger of the commit locks all the noted groups, then all the noted
 * keys that are parked, each in (queue_name, name) byte order
 * (queue._flow_lock_touched()); the triggers that follow take locks the
 * transaction holds already.  Notes of a subtransaction that rolls back
 * are dropped with it.
 *
 * src/flow.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "queue.h"

/*
 * The keys a dequeue opens: of the keys whose ready_at has come, in
 * ready_at order, the first LANE_CANDIDATES that hold an item the worker
 * ($3) may claim (one probe of item_live_limit_claim_idx per key); of
 * those, the ones whose first such item comes first in the claim order,
 * locked in that order, skipping locked ones.  A key with nothing the
 * worker may claim (drained, set up ahead of its items, only scheduled or
 * leased items, or items needing labels the worker lacks) costs its probe
 * and is left out before the candidates are counted, so no number of such
 * keys keeps a key the worker can serve from being looked at.  The
 * candidates are read without a lock, so a dequeue never holds a key it
 * does not claim from.  Each key comes with whether its first such item
 * is one the claim dead-letters instead (past expires_at, a spent lost
 * lease: FLOW_HANDED_OUT_EXPR), for dequeue.c to bury it when the batch
 * has room.
 */
#define LANE_CANDIDATES "1000"
#define LANE_ITEMS \
	"           FROM queue.item_live i " \
	"          WHERE i.queue_name" OP("=") "$1 AND i.limit_key" OP("=") "r.limit_key " \
	"            AND i.priority" OP(">=") FLOW_BAND " " \
	"            AND i.visible_at" OP("<=") "pg_catalog.statement_timestamp() " \
	"            AND (i.requires IS NULL OR i.requires" OP("<@") \
	"                 (SELECT w.labels FROM queue.worker_registry w WHERE w.worker" OP("=") "$3)) "
/*
 * A key is placed by its first item the claim may hand out (g), not by
 * items ahead of it that the claim dead-letters instead: keys whose first
 * items are expired or spent never take the places of keys with an item
 * to give.  Keys with only such items come last.
 */
#define LANES_SQL \
	"WITH c AS (" \
	"  SELECT r.limit_key, f.handed, g.priority, g.visible_at, g.item_id, " \
	"         f.priority AS first_priority, f.visible_at AS first_visible_at, " \
	"         f.item_id AS first_item_id " \
	"    FROM (SELECT l.limit_key, l.ready_at FROM queue.flow_limit l " \
	"           WHERE l.queue_name" OP("=") "$1 AND l.limit_key" OP("<>") "'' " \
	"             AND l.ready_at" OP("<=") "pg_catalog.statement_timestamp() " \
	"           ORDER BY l.ready_at) r " \
	"   CROSS JOIN LATERAL (" \
	"         SELECT i.priority, i.visible_at, i.item_id, " FLOW_HANDED_OUT_EXPR " AS handed " \
	LANE_ITEMS \
	"          ORDER BY i.priority, i.visible_at, i.item_id LIMIT 1) f " \
	"    LEFT JOIN LATERAL (" \
	"         SELECT i.priority, i.visible_at, i.item_id " \
	LANE_ITEMS \
	FLOW_HANDED_OUT \
	"          ORDER BY i.priority, i.visible_at, i.item_id LIMIT 1) g ON true " \
	"   ORDER BY r.ready_at LIMIT " LANE_CANDIDATES ") " \
	"SELECT l.limit_key, coalesce(l.max_in_flight, 0), coalesce(l.rate, 0), l.per, " \
	"       NOT c.handed " \
	"  FROM c JOIN queue.flow_limit l " \
	"    ON l.queue_name" OP("=") "$1 AND l.limit_key" OP("=") "c.limit_key " \
	" WHERE l.ready_at" OP("<=") "pg_catalog.statement_timestamp() " \
	" ORDER BY c.item_id IS NULL, c.priority, c.visible_at, c.item_id, " \
	"          c.first_priority, c.first_visible_at, c.first_item_id " \
	" LIMIT $2 FOR UPDATE OF l SKIP LOCKED"

#define QUEUE_RATE_SQL \
	"SELECT l.limit_key, 0, coalesce(l.rate, 0), l.per " \
	"  FROM queue.flow_limit l " \
	" WHERE l.queue_name" OP("=") "$1 AND l.limit_key" OP("=") "'' " \
	"   FOR UPDATE SKIP LOCKED"

/* a key's current leases (item_live_limit_lease_idx) */
#define KEY_IN_FLIGHT_SQL \
	"SELECT pg_catalog.count(*), pg_catalog.min(lease_expires_at) FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND limit_key" OP("=") "$2 AND worker IS NOT NULL " \
	"   AND lease_expires_at" OP(">") "pg_catalog.statement_timestamp()"

/* claims in the window ending at $3, newest first, as many as the rate */
#define WINDOW_SQL \
	"SELECT pg_catalog.count(*), pg_catalog.min(w.at) FROM (" \
	"  SELECT f.at FROM queue.flow_claim f " \
	"   WHERE f.queue_name" OP("=") "$1 AND f.limit_key" OP("=") "$2 " \
	"     AND f.at" OP(">") "($3" OP("-") "$4) " \
	"   ORDER BY f.at DESC LIMIT $5) w"

/* when the key's next item is (or was) due: its band, neither parked nor held */
#define NEXT_DUE_SQL \
	"SELECT pg_catalog.min(visible_at) FROM queue.item_live " \
	" WHERE queue_name" OP("=") "$1 AND limit_key" OP("=") "$2 " \
	"   AND priority" OP(">=") FLOW_BAND " " \
	"   AND visible_at" OP("<") "'" FLOW_PARKED "'::pg_catalog.timestamptz"

/* record claims; forget those older than an hour and the window */
#define LOG_SQL \
	"WITH gone AS (DELETE FROM queue.flow_claim f " \
	"               WHERE f.queue_name" OP("=") "$1 AND f.limit_key" OP("=") "$2 " \
	"                 AND f.at" OP("<") "($3" OP("-") "greatest($5, '1 hour'::pg_catalog.interval))) " \
	"INSERT INTO queue.flow_claim (queue_name, limit_key, at, item_id) " \
	"SELECT $1, $2, $3, pg_catalog.unnest($4::pg_catalog.int8[])"

#define READY_SQL \
	"UPDATE queue.flow_limit SET ready_at = $3 " \
	" WHERE queue_name" OP("=") "$1 AND limit_key" OP("=") "$2"

static SPIPlanPtr lanes_plan = NULL;
static SPIPlanPtr queue_rate_plan = NULL;
static SPIPlanPtr in_flight_plan = NULL;
static SPIPlanPtr window_plan = NULL;
static SPIPlanPtr next_due_plan = NULL;
static SPIPlanPtr log_plan = NULL;
static SPIPlanPtr ready_plan = NULL;

/* Count and oldest (or earliest) timestamp of a two-column aggregate row. */
static int64
run_count_min(SPIPlanPtr plan, Datum *values, TimestampTz *min, bool *has_min)
{
	bool		isnull;
	Datum		d;
	int64		n;

	/* under the key's lock: every committed lease and claim counts */
	queue_spi_count_latest(plan, values, "flow count query");
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	*has_min = !isnull;
	*min = isnull ? 0 : DatumGetTimestampTz(d);
	return n;
}

/*
 * Work out, under the key's lock, how much the lane may take now, and
 * when a full or throttled key may next take something.
 */
static void
lane_measure(Datum qname, FlowLane *lane)
{
	lane->at = GetCurrentTimestamp();
	lane->room = PG_INT64_MAX;

	if (lane->max_in_flight > 0)
	{
		Oid			t[2] = {TEXTOID, TEXTOID};
		Datum		v[2] = {qname, lane->key};
		TimestampTz first;
		bool		has_first;

		lane->in_flight = run_count_min(queue_prepare_cached(&in_flight_plan, KEY_IN_FLIGHT_SQL,
															 2, t),
										v, &first, &has_first);
		lane->room = Max(lane->max_in_flight - lane->in_flight, 0);
	}
	if (lane->rate > 0)
	{
		Oid			t[5] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, INTERVALOID, INT4OID};
		Datum		v[5];
		TimestampTz oldest;
		bool		has_oldest;
		int64		used;

		v[0] = qname;
		v[1] = lane->key;
		v[2] = TimestampTzGetDatum(lane->at);
		v[3] = IntervalPGetDatum(&lane->per);
		v[4] = Int32GetDatum(lane->rate);
		used = run_count_min(queue_prepare_cached(&window_plan, WINDOW_SQL, 5, t),
							 v, &oldest, &has_oldest);
		lane->used = used;
		lane->oldest = has_oldest ? oldest : lane->at;
		lane->room = Min(lane->room, Max(lane->rate - used, 0));
	}
}

/* Fill a lane from a row of LANES_SQL or QUEUE_RATE_SQL. */
static void
lane_from_row(HeapTuple tup, TupleDesc desc, FlowLane *lane)
{
	bool		isnull;

	memset(lane, 0, sizeof(FlowLane));
	lane->key = SPI_getbinval(tup, desc, 1, &isnull);
	lane->key = PointerGetDatum(SPI_datumTransfer(lane->key, false, -1));
	lane->max_in_flight = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	lane->rate = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	lane->per = *DatumGetIntervalP(SPI_getbinval(tup, desc, 4, &isnull));
	if (desc->natts >= 5)
		lane->head_buried = DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull)) && !isnull;
}

/*
 * flow_open_lanes
 *		Lock up to max keys of the queue whose ready_at has come and that
 *		hold an item worker may claim, and measure each.  Returns how many;
 *		*lanes is palloc'd in the caller's context (SPI_palloc).  Keys whose
 *		lock another dequeuer holds are skipped.
 */
int
flow_open_lanes(Datum qname, Datum worker, int max, FlowLane **lanes)
{
	Oid			t[3] = {TEXTOID, INT4OID, TEXTOID};
	Datum		v[3];
	SPITupleTable *tuptable;
	int			n;

	v[0] = qname;
	v[1] = Int32GetDatum(max);
	v[2] = worker;
	queue_spi_exec(queue_prepare_cached(&lanes_plan, LANES_SQL, 3, t),
				   v, NULL, false, 0, SPI_OK_SELECT, "locking limit keys");
	tuptable = SPI_tuptable;
	n = (int) SPI_processed;
	*lanes = (FlowLane *) SPI_palloc(sizeof(FlowLane) * Max(n, 1));
	for (int i = 0; i < n; i++)
		lane_from_row(tuptable->vals[i], tuptable->tupdesc, &(*lanes)[i]);
	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		lane_measure(qname, &(*lanes)[i]);
	}
	return n;
}

/*
 * flow_queue_rate_room
 *		Lock the queue-wide rate and measure it into *lane.  Returns false
 *		when another dequeuer holds it (claim nothing, as SKIP LOCKED would).
 */
bool
flow_queue_rate_room(Datum qname, FlowLane *lane)
{
	Oid			t[1] = {TEXTOID};

	queue_spi_exec(queue_prepare_cached(&queue_rate_plan, QUEUE_RATE_SQL, 1, t),
				   &qname, NULL, false, 0, SPI_OK_SELECT, "locking the queue rate");
	if (SPI_processed == 0)
		return false;
	lane_from_row(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, lane);
	lane_measure(qname, lane);
	return true;
}

/*
 * The ready_at of a key that may give something now: no later than the
 * statement's start, which LANES_SQL compares ready_at with, so that the
 * next cap stripe of the same dequeue (and every later statement) can open
 * the key again.  lane->at, read after the key's lock, is later than that.
 */
static TimestampTz
lane_ready_now(const FlowLane *lane)
{
	return Min(lane->at, GetCurrentStatementStartTimestamp());
}

/*
 * flow_close_lane
 *		Record the claims of a rated lane (ids: the nids items claimed at
 *		lane->at) and, for a key, set ready_at.  asked: how many the lane
 *		was offered.
 */
void
flow_close_lane(Datum qname, FlowLane *lane, int64 asked, int nids, Datum *ids)
{
	TimestampTz ready;

	if (lane->rate > 0 && nids > 0)
	{
		Oid			t[5] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, INT8ARRAYOID, INTERVALOID};
		Datum		v[5];

		v[0] = qname;
		v[1] = lane->key;
		v[2] = TimestampTzGetDatum(lane->at);
		v[3] = PointerGetDatum(construct_array(ids, nids, INT8OID, 8,
											   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		v[4] = IntervalPGetDatum(&lane->per);
		queue_spi_exec(queue_prepare_cached(&log_plan, LOG_SQL, 5, t),
					   v, NULL, false, 0, SPI_OK_INSERT, "recording rate claims");
	}
	if (VARSIZE_ANY_EXHDR(DatumGetTextPP(lane->key)) == 0)
		return;					/* the queue-wide rate has no ready_at */

	/* when may this key next give something? */
	if (lane->max_in_flight > 0 && lane->in_flight + nids >= lane->max_in_flight)
	{
		/* full: look again when its first lease runs out (an end wakes it sooner) */
		Oid			t[2] = {TEXTOID, TEXTOID};
		Datum		v[2] = {qname, lane->key};
		bool		has_first;

		(void) run_count_min(queue_prepare_cached(&in_flight_plan, KEY_IN_FLIGHT_SQL, 2, t),
							 v, &ready, &has_first);
		if (!has_first)
			ready = lane_ready_now(lane);
	}
	else if (nids < asked || lane->room == 0)
	{
		Oid			t[2] = {TEXTOID, TEXTOID};
		Datum		v[2] = {qname, lane->key};
		TimestampTz due;
		bool		isnull;
		Datum		d;

		queue_spi_exec_one(queue_prepare_cached(&next_due_plan, NEXT_DUE_SQL, 2, t),
						   v, NULL, false, 1, SPI_OK_SELECT, "finding a key's next item");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		due = isnull ? DT_NOEND : DatumGetTimestampTz(d);
		ready = due;
	}
	else
		ready = lane_ready_now(lane);
	/* throttled: nothing before the oldest claim leaves the window */
	if (lane->rate > 0 && lane->used + nids >= lane->rate)
	{
		TimestampTz oldest = (lane->used > 0) ? lane->oldest : lane->at;
		Datum		end = DirectFunctionCall2(timestamptz_pl_interval,
											  TimestampTzGetDatum(oldest),
											  IntervalPGetDatum(&lane->per));

		ready = Max(ready, DatumGetTimestampTz(end));
	}
	{
		Oid			t[3] = {TEXTOID, TEXTOID, TIMESTAMPTZOID};
		Datum		v[3];

		v[0] = qname;
		v[1] = lane->key;
		v[2] = TimestampTzGetDatum(ready);
		queue_spi_exec(queue_prepare_cached(&ready_plan, READY_SQL, 3, t),
					   v, NULL, false, 0, SPI_OK_UPDATE, "updating a key's ready time");
	}
}

/*
 * flow_check_key
 *		A group_key or limit_key: NULL is none, '' is refused (22023).
 */
void
flow_check_key(Datum key, bool isnull, const char *argname)
{
	if (isnull)
		return;
	if (VARSIZE_ANY_EXHDR(DatumGetTextPP(key)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname),
				 errhint("Pass NULL for an item without one.")));
	queue_check_key_size(key, argname);
}

/*
 * flow_check_keys
 *		The per-item keys of enqueue_batch: NULL or a one-dimensional array
 *		of n elements (NULL elements: no key).  A refused element is named
 *		by its position (group_keys[2]), as dedup_keys' and payloads' are.
 */
void
flow_check_keys(Datum keys, bool isnull, int n, const char *argname)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;

	if (isnull)
		return;
	arr = DatumGetArrayTypeP(keys);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", argname)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	if (nelems != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has %d elements but payloads has %d", argname, nelems, n),
				 errhint("Pass one key per payload, NULL for items without one.")));
	for (int i = 0; i < n; i++)
	{
		char		elemname[NAMEDATALEN + 16];

		CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			continue;
		snprintf(elemname, sizeof(elemname), "%s[%d]", argname, i + 1);
		flow_check_key(elems[i], false, elemname);
	}
}

/*
 * flow_check_requires
 *		requires: NULL or an array of labels without NULLs or empty ones
 *		(a label is a worker's capability, never ''); an empty array
 *		requires nothing and is stored as NULL (*isnull set).
 */
Datum
flow_check_requires(Datum requires, bool *isnull)
{
	ArrayType  *arr;

	if (*isnull)
		return (Datum) 0;
	arr = DatumGetArrayTypeP(requires);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("requires must be a one-dimensional array")));
	if (array_contains_nulls(arr))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("requires must not contain NULL labels")));
	if (ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr)) == 0)
	{
		*isnull = true;
		return (Datum) 0;
	}
	{
		Datum	   *labels;
		int			nlabels;
		Size		bytes = 0;

		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &labels, NULL, &nlabels);
		for (int i = 0; i < nlabels; i++)
		{
			if (VARSIZE_ANY_EXHDR(DatumGetPointer(labels[i])) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("requires must not contain empty labels")));
			bytes += VARSIZE_ANY_EXHDR(DatumGetPointer(labels[i]));
		}
		/* stored with every item: bounded as a whole like a text */
		queue_check_text_bytes(bytes, "requires");
	}
	return PointerGetDatum(arr);
}

/*
 * Groups: one lock order at commit ------------------------------------------
 */

typedef struct FlowNote
{
	bool		is_key;			/* a limit key (else a group) */
	char	   *queue;
	char	   *name;			/* group_key or limit_key */
	SubTransactionId subid;		/* of the (sub)transaction that wrote it */
} FlowNote;

/* the groups and keys this transaction will lock at commit
 * (TopTransactionContext) */
static List *flow_notes = NIL;

#define GROUP_LOCK_SQL "SELECT queue._group_lock($1, $2)"
static SPIPlanPtr group_lock_plan = NULL;

/* a key's row, if parked: only a parked key is woken (_flow_on_commit) */
#define KEY_LOCK_SQL \
	"SELECT 1 FROM queue.flow_limit l " \
	" WHERE l.queue_name" OP("=") "$1 AND l.limit_key" OP("=") "$2 " \
	"   AND l.ready_at" OP(">") "pg_catalog.now() FOR UPDATE"
static SPIPlanPtr key_lock_plan = NULL;

/*
 * The members a dequeue of this transaction made their groups' heads
 * (queue._group_move_on), for the group's settle at commit
 * (TopTransactionContext; the latest of a group counts).
 */
typedef struct GroupPromoted
{
	char	   *queue;
	char	   *group;
	int64		item_id;
	SubTransactionId subid;		/* of the (sub)transaction that promoted it */
} GroupPromoted;

static List *group_promoted = NIL;

PG_FUNCTION_INFO_V1(queue_group_touched);
PG_FUNCTION_INFO_V1(queue_key_touched);
PG_FUNCTION_INFO_V1(queue_flow_lock_touched);
PG_FUNCTION_INFO_V1(queue_group_promoted_note);
PG_FUNCTION_INFO_V1(queue_group_promoted);

static void
group_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			flow_notes = NIL;	/* freed with TopTransactionContext */
			group_promoted = NIL;
			break;
		default:
			break;
	}
}

/*
 * Subtransactions get increasing ids, and one that is open has no notes
 * but its own and its children's with ids below it: a rollback drops the
 * notes at or above its id.
 */
static void
group_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	foreach(lc, flow_notes)
	{
		FlowNote   *note = (FlowNote *) lfirst(lc);

		if (note->subid >= mySubid)
			flow_notes = foreach_delete_current(flow_notes, lc);
	}
	foreach(lc, group_promoted)
	{
		GroupPromoted *gp = (GroupPromoted *) lfirst(lc);

		if (gp->subid >= mySubid)
			group_promoted = foreach_delete_current(group_promoted, lc);
	}
}

/*
 * queue_flow_init
 *		From _PG_init.
 */
void
queue_flow_init(void)
{
	RegisterXactCallback(group_xact_callback, NULL);
	RegisterSubXactCallback(group_subxact_callback, NULL);
}

/*
 * note_row
 *		Note the (queue_name, <column>) of the row an AFTER ROW trigger
 *		fired for.  A row of the same group or key as the note before it (a
 *		batch into one group) adds nothing.
 */
static void
note_row(FunctionCallInfo fcinfo, const char *fname, const char *column, bool is_key)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	desc;
	Datum		queue;
	Datum		name;
	bool		qnull;
	bool		nnull;
	char	   *qstr;
	char	   *nstr;
	SubTransactionId subid = GetCurrentSubTransactionId();
	MemoryContext oldcxt;
	FlowNote   *note;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "%s must be an AFTER ROW trigger", fname);
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? trigdata->tg_newtuple
		: trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);
	queue = heap_getattr(tuple, SPI_fnumber(desc, "queue_name"), desc, &qnull);
	name = heap_getattr(tuple, SPI_fnumber(desc, column), desc, &nnull);
	if (qnull || nnull)
		return;
	qstr = TextDatumGetCString(queue);
	nstr = TextDatumGetCString(name);

	if (flow_notes != NIL)
	{
		FlowNote   *last = (FlowNote *) llast(flow_notes);

		if (last->subid == subid && last->is_key == is_key &&
			strcmp(last->name, nstr) == 0 && strcmp(last->queue, qstr) == 0)
			return;
	}
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	note = palloc(sizeof(FlowNote));
	note->is_key = is_key;
	note->queue = pstrdup(qstr);
	note->name = pstrdup(nstr);
	note->subid = subid;
	flow_notes = lappend(flow_notes, note);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * queue._group_touched() trigger
 *
 * AFTER ROW on the rows whose deferred triggers settle a group at commit
 * (an item joining a group, a head leaving it, a dead head reviewed):
 * notes the row's (queue_name, group_key).
 */
Datum
queue_group_touched(PG_FUNCTION_ARGS)
{
	note_row(fcinfo, "queue._group_touched()", "group_key", false);
	return PointerGetDatum(NULL);
}

/*
 * queue._key_touched() trigger
 *
 * AFTER ROW on the rows whose deferred triggers wake a limited key at
 * commit (a lease of the key ended, an item of it inserted or made due
 * sooner): notes the row's (queue_name, limit_key).
 */
Datum
queue_key_touched(PG_FUNCTION_ARGS)
{
	note_row(fcinfo, "queue._key_touched()", "limit_key", true);
	return PointerGetDatum(NULL);
}

/* groups before keys, each in (queue_name, name) byte order */
static int
flow_note_cmp(const ListCell *a, const ListCell *b)
{
	const FlowNote *na = (const FlowNote *) lfirst(a);
	const FlowNote *nb = (const FlowNote *) lfirst(b);
	int			c;

	if (na->is_key != nb->is_key)
		return na->is_key ? 1 : -1;
	c = strcmp(na->queue, nb->queue);
	return c != 0 ? c : strcmp(na->name, nb->name);
}

/*
 * queue._flow_lock_touched() returns void
 *
 * Locks the groups noted so far (queue._group_lock), then the noted keys
 * that are parked, in the order of flow_note_cmp, each once, and forgets
 * the notes: called by every deferred flow trigger, it does the work on
 * the first of a commit.
 */
Datum
queue_flow_lock_touched(PG_FUNCTION_ARGS)
{
	List	   *notes = flow_notes;
	FlowNote   *prev = NULL;
	ListCell   *lc;
	Oid			types[2] = {TEXTOID, TEXTOID};

	if (notes == NIL)
		PG_RETURN_VOID();
	flow_notes = NIL;
	list_sort(notes, flow_note_cmp);

	queue_spi_connect();
	foreach(lc, notes)
	{
		FlowNote   *note = (FlowNote *) lfirst(lc);
		Datum		v[2];

		CHECK_FOR_INTERRUPTS();
		if (prev != NULL && prev->is_key == note->is_key &&
			strcmp(prev->queue, note->queue) == 0 && strcmp(prev->name, note->name) == 0)
			continue;
		prev = note;
		v[0] = CStringGetTextDatum(note->queue);
		v[1] = CStringGetTextDatum(note->name);
		if (note->is_key)
			queue_spi_exec(queue_prepare_cached(&key_lock_plan, KEY_LOCK_SQL, 2, types),
						   v, NULL, false, 0, SPI_OK_SELECT, "locking a limit key");
		else
			queue_spi_exec(queue_prepare_cached(&group_lock_plan, GROUP_LOCK_SQL, 2, types),
						   v, NULL, false, 0, SPI_OK_SELECT, "locking a group");
	}
	queue_spi_finish();
	list_free(notes);
	PG_RETURN_VOID();
}

/*
 * queue._group_promoted_note(queue_name text, group_key text, item_id bigint)
 * returns void
 *
 * Notes that this transaction made item_id its group's head without the
 * group's lock (queue._group_move_on), so that the group's settle at
 * commit, under the lock, takes it as the head instead of promoting the
 * next in line as well.  Dropped with a subtransaction that rolls back.
 */
Datum
queue_group_promoted_note(PG_FUNCTION_ARGS)
{
	MemoryContext oldcxt;
	GroupPromoted *gp;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_VOID();
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	gp = palloc(sizeof(GroupPromoted));
	gp->queue = text_to_cstring(PG_GETARG_TEXT_PP(0));
	gp->group = text_to_cstring(PG_GETARG_TEXT_PP(1));
	gp->item_id = PG_GETARG_INT64(2);
	gp->subid = GetCurrentSubTransactionId();
	group_promoted = lappend(group_promoted, gp);
	MemoryContextSwitchTo(oldcxt);
	PG_RETURN_VOID();
}

/*
 * queue._group_promoted(queue_name text, group_key text) returns bigint
 *
 * The member this transaction last made the group's head without its
 * lock (queue._group_promoted_note), NULL if none.
 */
Datum
queue_group_promoted(PG_FUNCTION_ARGS)
{
	char	   *queue;
	char	   *group;
	int64		found = 0;
	bool		any = false;
	ListCell   *lc;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || group_promoted == NIL)
		PG_RETURN_NULL();
	queue = text_to_cstring(PG_GETARG_TEXT_PP(0));
	group = text_to_cstring(PG_GETARG_TEXT_PP(1));
	foreach(lc, group_promoted)
	{
		GroupPromoted *gp = (GroupPromoted *) lfirst(lc);

		if (strcmp(gp->queue, queue) == 0 && strcmp(gp->group, group) == 0)
		{
			found = gp->item_id;
			any = true;
		}
	}
	if (!any)
		PG_RETURN_NULL();
	PG_RETURN_INT64(found);
}
