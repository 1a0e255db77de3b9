/*-------------------------------------------------------------------------
 *
 * claim_direct.c
 *		The common claim, done through the claim index and the heap
 *		without a statement.
 *
 * Most claims take the head of a queue: items that were never leased, or
 * whose expired lease sweep has counted already, with nothing to route.
 * For those the claim statement (dequeue.c) costs far more to start than
 * to run: a plan of a dozen nodes is set up for every call to lock and
 * update one row.  Here the same work is done directly, in the same
 * order and with the same locks:
 *
 *	- an ordered scan of item_live_claim_idx from the head of the queue
 *	  (or from the backend's claim hint), below the band of limited keys,
 *	  for items visible now;
 *	- each candidate's row locked FOR UPDATE SKIP LOCKED (a row another
 *	  transaction holds is passed over, the latest version of a row that
 *	  was updated meanwhile is checked again, as EvalPlanQual would);
 *	- the lease written by a heap update, and the new version's index
 *	  entries inserted as the executor inserts them (index_entries.c).
 *
 * A candidate that needs more than a lease (an expired item, spent
 * attempts, a lost lease to record, an item that requires labels) ends
 * the direct claim before it is locked: the claim statement takes over
 * from there, so every rare case keeps exactly one implementation.  The
 * direct claim is not used at all where its shortcuts would not hold:
 * under Citus, for 0.1.0's tables, under SERIALIZABLE, in a read-only
 * transaction (where the statement raises the error), and when
 * item_live has a CHECK constraint, a rule, row security or an UPDATE
 * trigger this file does not know (the known ones only ever fire for
 * items of the limited band, which is never scanned here).
 *
 * src/claim_direct.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_relation.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "queue.h"

/* item_live's columns the claim reads or writes */
typedef enum ClaimCol
{
	COL_QUEUE,
	COL_ITEM_ID,
	COL_PRIORITY,
	COL_VISIBLE_AT,
	COL_BASE_PRIORITY,
	COL_ENQUEUED_AT,
	COL_ATTEMPT,
	COL_MAX_ATTEMPTS,
	COL_LEASE_TOKEN,
	COL_LEASE_EXPIRES_AT,
	COL_WORKER,
	COL_CLAIMED_AT,
	COL_CAP_STRIPE,
	COL_EXPIRES_AT,
	COL_DEDUP_KEY,
	COL_CORRELATION_ID,
	COL_PAYLOAD,
	COL_PROGRESS,
	COL_LEASE_SESSION,
	COL_REQUIRES,
	COL_LOST_COUNTED,
	NUM_CLAIM_COLS
} ClaimCol;

static const char *const claim_col_names[NUM_CLAIM_COLS] = {
	"queue_name", "item_id", "priority", "visible_at", "base_priority",
	"enqueued_at", "attempt", "max_attempts", "lease_token",
	"lease_expires_at", "worker", "claimed_at", "cap_stripe", "expires_at",
	"dedup_key", "correlation_id", "payload", "progress", "lease_session",
	"requires", "lost_counted"
};

/* the columns a claim writes (write_lease) */
static const ClaimCol lease_cols[] = {
	COL_PRIORITY, COL_VISIBLE_AT, COL_ATTEMPT, COL_LEASE_TOKEN, COL_LEASE_EXPIRES_AT, COL_WORKER,
	COL_CLAIMED_AT, COL_CAP_STRIPE, COL_LEASE_SESSION, COL_LOST_COUNTED
};

/* UPDATE triggers of item_live that never fire below the limited band */
static const char *const band_triggers[] = {
	"item_live_flow_band", "item_live_flow_revival", "item_live_flow_updated",
	"item_live_key_freed"
};

/*
 * What is known of item_live, until its next relcache invalidation: its
 * columns' numbers, the lease token sequence, and whether a direct claim
 * is allowed at all.
 */
static Oid	layout_relid = InvalidOid;
static bool layout_valid = false;
static bool layout_usable = false;
static AttrNumber claim_attnum[NUM_CLAIM_COLS];
static Oid	lease_seq_relid = InvalidOid;

/* Relcache callback (called by queue.c's): item_live's layout is read again after a change. */
void
queue_claim_direct_relcache(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == layout_relid)
		layout_valid = false;
}

/*
 * queue_triggers_known
 *		Whether every enabled trigger of rel on `event` (TRIGGER_TYPE_*) is
 *		one of the n `known`, which a direct write of the hot path checks
 *		itself: one that fires for the rows it writes sends it back to the
 *		statement.
 */
