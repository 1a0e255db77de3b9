/*-------------------------------------------------------------------------
 *
 * dequeue.c
 *		The claim: dequeue().
 *
 * Leases run from the claiming statement's start (statement_timestamp()),
 * never from the start of the caller's transaction: a dequeue inside an
 * old transaction still hands out a full lease.
 *
 * One statement picks the head of the queue's claim index
 * (queue_name, priority, visible_at, item_id) with FOR UPDATE SKIP LOCKED
 * and leases what it picked: a fresh lease_token from a sequence (the
 * fencing token), attempt + 1, visible_at moved to the lease's end.  The
 * picked rows are found again by the TIDs of the versions the statement
 * itself locked (ctid = ANY(ARRAY(...)), a TID scan), never by a search of
 * the queue: the plan is an index scan and a TID scan whatever the
 * statistics say, even before the first ANALYZE.  A locked version that
 * was committed after the statement's snapshot is not visible to that TID
 * scan; such a row comes back flagged as missed and the next statement
 * (a fresh snapshot, the lock still ours) claims it.  Rows that must not be handed out (past
 * expires_at, or a lost lease whose attempts are spent) come back flagged
 * from the same statement; they are dead-lettered on the spot, up to
 * DEQUEUE_MAX_BURIED per call, and the claim repeats for what is missing.
 * A lost lease of an item whose cancel was requested (a negated token, see
 * ack.c) counts as spent: it is buried (cancelled), never re-run.
 *
 * Gates before the claim, in order: paused queue or open breaker (whose
 * single half-open probe breaker.c grants), worker
 * draining or in maintenance, the
 * worker's capacity (its registry row locked, so sessions of one worker
 * serialise), the queue's max_in_flight.  The cap is split into up to
 * CAP_STRIPES stripes, each with its share of the cap and its own
 * transaction lock (a private lock tag no SQL role can take, config.c); a claim is charged to the stripe it locked
 * (item_live.cap_stripe), and a stripe's count and claim run under its
 * lock, so the shares, and thus the cap, are exact while up to
 * CAP_STRIPES dequeuers claim at once.  A stripe holding more than its
 * share (leases out when the cap was lowered) has the excess taken off the
 * other stripes' room (IN_FLIGHT_SQL); alter_queue deals the leases out
 * over a new cap's stripes, so that this is rare.  Locks are tried, never waited for:
 * a dequeuer tries the stripes from a random one and returns no rows, as
 * SKIP LOCKED would, when none is free with room.  Exactness of the caps
 * thus never costs a blocked dequeue.
 *
 * src/dequeue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "catalog/namespace.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_dequeue);
PG_FUNCTION_INFO_V1(queue_lock_cap_stripes_sql);
PG_FUNCTION_INFO_V1(queue_lock_revival_stripes_sql);

/* Columns of the result, as declared in SQL. */
#define DEQUEUE_NCOLS QUEUE_DEQUEUE_NCOLS

/*
 * Claim hints.  A claim leaves an index entry of each row's old version at
 * the head of the claim index (visible_at changed), and a completion one
 * further on.  Normally later scans mark them dead and vacuum removes
 * them; while a snapshot older than them is held open (a long report, a
 * replica with hot_standby_feedback) neither can happen, and every claim
 * would step over all of them from the head.  Even entries marked dead
 * stay on their pages until vacuum, so a queue drained in order faster
 * than vacuum visits has every claim from the head read a growing run of
 * pages.  So a claim whose index scan did more than
 * queue.claim_hint_threshold entries' work beyond what it claimed
 * (claim_index_work: entries returned and pages read) makes this backend
 * start its next claims on that queue where it found its first row (its
 * priority, visible_at and, for the direct claim, item_id), for
 * CLAIM_HINT_USECS.  A higher priority than the hint's is still looked at
 * from the head first (the direct claim scans it, the statement path
 * checks for it: HIGHER_SQL).  Rows of the hint's priority before that
 * point (another session's claim rolled back, an older run_at) are
 * collected by a claim from the head at least every
 * CLAIM_HINT_REFRESH_USECS, which also re-measures, and whenever a hinted
 * claim comes back short.  Only a backend that measured such a head ever
 * claims out of strict order, and for at most that long.
 */
#define CLAIM_HINT_SLOTS			8
#define CLAIM_HINT_USECS			(10 * USECS_PER_SEC)
#define CLAIM_HINT_REFRESH_USECS	(1 * USECS_PER_SEC)

typedef struct ClaimHint
{
	char		queue[QUEUE_NAME_MAXLEN + 1];	/* "" = free slot */
	int32		priority;		/* where the last claim found its rows */
	TimestampTz visible_at;
	int64		item_id;		/* PG_INT64_MIN where the claim statement set it */
	TimestampTz until;			/* claim from there until then */
	TimestampTz next_full;		/* next claim from the head */
} ClaimHint;

static ClaimHint claim_hints[CLAIM_HINT_SLOTS];

int			queue_claim_hint_threshold = QUEUE_DEFAULT_CLAIM_HINT_THRESHOLD;

/*
 * Expired items and spent lost leases one dequeue dead-letters at most
 * (each is a PL/pgSQL call with its events, alert and breaker check); the
 * rest wait for sweep or the next calls, which go on where this one left.
 */
#define DEQUEUE_MAX_BURIED 100

/*
 * Claims repeated in one round for rows the claim locked but missed (see
 * the header); one repeat suffices, the bound only guards the loop.
 */
#define CLAIM_MAX_RETRIES 3

/*
 * last_seen is refreshed by dequeue at most this often, and at least four
 * times per queue.worker_offline_after, so that a worker that only
 * dequeues is never offline.
 */
#define LAST_SEEN_REFRESH_USECS \
	Min(5 * USECS_PER_SEC, (int64) queue_worker_offline_after * USECS_PER_SEC / 4)

static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr hinted_claim_plan = NULL;
static SPIPlanPtr claim_plan_v1 = NULL;
static SPIPlanPtr hinted_claim_plan_v1 = NULL;
static SPIPlanPtr register_plan = NULL;
static SPIPlanPtr register_plan_v1 = NULL;
static SPIPlanPtr seen_plan = NULL;
static SPIPlanPtr worker_lock_plan = NULL;
static SPIPlanPtr worker_load_plan = NULL;
static SPIPlanPtr worker_wait_plan = NULL;
static SPIPlanPtr in_flight_plan = NULL;
static SPIPlanPtr bury_plan = NULL;
static SPIPlanPtr move_on_plan = NULL;
static SPIPlanPtr lost_plan = NULL;
static SPIPlanPtr claimed_event_plan = NULL;
static SPIPlanPtr lane_claim_plan = NULL;
static SPIPlanPtr higher_plan = NULL;
static SPIPlanPtr peek_rest_plan = NULL;
static SPIPlanPtr peek_lane_plan = NULL;

/*
 * The claim statement returns the leased rows first (their lease, no
 * candidate columns), then every candidate it locked, in claim order,
 * with its kind.  claim_round pairs the two by item id: a claimable
 * candidate without a leased row was missed by the TID scan.  Pairing
 * them in SQL would be a join of two CTE scans the planner estimates at
 * one row each, a nested loop that grows with the square of the batch.
 */
/* (the kinds, CLAIM_ROW_*, are in queue.h: the Citus form returns them too) */

/*
 * A claim ends the wait that priority aging measured: the item's effective
 * priority goes back to its own (its band kept, flow.c), so that a lease
 * that runs out makes it claimable again with its waited counted from the
 * lease's end, not from its first enqueue.
 */
#define CLAIM_PRIORITY_SET \
	"         priority = i.base_priority" OP("+") "((i.priority" OP("/") FLOW_BAND ")" OP("*") FLOW_BAND "), "

#define CLAIM_SQL_WITH(start, lost, extra_set) \
	"WITH cand AS MATERIALIZED (" \
	"  SELECT i.item_id, i.ctid AS tid, i.priority AS prio, i.visible_at AS since, " \
	"         " lost " AS lost, " \
	"         (i.expires_at IS NOT NULL AND i.expires_at" OP("<=") "pg_catalog.statement_timestamp()) AS expired, " \
	"         (i.lease_token IS NOT NULL AND (i.attempt" OP(">=") "i.max_attempts " \
	"                                        OR i.lease_token" OP("<") "0)) AS spent " \
	"    FROM queue.item_live i " \
	"   WHERE i.queue_name" OP("=") "$1 " \
	"     AND i.visible_at" OP("<=") "pg_catalog.statement_timestamp() " \
	start \
	"   ORDER BY i.priority, i.visible_at, i.item_id " \
	"   LIMIT $2 " \
	"   FOR UPDATE SKIP LOCKED), " \
	"claimed AS (" \
	"  UPDATE queue.item_live i " \
	"     SET attempt = i.attempt" OP("+") "1, " \
	"         lease_token = pg_catalog.nextval('queue.lease_token_seq'::pg_catalog.regclass), " \
	"         worker = $3, claimed_at = pg_catalog.statement_timestamp(), cap_stripe = $5, " \
	CLAIM_PRIORITY_SET \
	extra_set \
	"         lease_expires_at = pg_catalog.statement_timestamp()" OP("+") "$4, " \
	"         visible_at = pg_catalog.statement_timestamp()" OP("+") "$4, " \
	"         errors = CASE WHEN " lost " " \
	"                  THEN i.errors" OP("||") "pg_catalog.jsonb_build_array(" \
	"                    pg_catalog.jsonb_build_object('attempt', i.attempt, 'at', i.lease_expires_at, " \
	"                      'worker', i.worker, 'error', 'lease expired', 'error_code', 'lease_expired')) " \
	"                  ELSE i.errors END, " \
	"         last_error = CASE WHEN " lost " THEN 'lease expired' ELSE i.last_error END, " \
	"         error_code = CASE WHEN " lost " THEN 'lease_expired' ELSE i.error_code END " \
	"   WHERE i.ctid" OP("=") "ANY (ARRAY(SELECT c.tid FROM cand c " \
	"                                   WHERE NOT c.expired AND NOT c.spent)) " \
	"     AND i.queue_name" OP("=") OUTER_QUEUE_FILTER " " \
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