bool
queue_triggers_known(Relation rel, int16 event, const char *const *known, int n)
{
	TriggerDesc *td = rel->trigdesc;

	if (td == NULL)
		return true;
	for (int i = 0; i < td->numtriggers; i++)
	{
		Trigger    *t = &td->triggers[i];
		bool		found = false;

		if ((t->tgtype & event) == 0 || t->tgenabled == TRIGGER_DISABLED)
			continue;
		for (int k = 0; k < n; k++)
			found |= strcmp(t->tgname, known[k]) == 0;
		if (!found)
			return false;
	}
	return true;
}

/* Read item_live's layout into the statics above (rel open). */
static void
load_layout(Relation rel)
{
	Oid			nsp = RelationGetNamespace(rel);

	layout_usable = !rel->rd_rel->relrowsecurity && rel->rd_rules == NULL &&
		(rel->rd_att->constr == NULL || rel->rd_att->constr->num_check == 0) &&
		queue_triggers_known(rel, TRIGGER_TYPE_UPDATE, band_triggers, lengthof(band_triggers));
	for (int c = 0; c < NUM_CLAIM_COLS; c++)
	{
		claim_attnum[c] = attnameAttNum(rel, claim_col_names[c], false);
		if (claim_attnum[c] <= 0)
			layout_usable = false;
	}
	lease_seq_relid = get_relname_relid("lease_token_seq", nsp);
	if (!OidIsValid(lease_seq_relid))
		layout_usable = false;
	layout_relid = RelationGetRelid(rel);
	layout_valid = true;
}

/*
 * queue_claim_direct_possible
 *		Whether this call may claim directly at all (see the header); the
 *		caller has checked Citus and the schema version.
 */
bool
queue_claim_direct_possible(void)
{
	return !IsolationIsSerializable() && !XactReadOnly &&
		OidIsValid(queue_item_live_oid()) && OidIsValid(queue_claim_index_oid());
}

/* The value of column c of the slot's tuple (deformed). */
#define COLVAL(slot, c) ((slot)->tts_values[claim_attnum[c] - 1])
#define COLNULL(slot, c) ((slot)->tts_isnull[claim_attnum[c] - 1])

/*
 * A candidate of the scan: what it is.  CAND_PASS: not claimable now
 * (after a concurrent update); CAND_TAKE: claim it; CAND_STATEMENT: leave
 * it, and everything after it, to the claim statement.
 */
typedef enum CandKind
{
	CAND_PASS,
	CAND_TAKE,
	CAND_STATEMENT
} CandKind;

static CandKind
classify(TupleTableSlot *slot, Datum qname, TimestampTz now)
{
	slot_getallattrs(slot);
	/* the scan's own quals, checked again for a version found by a lock */
	if (COLNULL(slot, COL_QUEUE) ||
		!DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID,
											  COLVAL(slot, COL_QUEUE), qname)) ||
		DatumGetInt32(COLVAL(slot, COL_PRIORITY)) >= QUEUE_FLOW_BAND ||
		DatumGetTimestampTz(COLVAL(slot, COL_VISIBLE_AT)) > now)
		return CAND_PASS;
	/* routed items: the statement reads the worker's labels */
	if (!COLNULL(slot, COL_REQUIRES))
		return CAND_STATEMENT;
	/* expired: dead-lettered by the statement's caller */
	if (!COLNULL(slot, COL_EXPIRES_AT) &&
		DatumGetTimestampTz(COLVAL(slot, COL_EXPIRES_AT)) <= now)
		return CAND_STATEMENT;
	if (!COLNULL(slot, COL_LEASE_TOKEN))
	{
		int64		token = DatumGetInt64(COLVAL(slot, COL_LEASE_TOKEN));

		/* spent attempts, or a lost lease to record */
		if (DatumGetInt32(COLVAL(slot, COL_ATTEMPT)) >=
			DatumGetInt32(COLVAL(slot, COL_MAX_ATTEMPTS)) || token < 0 ||
			COLNULL(slot, COL_LOST_COUNTED) || !DatumGetBool(COLVAL(slot, COL_LOST_COUNTED)))
			return CAND_STATEMENT;
	}
	return CAND_TAKE;
}

/*
 * write_lease
 *		Update the locked row version `old` with its new lease, as the claim
 *		statement's SET list does, insert the index entries of the new
 *		version, and hand the claimed row's columns to dc->emit.
 */