/*
 * From the head of the claim index, below the band of limited keys' items
 * (flow.c), which only their lanes claim; only items whose requires are
 * all among the worker's labels (an item without requires pays nothing:
 * the labels are read once per statement, and only when needed).
 */
#define ROUTED \
	"     AND (i.requires IS NULL OR i.requires" OP("<@") \
	"          (SELECT w.labels FROM queue.worker_registry w WHERE w.worker" OP("=") "$3)) "
#define UNLIMITED "     AND i.priority" OP("<") FLOW_BAND " "
/*
 * A re-claimed expired lease is a lost lease of its previous holder, to be
 * recorded as a failed attempt, unless sweep already counted it
 * (lost_counted).  The claim records its connection (src/worker.c).  Both
 * columns are absent before 0.2.0's update (the _V1 statements).
 */
#define CLAIM_LOST "(i.lease_token IS NOT NULL AND NOT i.lost_counted)"
#define CLAIM_LOST_V1 "(i.lease_token IS NOT NULL)"
#define CLAIM_SET "         lease_session = queue._session_key(), lost_counted = false, "
#define CLAIM_SQL CLAIM_SQL_WITH(UNLIMITED ROUTED, CLAIM_LOST, CLAIM_SET)
#define CLAIM_SQL_V1 CLAIM_SQL_WITH("", CLAIM_LOST_V1, "")

/* From where this backend last found claimable rows (see claim hints). */
#define CLAIM_HINT_START "     AND ROW(i.priority, i.visible_at)" OP(">=") "ROW($6, $7) "
#define HINTED_CLAIM_SQL CLAIM_SQL_WITH(UNLIMITED CLAIM_HINT_START ROUTED, CLAIM_LOST, CLAIM_SET)
#define HINTED_CLAIM_SQL_V1 CLAIM_SQL_WITH(CLAIM_HINT_START, CLAIM_LOST_V1, "")

/*
 * Is an item of a higher priority than the hint's claimable?  The hinted
 * statement starts at the hint and would pass it over; the direct claim
 * looks at those priorities itself (claim_direct.c).
 */
#define HIGHER_SQL \
	"SELECT 1 FROM queue.item_live i " \
	" WHERE i.queue_name" OP("=") "$1 AND i.priority" OP("<") "$2 " \
	"   AND i.visible_at" OP("<=") "pg_catalog.statement_timestamp() LIMIT 1"

/* One limited key's items (item_live_limit_claim_idx); 0.2.0 only. */
#define LANE_CLAIM_SQL \
	CLAIM_SQL_WITH("     AND i.limit_key" OP("=") "$6 AND i.priority" OP(">=") FLOW_BAND " " ROUTED, \
				   CLAIM_LOST, CLAIM_SET)

/*
 * Most limited keys one dequeue locks and claims from: as many as flow.c
 * looks at (LANE_CANDIDATES), so that a batch takes an item of every key
 * that has one to give, as that many single calls would.
 */
#define FLOW_MAX_LANES 1000

/*
 * The first claimable items of the rest of the queue ($4 NULL) or of one
 * limited key's lane ($4), in claim order, without locking them: how
 * plan_lanes shares a claim between the lanes and the rest.  A lane's
 * priority comes back without its band.  Rows the claim would dead-letter
 * instead (FLOW_HANDED_OUT) are not looked at: they are buried by the
 * claim round that meets them, and must not count as a place in the batch.
 */
#define PEEK_SQL_WITH(start, band) \
	"SELECT i.priority" OP("-") band ", i.visible_at, i.item_id FROM queue.item_live i " \
	" WHERE i.queue_name" OP("=") "$1 " \
	"   AND i.visible_at" OP("<=") "pg_catalog.statement_timestamp() " \
	FLOW_HANDED_OUT \
	start \
	" ORDER BY i.priority, i.visible_at, i.item_id LIMIT $2"
#define PEEK_REST_SQL PEEK_SQL_WITH(UNLIMITED ROUTED, "0")
#define PEEK_LANE_SQL \
	PEEK_SQL_WITH("     AND i.limit_key" OP("=") "$4 AND i.priority" OP(">=") FLOW_BAND " " ROUTED, \
				  FLOW_BAND)

/*
 * The registering connection is the worker's connection until its next
 * heartbeat or registration: a heartbeat from another one renews none of
 * the leases this one claims (see queue.heartbeat).
 */
#define REGISTER_SQL \
	"INSERT INTO queue.worker_registry (worker, registered_by, session) " \
	"VALUES ($1, queue._caller()::pg_catalog.regrole, queue._session_key()) " \
	"ON CONFLICT (worker) DO NOTHING"

/* before the update to 0.2.0 (no owner) */
#define REGISTER_SQL_V1 \
	"INSERT INTO queue.worker_registry (worker) VALUES ($1) ON CONFLICT (worker) DO NOTHING"

/*
 * The worker's row is taken SKIP LOCKED, as a sign of life takes it
 * (worker.c): another connection of the worker writing it (its own
 * dequeue refreshing last_seen, a heartbeat) is never waited for.
 */
#define SEEN_SQL \
	"UPDATE queue.worker_registry w SET last_seen = pg_catalog.now() " \
	"  FROM (SELECT x.worker FROM queue.worker_registry x " \
	"         WHERE x.worker" OP("=") "$1 FOR UPDATE SKIP LOCKED) s " \
	" WHERE w.worker" OP("=") "s.worker"

/* the worker's row lock serialises the capacity check of its sessions */
#define WORKER_LOCK_SQL \
	"SELECT capacity FROM queue.worker_registry WHERE worker" OP("=") "$1 FOR UPDATE SKIP LOCKED"

#define WORKER_LOAD_SQL \
	"SELECT pg_catalog.count(*) FROM queue.queue_config q " \
	"  JOIN queue.item_live i ON i.queue_name" OP("=") "q.queue_name " \
	" WHERE i.worker" OP("=") "$1 " \
	"   AND i.lease_expires_at" OP(">") "pg_catalog.statement_timestamp()"

/* Most stripes a queue's max_in_flight is split into. */
#define CAP_STRIPES 8

/*
 * Current leases charged to one stripe.  Leases taken under another number
 * of stripes are charged by modulo, and leases taken before the cap was set
 * (NULL) by their item id, so every current lease counts against exactly
 * one stripe and a cap turned on for a busy queue spreads the old leases
 * over all stripes instead of charging them all to one.
 */
#define CAP_STRIPE_OF \
	"(coalesce(cap_stripe::pg_catalog.int8, item_id)" OP("%") "$3::pg_catalog.int8)"

/*
 * A stripe's room: its share less its current leases, less what the other
 * stripes hold beyond their shares.  A stripe holds more than its share
 * only through a cap lowered (or turned on) while leases were out
 * (alter_queue spreads them evenly, but cannot undo leases beyond the new
 * cap, and leaves alone leases it could not lock); a claim or a revival
 * never takes a stripe past its share, so that excess only shrinks, and a
 * count of it under one stripe's lock stays an upper bound while that lock
 * is held.  Taking it off every stripe's room keeps the sum of the leases
 * within the cap however the old leases are spread.  $4 is the cap.
 */
#define STRIPE_SHARE(s) \
	"($4" OP("/") "$3" OP("+") "CASE WHEN " s OP("<") "($4" OP("%") "$3) THEN 1 ELSE 0 END)"
#define IN_FLIGHT_SQL \
	"SELECT coalesce(pg_catalog.sum(x.n) FILTER (WHERE x.s" OP("=") "$2), 0)::pg_catalog.int8, " \
	"       coalesce(pg_catalog.sum(greatest(x.n" OP("-") STRIPE_SHARE("x.s") ", 0)) " \
	"                           FILTER (WHERE x.s" OP("<>") "$2), 0)::pg_catalog.int8 " \
	"  FROM (SELECT " CAP_STRIPE_OF " AS s, pg_catalog.count(*) AS n FROM queue.item_live " \
	"         WHERE queue_name" OP("=") "$1 AND worker IS NOT NULL " \
	"           AND lease_expires_at" OP(">") "pg_catalog.statement_timestamp() " \
	"         GROUP BY 1) x"


/* The worker's capacity, its row locked (waiting) for a revival. */
#define WORKER_WAIT_SQL \
	"SELECT capacity FROM queue.worker_registry WHERE worker" OP("=") "$1 FOR UPDATE"

#define BURY_SQL \
	"SELECT queue._bury($1, $2, $3, NULL, NULL)"

/*
 * The groups whose heads a claim round dead-lettered move on at once, so
 * that the round's next claim hands out their next members (0.2.0 only;
 * not under Citus, where the commit settles them).
 */
#define MOVE_ON_SQL \
	"SELECT queue._group_move_on($1, $2)"

#define LOST_SQL \
	"SELECT queue._leases_lost($1, $2)"

static SPIPlanPtr breaker_state_plan = NULL;
static SPIPlanPtr give_back_plan = NULL;

#define BREAKER_STATE_SQL \
	"SELECT 1 FROM queue.queue_config WHERE queue_name" OP("=") "$1 " \
	"   AND breaker_state" OP("=") "'open'"

#define GIVE_BACK_SQL \
	"SELECT queue.release($1, $2, $3)"

#define CLAIMED_EVENT_SQL \
	"INSERT INTO queue.events (queue_name, item_id, kind, worker, attempt) " \
	"SELECT $1, u.i, 'claimed', $2, u.a " \
	"  FROM ROWS FROM (pg_catalog.unnest($3::pg_catalog.int8[]), pg_catalog.unnest($4::pg_catalog.int4[])) AS u(i, a)"

static int64
run_count(SPIPlanPtr plan, Datum *values)
{
	bool		isnull;

	/* under the lock of what it counts: every committed lease counts */
	queue_spi_count_latest(plan, values, "dequeue count query");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* Stripe s's share of a cap split over nstripes stripes. */
static int32
stripe_share(int32 cap, int s, int nstripes)
{
	return cap / nstripes + (s < cap % nstripes ? 1 : 0);
}

/*
 * stripe_in_flight
 *		The current leases charged to stripe s (*own), and what the other
 *		stripes hold beyond their shares (*excess), by IN_FLIGHT_SQL.
 */
static void
stripe_in_flight(Datum qname, int s, int nstripes, int32 cap, int64 *own, int64 *excess)
{
	Oid			ct[4] = {TEXTOID, INT2OID, INT2OID, INT4OID};
	Datum		cv[4];
	bool		isnull;

	cv[0] = qname;
	cv[1] = Int16GetDatum((int16) s);
	cv[2] = Int16GetDatum((int16) nstripes);
	cv[3] = Int32GetDatum(cap);
	queue_spi_count_latest(queue_prepare_cached(&in_flight_plan, IN_FLIGHT_SQL, 4, ct), cv,
						   "dequeue count query");
	*own = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*excess = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
}

/*
 * stripe_room
 *		How many more leases stripe s (of nstripes, of the queue's cap) may
 *		take now: its share less its current leases and less the other
 *		stripes' leases beyond their shares (IN_FLIGHT_SQL).  The caller
 *		holds the stripe's lock.  May be zero or negative.  Sets
 *		*excess_blocks when the stripe is below its share and only the
 *		other stripes' excess leaves it no room (see stripes_free_all).
 */
static int64
stripe_room(Datum qname, int s, int nstripes, int32 cap, bool *excess_blocks)
{
	int32		share = stripe_share(cap, s, nstripes);
	int64		own;
	int64		excess;

	/* under the stripe's lock: every committed lease counts */
	stripe_in_flight(qname, s, nstripes, cap, &own, &excess);
	/* its share has room that only the other stripes' excess takes away */
	if (excess_blocks != NULL && own < share && share - own - excess <= 0)
		*excess_blocks = true;
	return share - own - excess;
}

/*
 * stripes_free_all
 *		The free places under the queue's cap, counted under the locks of
 *		all its stripes, or -1 when another transaction holds one of them
 *		(tried, never waited for).  free_share[t] is what stripe t may
 *		still take without going past its share.
 *
 *		stripe_room takes what stripes hold beyond their shares (a cap
 *		lowered while leases were out) off every other stripe's room, which
 *		keeps the cap exact while each stripe claims under its own lock but
 *		leaves free places unclaimable once the leases of the other stripes
 *		have ended: with a cap of 4 over four stripes and two leases left
 *		on one of them, every other stripe's room is 1 - 0 - 1 = 0.
 *		Holding every stripe's lock, nobody else claims or revives, so the
 *		cap less all current leases can be claimed, each new lease charged
 *		to a stripe below its share (their free shares add up to at least
 *		that); no stripe then goes past its share, so the excess still
 *		only shrinks and stripe_room stays exact.
 */
static int64
stripes_free_all(const char *queue_name, Datum qname, int nstripes, int32 cap,
				 int64 *free_share)
{
	int64		total = 0;

	for (int t = 0; t < nstripes; t++)
	{
		if (!queue_lock_private(queue_name, QUEUE_LOCK_STRIPE(t), false))
			return -1;
	}
	for (int t = 0; t < nstripes; t++)
	{
		int64		own;
		int64		excess;

		stripe_in_flight(qname, t, nstripes, cap, &own, &excess);
		free_share[t] = Max(stripe_share(cap, t, nstripes) - own, 0);
		total += own;
	}
	return Max(cap - total, 0);
}

/*
 * Register a worker that this dequeue names for the first time.  Another
 * connection of the same new worker may be registering it in a
 * transaction still open: its row is the registration, and this claim
 * does not wait for that transaction to end (an INSERT ... ON CONFLICT
 * would, for the other insert's outcome), as SKIP LOCKED would not: a
 * dequeue registering the name holds a private lock on it, which another
 * one only tries.  A register_worker() of the name still in an open
 * transaction takes no such lock, so the insert runs in a subtransaction
 * under a lock_timeout of a millisecond; when it times out, the other
 * registration stands (or, if it rolls back, the worker's next call
 * registers it).
 */
static void
register_new_worker(Datum worker)
{
	Oid			argtypes[1] = {TEXTOID};
	QueueSubxact sx;

	/* another dequeue registering this very name holds it: its row stands */
	if (!queue_lock_private(TextDatumGetCString(worker), QUEUE_LOCK_WORKER_REG, false))
		return;
	queue_subxact_begin(&sx);
	PG_TRY();
	{
		int			guc_level = NewGUCNestLevel();

		(void) set_config_option("lock_timeout", "1", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		queue_spi_exec(queue_schema_current() ?
					   queue_prepare_cached(&register_plan, REGISTER_SQL, 1, argtypes) :
					   queue_prepare_cached(&register_plan_v1, REGISTER_SQL_V1, 1, argtypes),
					   &worker, NULL, false, 0, SPI_OK_INSERT, "registering worker");
		AtEOXact_GUC(false, guc_level);
		queue_subxact_end(&sx, true);
	}
	PG_CATCH();
	{
		ErrorData  *edata = queue_subxact_catch(&sx);

		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/*
 * A dequeue is a sign of life of its worker, whatever it hands out (a
 * paused queue, an open breaker, a draining worker): registers an unknown
 * worker and refreshes last_seen now and then.  Returns false for a worker
 * registered just now (no gates), else fills *gates.
 */
static bool
worker_seen(Datum worker, QueueWorkerGates *gates)
{
	Oid			argtypes[1] = {TEXTOID};
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	if (!queue_load_worker(worker, gates))
	{
		/* unknown workers are registered on their first dequeue */
		register_new_worker(worker);
		return false;
	}
	/*
	 * Compared without subtracting last_seen: a worker first named by
	 * drain_worker or add_maintenance was never seen ('-infinity').
	 */
	if (gates->last_seen < now - (queue_citus_loaded() ? queue_citus_seen_usecs() : LAST_SEEN_REFRESH_USECS))
	{
		queue_spi_exec(queue_prepare_cached(&seen_plan, SEEN_SQL, 1, argtypes),
					   &worker, NULL, false, 0, SPI_OK_UPDATE, "refreshing worker");
		/* skipped (the row was held): the next call tries again */
		if (SPI_processed > 0)
			queue_worker_seen(worker, now);
	}
	return true;
}

/*
 * Worker gates: registers an unknown worker, refreshes last_seen now and
 * then, and returns how many items the worker may take (0 = none, -1 = no
 * limit).
 */
static int64
worker_allowance(Datum worker)
{
	Oid			argtypes[1] = {TEXTOID};
	bool		isnull;
	QueueWorkerGates gates;

	if (!worker_seen(worker, &gates))
		return -1;
	if (gates.draining || gates.in_maintenance)
		return 0;
	if (gates.has_capacity)
	{
		int32		capacity;
		int64		held;

		queue_spi_exec(queue_prepare_cached(&worker_lock_plan, WORKER_LOCK_SQL, 1, argtypes),
					   &worker, NULL, false, 1, SPI_OK_SELECT, "locking worker");
		/* another session of this worker is claiming: skip, like SKIP LOCKED */
		if (SPI_processed == 0)
			return 0;
		capacity = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											   1, &isnull));
		if (isnull)
			return -1;
		held = run_count(queue_prepare_cached(&worker_load_plan, WORKER_LOAD_SQL, 1, argtypes),
						 &worker);
		return Max(capacity - held, 0);
	}
	return -1;
}

/*
 * queue_cap_admits_revival
 *		Caps stay exact: may the expired lease of item_id (charged to
 *		stripe `stripe`, -1 for none), which nobody re-claimed, be revived
 *		by extend_lease or heartbeat for `worker`?  A revival counts like a
 *		claim: against the queue's max_in_flight (the item's stripe, its lock
 *		waited for) and the worker's capacity (its row locked, if it has
 *		one).  The caller holds the item's row lock; the locks are taken in
 *		the order items, stripe, worker row, and dequeue, which takes the
 *		stripe and the worker row first, only ever tries item locks (SKIP
 *		LOCKED), so no cycle can form.
 *
 *		Where the item's own stripe is full but the cap is not, the revival
 *		is charged to another stripe with room, as a claim would be: *charge
 *		is then that stripe (-1 otherwise), which the caller writes into the
 *		item's cap_stripe with the new lease.  Those other stripes' locks are
 *		only tried, never waited for (the caller may hold stripes already,
 *		e.g. heartbeat reviving several leases), as dequeue tries them.
 *
 * Per-key caps (queue.set_limit) are checked by the item's trigger
 * queue._flow_revival(), under the key's lock, when the lease is written.
 */
bool
queue_cap_admits_revival(const QueueConfig *cfg, Datum qname, Datum worker,
						 int64 item_id, int stripe, int *charge)
{
	Oid			wt[1] = {TEXTOID};
	bool		isnull;

	*charge = -1;
	if (cfg->max_in_flight > 0)
	{
		int			nstripes = Min(cfg->max_in_flight, CAP_STRIPES);
		int			s = (int) ((stripe >= 0 ? (int64) stripe : item_id) % nstripes);
		bool		fits;

		bool		excess_blocks = false;

		(void) queue_lock_private(cfg->queue_name, QUEUE_LOCK_STRIPE(s), true);
		fits = stripe_room(qname, s, nstripes, cfg->max_in_flight, &excess_blocks) > 0;
		for (int k = 1; !fits && k < nstripes; k++)
		{
			int			t = (s + k) % nstripes;

			/* another dequeuer holds this stripe: try the next */
			if (!queue_lock_private(cfg->queue_name, QUEUE_LOCK_STRIPE(t), false))
				continue;
			if (stripe_room(qname, t, nstripes, cfg->max_in_flight, &excess_blocks) > 0)
			{
				fits = true;
				*charge = t;
			}
		}
		/* a free place that only other stripes' excess hid (see above) */
		if (!fits && excess_blocks)
		{
			int64		free_share[CAP_STRIPES];

			if (stripes_free_all(cfg->queue_name, qname, nstripes, cfg->max_in_flight,
								 free_share) > 0)
			{
				for (int t = 0; !fits && t < nstripes; t++)
				{
					if (free_share[t] > 0)
					{
						fits = true;
						*charge = (t == s) ? -1 : t;
					}
				}
			}
		}
		if (!fits)
			return false;
	}

	/*
	 * The worker's capacity, under its row lock, as dequeue counts it; a
	 * worker without one (the cache knows, as dequeue's gates do) has no
	 * row lock taken.  That lock is waited for while the item is held, and
	 * the worker's heartbeat takes it while reviving a lease of one queue
	 * before it waits for the worker's items of the next one: a bot whose
	 * extend_lease of an expired lease ran beside its heartbeat would
	 * deadlock with itself.
	 */
	{
		QueueWorkerGates gates;

		if (!queue_load_worker(worker, &gates) || !gates.has_capacity)
			return true;
	}
	queue_spi_exec(queue_prepare_cached(&worker_wait_plan, WORKER_WAIT_SQL, 1, wt),
				   &worker, NULL, false, 1, SPI_OK_SELECT, "locking worker");
	if (SPI_processed == 1)
	{
		Datum		cap = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull &&
			run_count(queue_prepare_cached(&worker_load_plan, WORKER_LOAD_SQL, 1, wt),
					  &worker) >= DatumGetInt32(cap))
			return false;
	}
	return true;
}

/*
 * queue._lock_cap_stripes(queue_name text) returns int
 *
 * Waits for every max_in_flight stripe lock of the queue, for the
 * transaction, and returns the most stripes a cap is split into: what
 * alter_queue holds while it spreads the current leases over the stripes
 * of a new cap, so that no claim or revival counts a stripe meanwhile.
 */
Datum
queue_lock_cap_stripes_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));

	for (int s = 0; s < CAP_STRIPES; s++)
		(void) queue_lock_private(name, QUEUE_LOCK_STRIPE(s), true);
	PG_RETURN_INT32(CAP_STRIPES);
}