static void
write_lease(Relation rel, Bitmapset *updated, Snapshot snapshot,
			HeapTuple old, TupleTableSlot *newslot, QueueDirectClaim *dc,
			TimestampTz now, Datum lease_end, Datum session)
{
	Datum		out[QUEUE_DEQUEUE_NCOLS];
	bool		outnull[QUEUE_DEQUEUE_NCOLS];
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;
	TM_Result	result;
	int64		token = nextval_internal(lease_seq_relid, false);

	ExecClearTuple(newslot);
	heap_deform_tuple(old, RelationGetDescr(rel), newslot->tts_values, newslot->tts_isnull);
	/* its place in the claim order, for a batch put out in that order */
	dc->emit_priority = DatumGetInt32(COLVAL(newslot, COL_PRIORITY));
	dc->emit_visible_at = DatumGetTimestampTz(COLVAL(newslot, COL_VISIBLE_AT));
#define SETCOL(c, v, n) \
	(newslot->tts_values[claim_attnum[c] - 1] = (v), newslot->tts_isnull[claim_attnum[c] - 1] = (n))
	SETCOL(COL_ATTEMPT, Int32GetDatum(DatumGetInt32(COLVAL(newslot, COL_ATTEMPT)) + 1), false);
	SETCOL(COL_LEASE_TOKEN, Int64GetDatum(token), false);
	SETCOL(COL_WORKER, dc->worker, false);
	SETCOL(COL_CLAIMED_AT, TimestampTzGetDatum(now), false);
	SETCOL(COL_CAP_STRIPE, Int16GetDatum((int16) Max(dc->stripe, 0)), dc->stripe < 0);
	SETCOL(COL_LEASE_SESSION, session, false);
	SETCOL(COL_LOST_COUNTED, BoolGetDatum(false), false);
	SETCOL(COL_LEASE_EXPIRES_AT, lease_end, false);
	/* priority aging's wait ends with the claim (dequeue.c); below the band */
	SETCOL(COL_PRIORITY, COLVAL(newslot, COL_BASE_PRIORITY), COLNULL(newslot, COL_BASE_PRIORITY));
	SETCOL(COL_VISIBLE_AT, lease_end, false);
#undef SETCOL
	ExecStoreVirtualTuple(newslot);

	result = table_tuple_update(rel, &old->t_self, newslot, GetCurrentCommandId(true),
								snapshot, InvalidSnapshot, true, &tmfd, &lockmode,
								&update_indexes);
	/* we hold the row's lock: nobody else can have changed it */
	if (result != TM_Ok)
		elog(ERROR, "queue: claimed row of item_live changed under its lock (result %d)",
			 (int) result);
	if (update_indexes)
		queue_insert_index_entries(rel, newslot, updated);

	out[0] = COLVAL(newslot, COL_ITEM_ID);
	outnull[0] = false;
	out[1] = Int64GetDatum(token);
	outnull[1] = false;
#define OUTCOL(i, c) (out[i] = COLVAL(newslot, c), outnull[i] = COLNULL(newslot, c))
	OUTCOL(2, COL_PAYLOAD);
	OUTCOL(3, COL_PROGRESS);
	OUTCOL(4, COL_ATTEMPT);
	OUTCOL(5, COL_MAX_ATTEMPTS);
	OUTCOL(6, COL_BASE_PRIORITY);
	OUTCOL(7, COL_ENQUEUED_AT);
	OUTCOL(8, COL_LEASE_EXPIRES_AT);
	OUTCOL(9, COL_DEDUP_KEY);
	OUTCOL(10, COL_CORRELATION_ID);
#undef OUTCOL
	dc->emit(dc->emit_arg, out, outnull);
}

/* The rows one direct claim has found and locked so far. */
typedef struct ClaimScan
{
	QueueDirectClaim *dc;
	Relation	rel;
	Relation	index;
	Snapshot	snapshot;
	TimestampTz now;
	int			lockflags;
	TupleTableSlot *slot;
	TupleTableSlot *locked;
	HeapTuple  *rows;
	int64		nrows;
	int64		maxrows;
} ClaimScan;

/*
 * scan_candidates
 *		Walk the claim index with `keys`, locking claimable rows into
 *		cs->rows until dc->limit rows are held, the scan ends, or a
 *		candidate needs the statement (dc->need_statement).  With
 *		set_head, the first row locked is recorded as the queue's head
 *		(dc->has_head and its place, for the hint).
 */
static void
scan_candidates(ClaimScan *cs, ScanKey keys, int nkeys, bool set_head)
{
	QueueDirectClaim *dc = cs->dc;
	IndexScanDesc scan;

	scan = index_beginscan(cs->rel, cs->index, cs->snapshot, nkeys, 0);
	index_rescan(scan, keys, nkeys, NULL, 0);
	while (cs->nrows < dc->limit &&
		   index_getnext_slot(scan, ForwardScanDirection, cs->slot))
	{
		TM_FailureData tmfd;
		TM_Result	result;
		CandKind	kind;
		ItemPointerData tid;

		CHECK_FOR_INTERRUPTS();
		kind = classify(cs->slot, dc->qname, cs->now);
		if (kind == CAND_STATEMENT)
		{
			dc->need_statement = true;
			break;
		}
		if (kind == CAND_PASS)
			continue;

		tid = cs->slot->tts_tid;
		result = table_tuple_lock(cs->rel, &tid, cs->snapshot, cs->locked,
								  GetCurrentCommandId(true), LockTupleExclusive,
								  LockWaitSkip, cs->lockflags, &tmfd);
		switch (result)
		{
			case TM_Ok:
				break;
			case TM_WouldBlock:		/* SKIP LOCKED */
			case TM_SelfModified:	/* changed by this transaction already */
			case TM_Deleted:
				continue;
			case TM_Updated:
				/* only without FIND_LAST_VERSION: REPEATABLE READ */
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
				break;
			default:
				elog(ERROR, "queue: unexpected result %d locking an item", (int) result);
		}
		/* a newer version than the scan saw: check it like EvalPlanQual */
		if (tmfd.traversed)
		{
			kind = classify(cs->locked, dc->qname, cs->now);
			if (kind == CAND_STATEMENT)
			{
				dc->need_statement = true;
				break;
			}
			if (kind == CAND_PASS)
				continue;
		}
		else
			slot_getallattrs(cs->locked);

		if (set_head && !dc->has_head)
		{
			dc->has_head = true;
			dc->head_priority = DatumGetInt32(COLVAL(cs->locked, COL_PRIORITY));
			dc->head_visible_at = DatumGetTimestampTz(COLVAL(cs->locked, COL_VISIBLE_AT));
			dc->head_item_id = DatumGetInt64(COLVAL(cs->locked, COL_ITEM_ID));
		}
		if (cs->nrows == cs->maxrows)
		{
			cs->maxrows *= 2;
			cs->rows = repalloc(cs->rows, sizeof(HeapTuple) * cs->maxrows);
		}
		cs->rows[cs->nrows++] = ExecCopySlotHeapTuple(cs->locked);
	}
	index_endscan(scan);
}

/*
 * queue_claim_direct
 *		Claim up to dc->limit items of dc->qname for dc->worker (see the
 *		header), handing each to dc->emit.  Returns how many were claimed;
 *		dc->need_statement tells whether a candidate was left to the claim
 *		statement, dc->has_head whether any claimable row was met at or
 *		past the hint (its place in dc->head_priority, head_visible_at and
 *		head_item_id, for the hint).
 *
 *		A hinted claim first looks from the head at the priorities above
 *		the hint's (usually none, one descent of the index), so an urgent
 *		item is never passed over for the hint; then from the hint on.
 */