/*
 * queue._lock_revival_stripes(queue_name text, charged bigint[]) returns void
 *
 * heartbeat revives its worker's expired leases one after another, each
 * under the lock of the max_in_flight stripe it is charged to, which
 * queue_cap_admits_revival waits for (other stripes it only tries).  In
 * item order, two heartbeats whose leases are charged to the same stripes
 * in another order would each hold one and wait for the other's.  So
 * heartbeat first waits here for all of them, in ascending order, and its
 * revivals then find them held.  `charged` is each expired lease's
 * coalesce(cap_stripe, item_id), as CAP_STRIPE_OF counts it.  Nothing to
 * do without max_in_flight.
 */
Datum
queue_lock_revival_stripes_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	QueueConfig cfg;
	bool		want[CAP_STRIPES];
	int			nstripes;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(1))
		PG_RETURN_VOID();
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &elems, &nulls, &n);
	if (n == 0)
		PG_RETURN_VOID();
	queue_spi_connect();
	queue_load_config(name, &cfg);
	queue_spi_finish();
	if (cfg.max_in_flight <= 0)
		PG_RETURN_VOID();
	nstripes = Min(cfg.max_in_flight, CAP_STRIPES);
	memset(want, 0, sizeof(want));
	for (int i = 0; i < n; i++)
		if (!nulls[i] && DatumGetInt64(elems[i]) >= 0)
			want[DatumGetInt64(elems[i]) % nstripes] = true;
	for (int s = 0; s < nstripes; s++)
		if (want[s])
			(void) queue_lock_private(name, QUEUE_LOCK_STRIPE(s), true);
	PG_RETURN_VOID();
}

/* The queue's hint slot, or NULL; with create, a slot taken for it. */
static ClaimHint *
claim_hint_slot(const char *queue, bool create)
{
	ClaimHint  *oldest = &claim_hints[0];

	for (int i = 0; i < CLAIM_HINT_SLOTS; i++)
	{
		if (strcmp(claim_hints[i].queue, queue) == 0)
			return &claim_hints[i];
		if (claim_hints[i].until < oldest->until)
			oldest = &claim_hints[i];
	}
	if (!create)
		return NULL;
	memset(oldest, 0, sizeof(ClaimHint));
	strlcpy(oldest->queue, queue, sizeof(oldest->queue));
	return oldest;
}

/*
 * claim_index_work
 *		The work claim scans of this backend did in the claim index so far,
 *		in index entries: the entries it returned, plus CLAIM_PAGE_ENTRIES
 *		for each page read.  Entries that scans have already marked dead
 *		are not returned but their pages are still read, one by one, until
 *		vacuum removes them: a queue drained in order faster than vacuum
 *		visits keeps a growing run of such pages in front of its head.
 *		A claim's own work is the difference of two calls, less
 *		CLAIM_DESCENT_PAGES pages for the way down the tree.
 */
#define CLAIM_PAGE_ENTRIES	16
#define CLAIM_DESCENT_PAGES	4

static int64
claim_index_work(Oid indexoid)
{
	PgStat_TableStatus *ts;

	if (!OidIsValid(indexoid))
		return 0;
	ts = find_tabstat_entry(indexoid);
	return ts ? ts->t_counts.t_tuples_returned +
		CLAIM_PAGE_ENTRIES * ts->t_counts.t_blocks_fetched : 0;
}

/* Did a claim that got `got` rows step over more than the threshold? */
static bool
claim_stepped_far(int64 work, int64 got)
{
	return queue_claim_hint_threshold >= 0 &&
		work - CLAIM_PAGE_ENTRIES * CLAIM_DESCENT_PAGES >
		got + queue_claim_hint_threshold;
}