int64
queue_claim_direct(QueueDirectClaim *dc)
{
	Relation	rel;
	Relation	index;
	ScanKeyData keys[4];
	ScanKeyData higher[3];
	ScanKeyData rowkeys[3];
	int			nkeys = 0;
	ClaimScan	cs;
	Snapshot	snapshot;
	TimestampTz now = GetCurrentStatementStartTimestamp();
	HeapTuple  *rows;
	int64		nrows;

	dc->need_statement = false;
	dc->has_head = false;
	snapshot = queue_lookup_snapshot();
	rel = table_open(queue_item_live_oid(), RowExclusiveLock);
	if (!layout_valid)
		load_layout(rel);
	if (!layout_usable || !queue_index_entries_usable(rel))
	{
		table_close(rel, NoLock);
		UnregisterSnapshot(snapshot);
		dc->need_statement = true;
		return 0;
	}
	index = index_open(queue_claim_index_oid(), RowExclusiveLock);

	cs.dc = dc;
	cs.rel = rel;
	cs.index = index;
	cs.snapshot = snapshot;
	cs.now = now;
	cs.lockflags = IsolationUsesXactSnapshot() ? 0 : TUPLE_LOCK_FLAG_FIND_LAST_VERSION;
	cs.slot = table_slot_create(rel, NULL);
	cs.locked = table_slot_create(rel, NULL);
	cs.maxrows = Min(dc->limit, 1024);
	cs.rows = palloc(sizeof(HeapTuple) * cs.maxrows);
	cs.nrows = 0;

	/*
	 * Find and lock the rows first, write their leases after the scans
	 * have ended: a scan marks the index entries of dead rows it stepped
	 * over as dead when it leaves their page, but only when the page has
	 * not changed since it was read, which our own new entries would
	 * prevent.
	 *
	 * Keys in column order of (queue_name, priority, visible_at, item_id).
	 */
	ScanKeyEntryInitialize(&keys[nkeys++], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ, dc->qname);
	if (dc->hinted && dc->hint_priority > 0)
	{
		/* the priorities above the hint's, from the head */
		higher[0] = keys[0];
		ScanKeyEntryInitialize(&higher[1], 0, 2, BTLessStrategyNumber, InvalidOid,
							   InvalidOid, F_INT4LT, Int32GetDatum(dc->hint_priority));
		ScanKeyEntryInitialize(&higher[2], 0, 3, BTLessEqualStrategyNumber, InvalidOid,
							   InvalidOid, F_TIMESTAMPTZ_LE, TimestampTzGetDatum(now));
		scan_candidates(&cs, higher, 3, false);
	}
	if (dc->hinted)
	{
		/*
		 * ROW(priority, visible_at, item_id) >= ROW(hint), compared by btree
		 * support procs: the item id matters, as a batch enqueues all its
		 * items with one visible_at
		 */
		ScanKeyEntryInitialize(&rowkeys[0], SK_ROW_MEMBER, 2, BTGreaterEqualStrategyNumber,
							   INT4OID, InvalidOid, F_BTINT4CMP,
							   Int32GetDatum(dc->hint_priority));
		ScanKeyEntryInitialize(&rowkeys[1], SK_ROW_MEMBER, 3,
							   BTGreaterEqualStrategyNumber, TIMESTAMPTZOID, InvalidOid,
							   F_TIMESTAMP_CMP, TimestampTzGetDatum(dc->hint_visible_at));
		ScanKeyEntryInitialize(&rowkeys[2], SK_ROW_MEMBER | SK_ROW_END, 4,
							   BTGreaterEqualStrategyNumber, INT8OID, InvalidOid,
							   F_BTINT8CMP, Int64GetDatum(dc->hint_item_id));
		ScanKeyEntryInitialize(&keys[nkeys++], SK_ROW_HEADER, 2, BTGreaterEqualStrategyNumber,
							   InvalidOid, InvalidOid, InvalidOid, PointerGetDatum(rowkeys));
	}
	ScanKeyEntryInitialize(&keys[nkeys++], 0, 2, BTLessStrategyNumber, InvalidOid,
						   InvalidOid, F_INT4LT, Int32GetDatum(QUEUE_FLOW_BAND));
	ScanKeyEntryInitialize(&keys[nkeys++], 0, 3, BTLessEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_TIMESTAMPTZ_LE, TimestampTzGetDatum(now));
	if (cs.nrows < dc->limit && !dc->need_statement)
		scan_candidates(&cs, keys, nkeys, true);
	ExecDropSingleTupleTableSlot(cs.locked);
	ExecDropSingleTupleTableSlot(cs.slot);
	rows = cs.rows;
	nrows = cs.nrows;

	if (nrows > 0)
	{
		Bitmapset  *updated = NULL;
		TupleTableSlot *newslot = MakeSingleTupleTableSlot(RelationGetDescr(rel),
														   &TTSOpsVirtual);
		Datum		lease_end = DirectFunctionCall2(timestamptz_pl_interval,
													TimestampTzGetDatum(now),
													IntervalPGetDatum(dc->lease));
		Datum		session = Int64GetDatum(queue_session_key());

		/* what the index AM is told of the update (index_unchanged_by_update) */
		for (int k = 0; k < lengthof(lease_cols); k++)
			updated = bms_add_member(updated, claim_attnum[lease_cols[k]] -
									 FirstLowInvalidHeapAttributeNumber);
		for (int64 r = 0; r < nrows; r++)
		{
			write_lease(rel, updated, snapshot, rows[r], newslot, dc, now, lease_end, session);
			heap_freetuple(rows[r]);
		}
		ExecDropSingleTupleTableSlot(newslot);
	}
	pfree(rows);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	UnregisterSnapshot(snapshot);
	/* what follows in this transaction sees the leases */
	CommandCounterIncrement();
	return nrows;
}