/* What claim_items needs of its dequeue call. */
typedef struct ClaimContext
{
	ReturnSetInfo *rsinfo;		/* where claimed rows go */
	Datum		qname;			/* queue name (text) */
	Datum		worker;			/* worker name (text) */
	Interval   *lease;			/* lease of each claim */
	char		audit;			/* queue's audit level */
	bool		is_probe;		/* the claim is the breaker's probe */
	bool		current_schema; /* the 0.2.0 tables (queue_schema_current) */
	const char *queue;			/* queue name (C string) */
	Oid			claim_index;	/* item_live_claim_idx, for the hint */
	int64		probe_id;		/* out: the probe item */
	TimestampTz probe_expiry;	/* out: its lease's end */
	int			nburied;		/* items dead-lettered by this call */
	bool		flow_limits;	/* the queue has limited keys: claim their lanes */
	bool		direct;			/* may claim without the statement (claim_direct.c) */
	Datum	   *ids;			/* out: ids claimed so far (for rate records) */
	Datum	   *tokens;			/* out: their lease tokens */
	int			nids;
	bool		lost_seen;		/* out: lost leases were counted (a breaker may trip) */
	/* while lanes and the rest share a claim: its rows, put out in order */
	struct PeekedItem *order;	/* the planned items, sorted by item id */
	int			norder;
	struct HeldRow *held;		/* the rows claimed so far */
	int			nheld;
	/* where the row being emitted stood in the claim order, if known */
	bool		emit_keyed;
	int32		emit_priority;	/* effective, without a lane's band */
	TimestampTz emit_since;
} ClaimContext;

/* An item plan_lanes saw, and where it stands in the claim order. */
typedef struct PeekedItem
{
	int32		priority;		/* effective, without a lane's band */
	TimestampTz since;			/* claimable since */
	int64		item_id;
	int			lane;			/* index of its lane; -1 = the rest */
	int			rank;			/* place in the merged order */
} PeekedItem;

/*
 * A claimed row held back until the claim's rows are put out in order:
 * by its place in the claim order where that is known (a planned item, or
 * one the claim statement locked as a candidate: a group's next member
 * that the call made the head, an item claimed in place of one another
 * session took), else after those, in the order claimed.
 */
typedef struct HeldRow
{
	HeapTuple	tuple;
	bool		keyed;			/* priority, since and item_id known */
	int32		priority;		/* effective, without a lane's band */
	TimestampTz since;			/* claimable since */
	int64		item_id;
	int			seq;			/* order of claiming */
} HeldRow;

static void hold_row(ClaimContext *ctx, Datum *out, bool *nulls);

/* A leased row of the claim's result, found again by item id. */
typedef struct LeasedRow
{
	int64		item_id;
	uint64		row;			/* its index in the result */
} LeasedRow;

static int
leased_row_cmp(const void *a, const void *b)
{
	int64		x = ((const LeasedRow *) a)->item_id;
	int64		y = ((const LeasedRow *) b)->item_id;

	return (x > y) - (x < y);
}

/* The kind of a row of the claim's result (CLAIM_ROW_*). */
static int32
claim_row_kind(SPITupleTable *tuptable, uint64 row)
{
	bool		isnull;

	return DatumGetInt32(SPI_getbinval(tuptable->vals[row], tuptable->tupdesc, 15, &isnull));
}

static int
peeked_order_cmp(const void *a, const void *b)
{
	const PeekedItem *x = a;
	const PeekedItem *y = b;

	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	if (x->since != y->since)
		return x->since < y->since ? -1 : 1;
	return (x->item_id > y->item_id) - (x->item_id < y->item_id);
}

static int
peeked_id_cmp(const void *a, const void *b)
{
	int64		x = ((const PeekedItem *) a)->item_id;
	int64		y = ((const PeekedItem *) b)->item_id;

	return (x > y) - (x < y);
}

static int
held_row_cmp(const void *a, const void *b)
{
	const HeldRow *x = a;
	const HeldRow *y = b;

	if (x->keyed != y->keyed)
		return x->keyed ? -1 : 1;
	if (x->keyed)
	{
		if (x->priority != y->priority)
			return x->priority < y->priority ? -1 : 1;
		if (x->since != y->since)
			return x->since < y->since ? -1 : 1;
		if (x->item_id != y->item_id)
			return x->item_id < y->item_id ? -1 : 1;
	}
	return x->seq - y->seq;
}

/*
 * hold_row
 *		Keep a claimed row (in the result's memory, which outlives SPI)
 *		with its planned place in the claim order.
 */
static void
hold_row(ClaimContext *ctx, Datum *out, bool *nulls)
{
	MemoryContext old = MemoryContextSwitchTo(ctx->rsinfo->econtext->ecxt_per_query_memory);
	PeekedItem	key;
	PeekedItem *found;
	HeldRow    *row = &ctx->held[ctx->nheld];

	row->tuple = heap_form_tuple(ctx->rsinfo->setDesc, out, nulls);
	MemoryContextSwitchTo(old);
	key.item_id = DatumGetInt64(out[0]);
	found = ctx->norder > 0 ?
		bsearch(&key, ctx->order, ctx->norder, sizeof(PeekedItem), peeked_id_cmp) : NULL;
	row->item_id = key.item_id;
	row->keyed = found != NULL || ctx->emit_keyed;
	row->priority = found ? found->priority : ctx->emit_priority;
	row->since = found ? found->since : ctx->emit_since;
	row->seq = ctx->nheld++;
}

/*
 * claim_emit
 *		Hand out one leased row: append it to the result, note its id for
 *		the claimed events and the rate records, and, when it revived a
 *		lost lease (lost), for the lost-lease records.
 */
static void
claim_emit_values(ClaimContext *ctx, Datum *out, bool *nulls, bool lost,
				  Datum *lost_ids, int *nlost, Datum *ev_ids, Datum *ev_attempts, int *nok)
{
	if (ctx->held != NULL)
		hold_row(ctx, out, nulls);
	else
		tuplestore_putvalues(ctx->rsinfo->setResult, ctx->rsinfo->setDesc, out, nulls);
	if (lost)
		lost_ids[(*nlost)++] = out[0];
	ev_ids[*nok] = out[0];
	ev_attempts[*nok] = out[4];
	(*nok)++;
	ctx->tokens[ctx->nids] = out[1];
	ctx->ids[ctx->nids++] = out[0];
	if (ctx->is_probe)
	{
		ctx->probe_id = DatumGetInt64(out[0]);
		ctx->probe_expiry = DatumGetTimestampTz(out[8]);
	}
}

/* claim_emit_values for a leased row of the claim statement's result */
static void
claim_emit(ClaimContext *ctx, HeapTuple tup, TupleDesc desc, bool lost,
		   Datum *lost_ids, int *nlost, Datum *ev_ids, Datum *ev_attempts, int *nok)
{
	Datum		out[DEQUEUE_NCOLS];
	bool		nulls[DEQUEUE_NCOLS];

	for (int c = 0; c < DEQUEUE_NCOLS; c++)
		out[c] = SPI_getbinval(tup, desc, c + 1, &nulls[c]);
	claim_emit_values(ctx, out, nulls, lost, lost_ids, nlost, ev_ids, ev_attempts, nok);
}

/* The claimed events of nok items (audit 'all'). */
static void
record_claimed(ClaimContext *ctx, Datum *ev_ids, Datum *ev_attempts, int nok)
{
	Oid			et[4] = {TEXTOID, TEXTOID, INT8ARRAYOID, INT4ARRAYOID};
	Datum		ev[4];

	ev[0] = ctx->qname;
	ev[1] = ctx->worker;
	ev[2] = PointerGetDatum(construct_array(ev_ids, nok, INT8OID, 8,
											FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	ev[3] = PointerGetDatum(construct_array(ev_attempts, nok, INT4OID, 4,
											true, TYPALIGN_INT));
	queue_spi_exec(queue_prepare_cached(&claimed_event_plan, CLAIMED_EVENT_SQL, 4, et),
				   ev, NULL, false, 0, SPI_OK_INSERT, "recording events");
}

/* What claim_direct_round's rows are handed to. */
typedef struct DirectEmit
{
	ClaimContext *ctx;
	QueueDirectClaim *dc;		/* its sort key of the row emitted */
	Datum	   *ev_ids;
	Datum	   *ev_attempts;
	int			nok;
} DirectEmit;

static void
direct_emit(void *arg, Datum *values, bool *nulls)
{
	DirectEmit *de = (DirectEmit *) arg;

	de->ctx->emit_keyed = true;
	de->ctx->emit_priority = de->dc->emit_priority;
	de->ctx->emit_since = de->dc->emit_visible_at;
	claim_emit_values(de->ctx, values, nulls, false, NULL, NULL,
					  de->ev_ids, de->ev_attempts, &de->nok);
	de->ctx->emit_keyed = false;
}

/*
 * claim_direct_round
 *		Claim up to `limit` items charged to cap stripe `stripe` (-1: no
 *		cap) without the claim statement (claim_direct.c), keeping the
 *		claim hints as claim_round does.  Returns how many were claimed;
 *		*need_statement is set when a candidate was left to the statement,
 *		which then claims the rest.
 */
static int64
claim_direct_round(ClaimContext *ctx, int64 limit, int stripe, bool *need_statement)
{
	int64		nclaimed = 0;
	DirectEmit	de;

	de.ctx = ctx;
	de.ev_ids = palloc(sizeof(Datum) * limit);
	de.ev_attempts = palloc(sizeof(Datum) * limit);
	de.nok = 0;
	*need_statement = false;
	for (;;)
	{
		QueueDirectClaim dc;
		ClaimHint  *hint = claim_hint_slot(ctx->queue, false);
		TimestampTz now = GetCurrentTimestamp();
		bool		hinted = hint != NULL && now < hint->until && now < hint->next_full;
		int64		work_before = claim_index_work(ctx->claim_index);
		int64		got;

		CHECK_FOR_INTERRUPTS();
		dc.qname = ctx->qname;
		dc.worker = ctx->worker;
		dc.lease = ctx->lease;
		dc.stripe = stripe;
		dc.limit = limit - nclaimed;
		dc.hinted = hinted;
		dc.hint_priority = hinted ? hint->priority : 0;
		dc.hint_visible_at = hinted ? hint->visible_at : 0;
		dc.hint_item_id = hinted ? hint->item_id : 0;
		dc.emit = direct_emit;
		dc.emit_arg = &de;
		de.dc = &dc;
		got = queue_claim_direct(&dc);
		nclaimed += got;

		/* measure the scan and move the hint, as claim_round does */
		if (!hinted &&
			claim_stepped_far(claim_index_work(ctx->claim_index) - work_before, got))
		{
			hint = claim_hint_slot(ctx->queue, true);
			hint->until = now + CLAIM_HINT_USECS;
		}
		if (hint != NULL && !hinted)
			hint->next_full = now + CLAIM_HINT_REFRESH_USECS;
		if (hint != NULL && dc.has_head)
		{
			hint->priority = dc.head_priority;
			hint->visible_at = dc.head_visible_at;
			hint->item_id = dc.head_item_id;
		}
		if (dc.need_statement)
		{
			*need_statement = true;
			break;
		}
		/* a short hinted claim looks from the head for the rest */
		if (nclaimed >= limit || !hinted)
			break;
		hint->next_full = 0;
	}
	if (ctx->audit == 'a' && de.nok > 0)
		record_claimed(ctx, de.ev_ids, de.ev_attempts, de.nok);
	return nclaimed;
}

/*
 * claim_round
 *		Claim up to `limit` items charged to cap stripe `stripe` (-1: no
 *		cap), from one limited key's lane or (lane NULL) from the rest of
 *		the queue, append them to the result, bury what must not be handed
 *		out and claim again for it.  Returns how many were claimed.
 */
static int64
claim_round(ClaimContext *ctx, int64 limit, int stripe, FlowLane *lane)
{
	int64		nclaimed = 0;
	int			nretries = 0;

	if (lane == NULL && ctx->direct)
	{
		bool		need_statement;

		nclaimed = claim_direct_round(ctx, limit, stripe, &need_statement);
		if (!need_statement || nclaimed >= limit)
			return nclaimed;
	}
	for (;;)
	{
		Oid			argtypes[7] = {TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT2OID,
		INT4OID, TIMESTAMPTZOID};
		Datum		values[7];
		char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
		int			njunk = 0;
		int			nmissed = 0;
		int			nok = 0;
		uint64		nleased;
		LeasedRow  *leased;
		int			guc_level;
		Datum	   *lost_ids = NULL;
		int			nlost = 0;
		Datum	   *ev_ids = NULL;
		Datum	   *ev_attempts = NULL;
		Datum	   *buried_ids = NULL;
		SPITupleTable *tuptable;
		uint64		nrows;
		ClaimHint  *hint = lane ? NULL : claim_hint_slot(ctx->queue, false);
		TimestampTz now = GetCurrentTimestamp();
		bool		hinted = hint != NULL && now < hint->until && now < hint->next_full;
		int64		work_before;

		CHECK_FOR_INTERRUPTS();
		if (hinted && hint->priority > 0)
		{
			Oid			ht[2] = {TEXTOID, INT4OID};
			Datum		hv[2] = {ctx->qname, Int32GetDatum(hint->priority)};

			queue_spi_exec(queue_prepare_cached(&higher_plan, HIGHER_SQL, 2, ht),
						   hv, NULL, true, 1, SPI_OK_SELECT, "claim");
			if (SPI_processed > 0)
				hinted = false; /* from the head this time */
		}
		work_before = claim_index_work(ctx->claim_index);
		values[0] = ctx->qname;
		values[1] = Int32GetDatum((int32) (limit - nclaimed));
		values[2] = ctx->worker;
		values[3] = IntervalPGetDatum(ctx->lease);
		values[4] = Int16GetDatum((int16) Max(stripe, 0));
		if (stripe < 0)
			nulls[4] = 'n';
		guc_level = queue_fixed_plans();	/* item_lookup.c */
		if (queue_citus_loaded())
			queue_citus_claim(values, nulls, lane != NULL, lane ? lane->key : (Datum) 0,
							  hinted, hinted ? hint->priority : 0,
							  hinted ? hint->visible_at : 0);
		else if (lane)
		{
			Oid			lt[6] = {TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT2OID, TEXTOID};

			values[5] = lane->key;
			queue_spi_exec(queue_prepare_cached(&lane_claim_plan, LANE_CLAIM_SQL, 6, lt),
						   values, nulls, false, 0, SPI_OK_SELECT, "claim");
		}
		else if (hinted)
		{
			values[5] = Int32GetDatum(hint->priority);
			values[6] = TimestampTzGetDatum(hint->visible_at);
			queue_spi_exec(ctx->current_schema ?
						   queue_prepare_cached(&hinted_claim_plan, HINTED_CLAIM_SQL, 7, argtypes) :
						   queue_prepare_cached(&hinted_claim_plan_v1, HINTED_CLAIM_SQL_V1, 7, argtypes),
						   values, nulls, false, 0, SPI_OK_SELECT, "claim");
		}
		else
			queue_spi_exec(ctx->current_schema ?
						   queue_prepare_cached(&claim_plan, CLAIM_SQL, 5, argtypes) :
						   queue_prepare_cached(&claim_plan_v1, CLAIM_SQL_V1, 5, argtypes),
						   values, nulls, false, 0, SPI_OK_SELECT, "claim");
		AtEOXact_GUC(false, guc_level);
		tuptable = SPI_tuptable;
		nrows = SPI_processed;

		/* measure the scan and move the hint (see claim hints above) */
		if (!lane && !hinted &&
			claim_stepped_far(claim_index_work(ctx->claim_index) - work_before,
							  (int64) nrows))
		{
			hint = claim_hint_slot(ctx->queue, true);
			hint->until = now + CLAIM_HINT_USECS;
		}
		if (hint != NULL && !hinted)
			hint->next_full = now + CLAIM_HINT_REFRESH_USECS;
		/* the leased rows come first, then the candidates in claim order */
		nleased = 0;
		while (nleased < nrows && claim_row_kind(tuptable, nleased) == 0)
			nleased++;
		if (hint != NULL && nleased < nrows)
		{
			HeapTuple	head = tuptable->vals[nleased];
			bool		isnull;

			hint->priority = DatumGetInt32(SPI_getbinval(head, tuptable->tupdesc, 12, &isnull));
			hint->visible_at = DatumGetTimestampTz(SPI_getbinval(head, tuptable->tupdesc, 13, &isnull));
			hint->item_id = PG_INT64_MIN;
		}

		if (nrows == 0)
		{
			/* a short hinted claim looks from the head next */
			if (hinted)
			{
				hint->next_full = 0;
				continue;
			}
			break;
		}

		leased = palloc(sizeof(LeasedRow) * Max(nleased, 1));
		for (uint64 r = 0; r < nleased; r++)
		{
			bool		isnull;

			leased[r].item_id = DatumGetInt64(SPI_getbinval(tuptable->vals[r], tuptable->tupdesc,
															 1, &isnull));
			leased[r].row = r;
		}
		qsort(leased, nleased, sizeof(LeasedRow), leased_row_cmp);

		lost_ids = palloc(sizeof(Datum) * nrows);
		buried_ids = palloc(sizeof(Datum) * nrows);
		ev_ids = palloc(sizeof(Datum) * nrows);
		ev_attempts = palloc(sizeof(Datum) * nrows);
		for (uint64 r = nleased; r < nrows; r++)
		{
			HeapTuple	tup = tuptable->vals[r];
			TupleDesc	desc = tuptable->tupdesc;
			bool		isnull;
			int32		kind = claim_row_kind(tuptable, r);
			Oid			bt[3] = {TEXTOID, INT8OID, TEXTOID};
			Datum		bv[3];

			if (kind == 3)
			{
				LeasedRow	key;
				LeasedRow  *found;
				bool		lost = DatumGetBool(SPI_getbinval(tup, desc, 14, &isnull));

				key.item_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
				found = bsearch(&key, leased, nleased, sizeof(LeasedRow), leased_row_cmp);
				if (found == NULL)
				{
					/* locked but missed by the TID scan: claimed next round */
					nmissed++;
					continue;
				}
				/* its place in the claim order: the candidate's sort key */
				ctx->emit_keyed = true;
				ctx->emit_priority = DatumGetInt32(SPI_getbinval(tup, desc, 12, &isnull));
				if (ctx->emit_priority >= QUEUE_FLOW_BAND)
					ctx->emit_priority -= QUEUE_FLOW_BAND;
				ctx->emit_since = DatumGetTimestampTz(SPI_getbinval(tup, desc, 13, &isnull));
				claim_emit(ctx, tuptable->vals[found->row], desc, lost,
						   lost_ids, &nlost, ev_ids, ev_attempts, &nok);
				ctx->emit_keyed = false;
				nclaimed++;
				continue;
			}
			/* expired, or a lost lease whose attempts are spent */
			if (ctx->nburied >= DEQUEUE_MAX_BURIED)
				continue;		/* left for sweep or a later call */
			ctx->nburied++;
			bv[0] = ctx->qname;
			bv[1] = SPI_getbinval(tup, desc, 1, &isnull);
			bv[2] = CStringGetTextDatum(kind == 1 ? "expired" : "lease_expired");
			queue_spi_exec(queue_prepare_cached(&bury_plan, BURY_SQL, 3, bt),
						   bv, NULL, false, 0, SPI_OK_SELECT, "dead-lettering");
			buried_ids[njunk++] = bv[1];
		}

		/*
		 * A dead-lettered group head lets its group move on now: the next
		 * member is the head and claimable by the claim again below.
		 * Under Citus only where the queue's shards are on this node: the
		 * group's settle at commit runs there and must find the note
		 * _group_move_on leaves in this backend (else it would make the
		 * member after it a head too); elsewhere (a call inside BEGIN ...
		 * COMMIT on the coordinator) the group moves on at commit.
		 */
		if (njunk > 0 && ctx->current_schema &&
			(!queue_citus_loaded() || queue_citus_queue_local(ctx->qname)))
		{
			Oid			mt[2] = {TEXTOID, INT8ARRAYOID};
			Datum		mv[2];

			mv[0] = ctx->qname;
			mv[1] = PointerGetDatum(construct_array(buried_ids, njunk, INT8OID, 8,
													FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			queue_spi_exec(queue_prepare_cached(&move_on_plan, MOVE_ON_SQL, 2, mt),
						   mv, NULL, false, 0, SPI_OK_SELECT, "moving groups on");
		}

		/* A lease that ran out counts as a failed attempt of its holder. */
		if (nlost > 0)
		{
			Oid			lt[2] = {TEXTOID, INT8ARRAYOID};
			Datum		lv[2];

			lv[0] = ctx->qname;
			lv[1] = PointerGetDatum(construct_array(lost_ids, nlost, INT8OID, 8,
													FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			queue_spi_exec(queue_prepare_cached(&lost_plan, LOST_SQL, 2, lt),
						   lv, NULL, false, 0, SPI_OK_SELECT, "recording lost leases");
			ctx->lost_seen = true;
		}
		if (ctx->audit == 'a' && nok > 0)
			record_claimed(ctx, ev_ids, ev_attempts, nok);

		/*
		 * Buried rows cost us part of the batch: claim again for them, as
		 * long as this call may bury more.
		 */
		if (nclaimed >= limit || ctx->nburied >= DEQUEUE_MAX_BURIED)
			break;
		if (nmissed > 0 && ++nretries <= CLAIM_MAX_RETRIES)
			continue;
		if (njunk == 0)
		{
			/* a short hinted claim looks from the head for the rest */
			if (!hinted)
				break;
			hint->next_full = 0;
		}
	}

	return nclaimed;
}

/*
 * Append the first `limit` claimable items of a lane (or the rest) to
 * *items, which holds *maxitems and grows as needed.
 */
static void
peek_items(ClaimContext *ctx, FlowLane *lane, int lane_no, int64 limit,
		   PeekedItem **items, int *nitems, int *maxitems)
{
	Oid			argtypes[4] = {TEXTOID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[4] = {ctx->qname, Int64GetDatum(limit), ctx->worker,
	lane ? lane->key : (Datum) 0};

	/* not read-only: a later cap stripe's look sees this call's claims */
	queue_spi_exec(lane ?
				   queue_prepare_cached(&peek_lane_plan, PEEK_LANE_SQL, 4, argtypes) :
				   queue_prepare_cached(&peek_rest_plan, PEEK_REST_SQL, 3, argtypes),
				   values, NULL, false, limit, SPI_OK_SELECT, "planning a claim");
	if (*nitems + (int) SPI_processed > *maxitems)
	{
		*maxitems = Max(*maxitems * 2, *nitems + (int) SPI_processed);
		*items = repalloc(*items, sizeof(PeekedItem) * *maxitems);
	}
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		PeekedItem *it = &(*items)[(*nitems)++];
		bool		isnull;

		it->priority = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		it->since = DatumGetTimestampTz(SPI_getbinval(tup, desc, 2, &isnull));
		it->item_id = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		it->lane = lane_no;
	}
}

/*
 * plan_lanes
 *		Share a claim of `limit` items between the open lanes and the rest
 *		of the queue so that it takes the first items in claim order
 *		(effective priority, then claimable time, then id) whatever their
 *		key: look at the first claimable items of the rest and of each lane
 *		(at most its room), merge them, and ask each lane for as many as it
 *		has among the first `limit`.  The merged order is kept in ctx for
 *		putting the batch out in it.  Items are only looked at, not locked:
 *		one taken meanwhile by another session is replaced by the next of
 *		its lane or of the rest.
 */
static void
plan_lanes(ClaimContext *ctx, FlowLane *lanes, int nlanes, int64 limit, int64 *asks)
{
	int			maxitems = (int) Min(limit + nlanes, 4 * QUEUE_BATCH_MAX);
	PeekedItem *items;
	int			nitems = 0;
	int			ntaken;

	/* what the lanes and the rest have, as they have it (grown as needed) */
	items = palloc(sizeof(PeekedItem) * maxitems);
	peek_items(ctx, NULL, -1, limit, &items, &nitems, &maxitems);
	for (int i = 0; i < nlanes; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (lanes[i].room > 0)
			peek_items(ctx, &lanes[i], i, Min(lanes[i].room, limit), &items, &nitems,
					   &maxitems);
	}
	qsort(items, nitems, sizeof(PeekedItem), peeked_order_cmp);
	ntaken = (int) Min(nitems, limit);
	for (int k = 0; k < ntaken; k++)
	{
		items[k].rank = k;
		if (items[k].lane >= 0)
			asks[items[k].lane]++;
	}
	qsort(items, ntaken, sizeof(PeekedItem), peeked_id_cmp);
	ctx->order = items;
	ctx->norder = ntaken;
}

/*
 * claim_items
 *		Claim up to `limit` items charged to cap stripe `stripe` (-1: no
 *		cap): from the lanes of limited keys that may give something now
 *		(each at most its room, flow.c) and from the rest of the queue, in
 *		claim order across both (plan_lanes).  Returns how many were
 *		claimed.
 */
static int64
claim_items(ClaimContext *ctx, int64 limit, int stripe)
{
	int64		nclaimed = 0;
	int64	   *asks = NULL;
	FlowLane   *lanes = NULL;
	int			nlanes = 0;

	if (ctx->flow_limits && ctx->current_schema)
		nlanes = flow_open_lanes(ctx->qname, ctx->worker, (int) Min(limit + 1, FLOW_MAX_LANES),
								 &lanes);
	if (nlanes > 0)
	{
		asks = palloc0(sizeof(int64) * nlanes);
		plan_lanes(ctx, lanes, nlanes, limit, asks);
	}
	/*
	 * A batch is put out in claim order at the end: a claim round that
	 * dead-letters a group's head makes the next member claimable, which
	 * may sort before rows claimed already.
	 */
	if (nlanes > 0 || limit > 1)
	{
		ctx->held = palloc(sizeof(HeldRow) * limit);
		ctx->nheld = 0;
	}
	for (int i = 0; i < nlanes; i++)
	{
		int64		ask = Min(asks[i], limit - nclaimed);
		int			first = ctx->nids;

		if (asks[i] == 0 && lanes[i].head_buried)
			continue;			/* below, once the rest had its share */
		if (ask > 0)
			nclaimed += claim_round(ctx, ask, stripe, &lanes[i]);
		flow_close_lane(ctx->qname, &lanes[i], ask, ctx->nids - first, ctx->ids + first);
	}
	if (nclaimed < limit)
		nclaimed += claim_round(ctx, limit - nclaimed, stripe, NULL);

	/*
	 * A lane that had nothing claimable in the plan but starts with items
	 * the claim dead-letters (expired, spent lost leases) is claimed from
	 * last, with what room the batch has left: the claim buries them (a
	 * group head among them lets its next member be claimed in this same
	 * call, as an ungrouped item behind them is), and they never take a
	 * claimable item's place.  With the batch full they wait for the next
	 * call or sweep.
	 */
	{
		int			buried_before = ctx->nburied;

		for (int i = 0; i < nlanes; i++)
		{
			int64		ask;
			int			first = ctx->nids;

			if (asks[i] > 0 || !lanes[i].head_buried)
				continue;
			ask = Min(Max(lanes[i].room, 0), limit - nclaimed);
			if (ask > 0)
				nclaimed += claim_round(ctx, ask, stripe, &lanes[i]);
			flow_close_lane(ctx->qname, &lanes[i], ask, ctx->nids - first, ctx->ids + first);
		}

		/*
		 * A group head those lanes dead-lettered lets its group move on now:
		 * a next member outside the limited keys is claimable by the rest in
		 * this same call, as it is behind a head without a limit_key.
		 */
		if (ctx->nburied > buried_before && nclaimed < limit)
			nclaimed += claim_round(ctx, limit - nclaimed, stripe, NULL);
	}
	if (ctx->held != NULL)
	{
		qsort(ctx->held, ctx->nheld, sizeof(HeldRow), held_row_cmp);
		for (int r = 0; r < ctx->nheld; r++)
			tuplestore_puttuple(ctx->rsinfo->setResult, ctx->held[r].tuple);
		ctx->held = NULL;
		ctx->order = NULL;
		ctx->norder = 0;
	}
	return nclaimed;
}

/* Is the queue's breaker open now (tripped by this transaction, or another)? */
static bool
breaker_open_now(Datum qname)
{
	Oid			t[1] = {TEXTOID};

	queue_spi_exec(queue_prepare_cached(&breaker_state_plan, BREAKER_STATE_SQL, 1, t),
				   &qname, NULL, false, 1, SPI_OK_SELECT, "reading breaker state");
	return SPI_processed > 0;
}

/*
 * Gives back what a call claimed, as release() does (the attempt given
 * back, the items claimable now), and empties the call's result.
 */
static void
give_back(ClaimContext *ctx)
{
	Oid			t[3] = {TEXTOID, INT8OID, INT8OID};
	Datum		v[3];

	v[0] = ctx->qname;
	for (int i = 0; i < ctx->nids; i++)
	{
		v[1] = ctx->ids[i];
		v[2] = ctx->tokens[i];
		queue_spi_exec(queue_prepare_cached(&give_back_plan, GIVE_BACK_SQL, 3, t),
					   v, NULL, false, 0, SPI_OK_SELECT, "giving back a claim");
	}
	tuplestore_clear(ctx->rsinfo->setResult);
}

/*
 * queue.dequeue(queue_name text, worker text, batch_size int = 1,
 *				 lease_timeout interval = NULL)
 *	returns setof (item_id bigint, lease_token bigint, payload jsonb,
 *				   progress jsonb, attempt int, max_attempts int,
 *				   priority int, enqueued_at timestamptz,
 *				   lease_expires_at timestamptz, dedup_key text,
 *				   correlation_id text)
 *
 * Claims up to batch_size items for worker, in claim order, each under a
 * lease of lease_timeout (NULL: the queue's).  Returns no rows when nothing
 * is claimable, the queue is paused, max_in_flight is reached, or the
 * worker is draining, in maintenance or at its capacity.
 */
Datum
queue_dequeue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue_name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	Datum		worker;
	int32		batch_size;
	Interval	lease;
	QueueConfig cfg;
	Datum		qname;
	int64		want;
	bool		is_probe = false;
	int64		nclaimed = 0;
	int64		probe_id = 0;
	TimestampTz probe_expiry = 0;
	ClaimContext ctx;
	FlowLane	queue_rate;
	bool		rated = false;

	queue_check_worker(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	queue_check_not_null(PG_ARGISNULL(2), "batch_size");
	worker = PG_GETARG_DATUM(1);
	batch_size = PG_GETARG_INT32(2);
	if (batch_size < 1 || batch_size > QUEUE_BATCH_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_size %d is out of range", batch_size),
				 errhint("A batch holds 1 to %d items.", QUEUE_BATCH_MAX)));
	if (!PG_ARGISNULL(3))
	{
		lease = *PG_GETARG_INTERVAL_P(3);
		queue_check_positive_interval(&lease, "lease_timeout");
	}

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	queue_spi_connect();
	queue_load_config(queue_name, &cfg);
	queue_check_access(&cfg, QUEUE_ACCESS_WORKER);
	queue_check_writable(fcinfo);
	if (PG_ARGISNULL(3))
		lease = cfg.lease_timeout;
	qname = CStringGetTextDatum(queue_name);
	want = batch_size;

	/* Paused, or an open breaker: nothing, unless it grants the probe. */
	switch (queue_breaker_gate(&cfg, qname))
	{
		case BREAKER_PASS:
			break;
		case BREAKER_PROBE:
			is_probe = true;
			want = 1;
			break;
		case BREAKER_BLOCK:
			{
				/* nothing to hand out, but the worker was seen */
				QueueWorkerGates gates;

				(void) worker_seen(worker, &gates);
			}
			goto done;
	}

	/* Worker gates. */
	{
		int64		allowance = worker_allowance(worker);

		if (allowance == 0)
			goto undo_probe;
		if (allowance > 0)
			want = Min(want, allowance);
	}

	/* The queue-wide rate: its lock held, at most what its window allows. */
	if (cfg.flow_rate)
	{
		if (!flow_queue_rate_room(qname, &queue_rate))
			goto undo_probe;
		rated = true;
		want = Min(want, queue_rate.room);
	}

	ctx.rsinfo = rsinfo;
	ctx.qname = qname;
	ctx.worker = worker;
	ctx.lease = &lease;
	ctx.audit = cfg.audit;
	ctx.is_probe = is_probe;
	ctx.current_schema = queue_schema_current();
	ctx.queue = queue_name;
	ctx.claim_index = queue_claim_index_oid();
	ctx.probe_id = 0;
	ctx.probe_expiry = 0;
	ctx.nburied = 0;
	ctx.flow_limits = cfg.flow_limits;
	ctx.direct = ctx.current_schema && !queue_citus_loaded() && queue_claim_direct_possible();
	ctx.ids = (Datum *) palloc(sizeof(Datum) * Max(want, 1));
	ctx.tokens = (Datum *) palloc(sizeof(Datum) * Max(want, 1));
	ctx.nids = 0;
	ctx.lost_seen = false;
	ctx.order = NULL;
	ctx.norder = 0;
	ctx.held = NULL;
	ctx.nheld = 0;
	ctx.emit_keyed = false;
	if (want == 0)
		goto rated;

	if (cfg.max_in_flight <= 0)
		nclaimed = claim_items(&ctx, want, -1);
	else
	{
		/* Queue cap: each stripe's count and claim under its own lock. */
		int			nstripes = Min(cfg.max_in_flight, CAP_STRIPES);
		int			first = (int) (pg_prng_uint32(&pg_global_prng_state) % nstripes);
		bool		excess_blocks = false;
		bool		ran_out = false;

		for (int k = 0; k < nstripes && nclaimed < want; k++)
		{
			int			s = (first + k) % nstripes;
			int64		room;
			int64		ask;
			int64		got;

			/* another dequeuer holds this stripe: try the next */
			if (!queue_lock_private(queue_name, QUEUE_LOCK_STRIPE(s), false))
				continue;
			room = stripe_room(qname, s, nstripes, cfg.max_in_flight, &excess_blocks);
			if (room <= 0)
				continue;
			ask = Min(room, want - nclaimed);
			got = claim_items(&ctx, ask, s);
			nclaimed += got;
			if (got < ask)
			{
				ran_out = true;
				break;			/* nothing more to claim */
			}
		}

		/*
		 * Free places under the cap that only the excess of other stripes
		 * hid (stripes_free_all): claimed under every stripe's lock, each
		 * charged to a stripe below its share.
		 */
		if (excess_blocks && !ran_out && nclaimed < want)
		{
			int64		free_share[CAP_STRIPES];
			int64		free_total = stripes_free_all(queue_name, qname, nstripes,
													  cfg.max_in_flight, free_share);

			for (int t = 0; t < nstripes && free_total > 0 && nclaimed < want; t++)
			{
				int64		ask = Min(Min(free_share[t], free_total), want - nclaimed);
				int64		got;

				if (ask <= 0)
					continue;
				got = claim_items(&ctx, ask, t);
				nclaimed += got;
				free_total -= got;
				if (got < ask)
					break;		/* nothing more to claim */
			}
		}
	}
	probe_id = ctx.probe_id;
	probe_expiry = ctx.probe_expiry;

	/*
	 * The lost leases this call met are failed outcomes, counted at once;
	 * when they tripped the breaker the queue is paused from then on, and
	 * what this call claimed goes back as release() gives it back.
	 */
	if (ctx.lost_seen && !is_probe && ctx.nids > 0 && breaker_open_now(qname))
	{
		give_back(&ctx);
		ctx.nids = 0;			/* nothing claimed against the queue's rate */
		nclaimed = 0;
	}
rated:
	if (rated)
		flow_close_lane(qname, &queue_rate, want, ctx.nids, ctx.ids);

undo_probe:
	if (is_probe)
		queue_breaker_probe_claimed(qname, nclaimed > 0 ? probe_id : 0, probe_expiry);
done:
	queue_spi_finish();
	return (Datum) 0;
}
