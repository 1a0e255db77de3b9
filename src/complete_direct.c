/*-------------------------------------------------------------------------
 *
 * complete_direct.c
 *		complete() of one item done through the heap and the indexes
 *		without a statement: the item's row deleted from item_live, its
 *		history row inserted into the partition of item_done that covers
 *		the completion's time (the statement's start, as in ack.c).
 *
 * The completion statement (ack.c) spends most of its time being set up:
 * a DELETE and an INSERT into a partitioned table, with tuple routing,
 * for one row each.  Here the same is done directly:
 *
 *	- the item is found through item_live's primary key on a fresh
 *	  snapshot, and its lease token checked;
 *	- it is deleted; when another transaction changed it meanwhile, its
 *	  latest version is locked and checked again, as EvalPlanQual would;
 *	- the history row is routed as the executor routes it (a range
 *	  partition by completed_at, else the DEFAULT partition, whose
 *	  constraint is then checked because a partition may have been
 *	  attached meanwhile) and inserted with its index entries.
 *
 * complete_batch takes its items all at once (ack.c).  First, in
 * QUEUE_COMPLETER_HELD mode, those this transaction holds already (claimed
 * in it: the claim leaves its lock on the version it wrote), which no other
 * transaction can hold; deleting them in a subtransaction would make a
 * multixact of the two.  Then the others in a subtransaction, in
 * QUEUE_COMPLETER_NOWAIT mode: the completer never waits for a version
 * another transaction holds, it reports the item busy instead, so that the
 * caller can let everything go (the subtransaction rolled back) and wait
 * for that item alone (queue_completer_wait); the items it leaves to the
 * statement it locks meanwhile, so that the statement does not wait
 * either.
 *
 * Where a shortcut would skip work a statement does, the statement runs
 * instead (QUEUE_DIRECT_STATEMENT, decided before anything is written):
 * an item whose deletion fires the flow-control trigger (a group head, a
 * limited key's lease), a trigger on either table this file does not
 * know, a rule, row security or a CHECK constraint on the history
 * partition, SERIALIZABLE isolation, a read-only transaction (the
 * statement raises the error).  Under Citus the statement always runs.
 *
 * src/complete_direct.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "queue.h"

/* item_live's columns a completion reads */
typedef enum LiveCol
{
	LC_QUEUE,
	LC_ITEM_ID,
	LC_PRIORITY,
	LC_LEASE_TOKEN,
	LC_WORKER,
	LC_GROUP_KEY,
	LC_GROUP_WAIT,
	LC_PAYLOAD,
	LC_ATTEMPT,
	LC_ENQUEUED_AT,
	LC_CLAIMED_AT,
	LC_DEDUP_KEY,
	LC_CORRELATION_ID,
	LC_PROGRESS,
	NUM_LIVE_COLS
} LiveCol;

static const char *const live_col_names[NUM_LIVE_COLS] = {
	"queue_name", "item_id", "priority", "lease_token", "worker", "group_key",
	"group_wait", "payload", "attempt", "enqueued_at", "claimed_at", "dedup_key",
	"correlation_id", "progress"
};

/* item_done's columns, in the order history_values fills them */
#define NUM_DONE_COLS 12
static const char *const done_col_names[NUM_DONE_COLS] = {
	"queue_name", "item_id", "payload", "result", "attempts", "worker",
	"enqueued_at", "claimed_at", "completed_at", "dedup_key", "correlation_id",
	"progress"
};

/* DELETE triggers of item_live that the checks below stand for */
static const char *const delete_triggers[] = {
	"item_live_flow_deleted", "item_live_group_left", "item_live_key_left"
};

/* item_live's layout, until its next relcache invalidation */
static Oid	live_relid = InvalidOid;
static bool live_valid = false;
static bool live_usable = false;
static AttrNumber live_attnum[NUM_LIVE_COLS];
static Oid	pkey_relid = InvalidOid;
static Oid	done_relid = InvalidOid;	/* item_done, the partitioned parent */

/* The columns of the history partition written last, until it changes. */
static Oid	part_relid = InvalidOid;
static AttrNumber part_attnum[NUM_DONE_COLS];

/* Relcache callback (called by queue.c's): item_live's layout is read again after a change. */
void
queue_complete_direct_relcache(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == live_relid)
		live_valid = false;
	if (relid == InvalidOid || relid == part_relid)
		part_relid = InvalidOid;
}

/* Read item_live's layout into the statics above (rel open). */
static void
load_live_layout(Relation rel)
{
	live_usable = !rel->rd_rel->relrowsecurity && rel->rd_rules == NULL &&
		queue_triggers_known(rel, TRIGGER_TYPE_DELETE, delete_triggers,
							 lengthof(delete_triggers));
	for (int c = 0; c < NUM_LIVE_COLS; c++)
	{
		live_attnum[c] = attnameAttNum(rel, live_col_names[c], false);
		if (live_attnum[c] <= 0)
			live_usable = false;
	}
	pkey_relid = RelationGetPrimaryKeyIndex(rel);
	if (!OidIsValid(pkey_relid))
		live_usable = false;
	done_relid = get_relname_relid("item_done", RelationGetNamespace(rel));
	if (!OidIsValid(done_relid))
		live_usable = false;
	live_relid = RelationGetRelid(rel);
	live_valid = true;
}

#define LV(slot, c) ((slot)->tts_values[live_attnum[c] - 1])
#define LN(slot, c) ((slot)->tts_isnull[live_attnum[c] - 1])

/* What the version in slot is to complete(); slot deformed here. */
typedef enum LiveMatch
{
	LIVE_OTHER,					/* not the item under that lease */
	LIVE_MATCH,					/* ours to delete */
	LIVE_STATEMENT				/* ours, but its deletion fires a trigger */
} LiveMatch;

static LiveMatch
match_item(TupleTableSlot *slot, Datum qname, int64 item_id, int64 token)
{
	int64		t;

	slot_getallattrs(slot);
	if (LN(slot, LC_QUEUE) || LN(slot, LC_LEASE_TOKEN) ||
		DatumGetInt64(LV(slot, LC_ITEM_ID)) != item_id ||
		!DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID,
											  LV(slot, LC_QUEUE), qname)))
		return LIVE_OTHER;
	/* abs(lease_token) = token: a cancel request negates the token */
	t = DatumGetInt64(LV(slot, LC_LEASE_TOKEN));
	if ((t < 0 ? -t : t) != token)
		return LIVE_OTHER;
	/* item_live_flow_deleted's WHEN, which covers item_live_group_left's
	 * and item_live_key_left's */
	if ((!LN(slot, LC_GROUP_KEY) && !DatumGetBool(LV(slot, LC_GROUP_WAIT))) ||
		(DatumGetInt32(LV(slot, LC_PRIORITY)) >= QUEUE_FLOW_BAND && !LN(slot, LC_WORKER)))
		return LIVE_STATEMENT;
	return LIVE_MATCH;
}

/*
 * held_here
 *		Whether this transaction (not a multixact) is the version's xmax: a
 *		claim of this transaction leaves its lock on the version it wrote.
 *		Read without the buffer's content lock: another transaction may be
 *		writing xmax meanwhile, and then it is not this one's anyway.
 */
static bool
held_here(TupleTableSlot *slot)
{
	HeapTupleHeader h = ExecFetchSlotHeapTuple(slot, false, NULL)->t_data;
	TransactionId xmax;

	if (h->t_infomask & (HEAP_XMAX_INVALID | HEAP_XMAX_IS_MULTI))
		return false;
	xmax = HeapTupleHeaderGetRawXmax(h);
	return TransactionIdIsValid(xmax) && TransactionIdIsCurrentTransactionId(xmax);
}

/*
 * route_history
 *		The partition of item_done (parent, open) a row completed at `at`
 *		goes to, as the executor's tuple routing finds it; *is_default
 *		tells whether it is the DEFAULT partition.  InvalidOid when none.
 */
static Oid
route_history(Relation parent, TimestampTz at, bool *is_default)
{
	PartitionKey key;
	PartitionDesc pd;
	PartitionBoundInfo bounds;
	Datum		value = TimestampTzGetDatum(at);
	int			index = -1;

	*is_default = false;
	/* 0.1.0's item_done, before ALTER EXTENSION UPDATE, is one table */
	if (parent->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		return InvalidOid;
	key = RelationGetPartitionKey(parent);
	if (key == NULL || key->strategy != PARTITION_STRATEGY_RANGE || key->partnatts != 1)
		return InvalidOid;
	pd = RelationGetPartitionDesc(parent, true);
	bounds = pd->boundinfo;
	if (bounds != NULL && pd->nparts > 0)
	{
		bool		equal;
		int			offset = partition_range_datum_bsearch(key->partsupfunc,
														   key->partcollation,
														   bounds, 1, &value, &equal);

		index = bounds->indexes[offset + 1];
		if (index < 0)
		{
			index = bounds->default_index;
			*is_default = true;
		}
	}
	return index >= 0 ? pd->oids[index] : InvalidOid;
}

/* An open completion: what complete() and complete_batch() share. */
struct QueueCompleter
{
	Relation	live;
	Relation	pkey;
	Relation	done_parent;
	Relation	part;			/* the history partition of now */
	bool		is_default;		/* it is the DEFAULT partition */
	bool		part_checked;	/* its constraint was checked (see below) */
	QueueCompleterMode mode;
	TupleDesc	pdesc;
	AttrNumber	done_attnum[NUM_DONE_COLS];
	Snapshot	snapshot;
	CommandId	cid;
	TimestampTz now;
	IndexScanDesc scan;
	TupleTableSlot *slot;		/* the version the lookup found */
	TupleTableSlot *locked;		/* a newer version, locked */
	TupleTableSlot *hist;		/* the history row */
};

/*
 * queue_completer_begin
 *		Open item_live and the history partition of the completion time;
 *		NULL when the statement must do them (see the header).  Every
 *		lookup of the completer runs on one snapshot.  The mode says what
 *		to do with an item another transaction holds (see the header).
 */
QueueCompleter *
queue_completer_begin(QueueCompleterMode mode)
{
	QueueCompleter *c;
	Relation	live;
	Relation	done_parent;
	Relation	part;
	Oid			partoid;
	bool		is_default;
	TupleDesc	pdesc;
	TimestampTz now = GetCurrentStatementStartTimestamp();

	if (IsolationIsSerializable() || XactReadOnly || !OidIsValid(queue_item_live_oid()))
		return NULL;

	live = table_open(queue_item_live_oid(), RowExclusiveLock);
	if (!live_valid)
		load_live_layout(live);
	if (!live_usable || !queue_index_entries_usable(live))
	{
		table_close(live, NoLock);
		return NULL;
	}

	/* where the history rows go, and whether they may go there directly */
	done_parent = table_open(done_relid, RowExclusiveLock);
	partoid = route_history(done_parent, now, &is_default);
	if (!OidIsValid(partoid))
	{
		table_close(done_parent, NoLock);
		table_close(live, NoLock);
		return NULL;
	}
	part = table_open(partoid, RowExclusiveLock);
	pdesc = RelationGetDescr(part);
	if (part->trigdesc != NULL || done_parent->trigdesc != NULL ||
		part->rd_rel->relkind != RELKIND_RELATION || part->rd_rel->relrowsecurity ||
		part->rd_rules != NULL ||
		(pdesc->constr != NULL && pdesc->constr->num_check > 0) ||
		!queue_index_entries_usable(part))
	{
		table_close(part, NoLock);
		table_close(done_parent, NoLock);
		table_close(live, NoLock);
		return NULL;
	}

	c = palloc0(sizeof(QueueCompleter));
	c->live = live;
	c->done_parent = done_parent;
	c->part = part;
	c->is_default = is_default;
	c->mode = mode;
	c->pdesc = pdesc;
	c->now = now;
	if (part_relid != partoid)
	{
		for (int i = 0; i < NUM_DONE_COLS; i++)
		{
			part_attnum[i] = attnameAttNum(part, done_col_names[i], false);
			if (part_attnum[i] <= 0)
				elog(ERROR, "queue: column \"%s\" of item_done is missing", done_col_names[i]);
		}
		part_relid = partoid;
	}
	memcpy(c->done_attnum, part_attnum, sizeof(part_attnum));
	c->snapshot = queue_lookup_snapshot();
	c->cid = GetCurrentCommandId(true);
	c->pkey = index_open(pkey_relid, RowExclusiveLock);
	c->slot = table_slot_create(live, NULL);
	c->locked = table_slot_create(live, NULL);
	c->hist = MakeSingleTupleTableSlot(pdesc, &TTSOpsVirtual);
	c->scan = index_beginscan(live, c->pkey, c->snapshot, 2, 0);
	return c;
}

/* Insert the history row of the deleted version in cur. */
static void
write_history(QueueCompleter *c, TupleTableSlot *cur, Datum result, bool result_null)
{
	TupleTableSlot *hist = c->hist;
	Datum	   *v = hist->tts_values;
	bool	   *n = hist->tts_isnull;

	ExecClearTuple(hist);
	memset(n, true, sizeof(bool) * c->pdesc->natts);
	/* COMPLETE_HISTORY's column list (ack.c) */
#define DONE(i, val, isnull) (v[c->done_attnum[i] - 1] = (val), n[c->done_attnum[i] - 1] = (isnull))
#define FROM(i, col) DONE(i, LV(cur, col), LN(cur, col))
	FROM(0, LC_QUEUE);
	FROM(1, LC_ITEM_ID);
	FROM(2, LC_PAYLOAD);
	DONE(3, result, result_null);
	FROM(4, LC_ATTEMPT);
	FROM(5, LC_WORKER);
	FROM(6, LC_ENQUEUED_AT);
	FROM(7, LC_CLAIMED_AT);
	DONE(8, TimestampTzGetDatum(c->now), false);
	FROM(9, LC_DEDUP_KEY);
	FROM(10, LC_CORRELATION_ID);
	FROM(11, LC_PROGRESS);
#undef FROM
#undef DONE
	ExecStoreVirtualTuple(hist);
	/* as the executor's ExecConstraints would say it */
	for (int a = 0; a < c->pdesc->natts; a++)
		if (n[a] && TupleDescAttr(c->pdesc, a)->attnotnull)
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
							NameStr(TupleDescAttr(c->pdesc, a)->attname),
							RelationGetRelationName(c->part))));

	/*
	 * Rows routed to DEFAULT: a partition attached meanwhile may cover
	 * them.  Every row of the completer has the same completed_at, so one
	 * check stands for all.
	 */
	if (c->is_default && !c->part_checked)
	{
		EState	   *estate = CreateExecutorState();
		ResultRelInfo *rri = makeNode(ResultRelInfo);

		InitResultRelInfo(rri, c->part, 0, NULL, 0);
		(void) ExecPartitionCheck(rri, hist, estate, true);
		FreeExecutorState(estate);
		c->part_checked = true;
	}
	table_tuple_insert(c->part, hist, c->cid, 0, NULL);
	queue_insert_index_entries(c->part, hist, NULL);
}

/*
 * queue_completer_one
 *		Complete item (qname, item_id) whose current lease is `token` (or,
 *		cancel requested, -token): see the header.  On QUEUE_DIRECT_DONE
 *		*out holds what the caller records of the completion.
 */
QueueDirectResult
queue_completer_one(QueueCompleter *c, Datum qname, int64 item_id, int64 token,
					Datum result, bool result_null, QueueCompleted *out)
{
	TupleTableSlot *cur = c->slot;
	LiveMatch	match = LIVE_OTHER;
	bool		locked = false; /* cur is a version this transaction locked */

	/* find the item through the primary key */
	queue_item_pkey_rescan(c->scan, qname, item_id);
	while (index_getnext_slot(c->scan, ForwardScanDirection, c->slot))
	{
		match = match_item(c->slot, qname, item_id, token);
		if (match != LIVE_OTHER)
			break;
	}

	/* HELD: only what this transaction holds, which no other can */
	if (match != LIVE_OTHER && c->mode == QUEUE_COMPLETER_HELD && !held_here(cur))
		return QUEUE_DIRECT_NOT_HELD;

	/* NOWAIT: an item the statement is to delete is taken now */
	if (match == LIVE_STATEMENT && c->mode == QUEUE_COMPLETER_NOWAIT)
	{
		TM_FailureData tmfd;
		TM_Result	r;
		ItemPointerData tid = cur->tts_tid;

		r = table_tuple_lock(c->live, &tid, c->snapshot, c->locked, c->cid, LockTupleExclusive,
							 LockWaitSkip, TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		if (r == TM_WouldBlock)
		{
			out->busy = tid;
			return QUEUE_DIRECT_BUSY;
		}
		if (r == TM_Deleted ||
			(r == TM_Ok && match_item(c->locked, qname, item_id, token) == LIVE_OTHER))
			return QUEUE_DIRECT_NONE;
		return QUEUE_DIRECT_STATEMENT;
	}

	/* delete it; a version changed meanwhile is locked and checked again */
	while (match == LIVE_MATCH)
	{
		TM_FailureData tmfd;
		TM_Result	r;
		ItemPointerData tid = cur->tts_tid;

		/* (a version this transaction locked has no other holder) */
		r = table_tuple_delete(c->live, &tid, c->cid, c->snapshot, InvalidSnapshot,
							   c->mode != QUEUE_COMPLETER_NOWAIT || locked, &tmfd, false);
		if (r == TM_Ok)
			break;
		if (r == TM_SelfModified || (r == TM_Deleted && !IsolationUsesXactSnapshot()))
		{
			match = LIVE_OTHER;
			break;
		}
		/* TM_BeingModified (NOWAIT only): held, perhaps by this transaction */
		if (r != TM_BeingModified && (r != TM_Updated || IsolationUsesXactSnapshot()))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent %s",
							r == TM_Deleted ? "delete" : "update")));
		r = table_tuple_lock(c->live, &tid, c->snapshot, c->locked, c->cid, LockTupleExclusive,
							 c->mode == QUEUE_COMPLETER_NOWAIT ? LockWaitSkip : LockWaitBlock,
							 TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		if (r == TM_WouldBlock)
		{
			out->busy = tid;
			return QUEUE_DIRECT_BUSY;
		}
		if (r != TM_Ok)
		{
			match = LIVE_OTHER;
			break;
		}
		cur = c->locked;
		locked = true;
		match = match_item(cur, qname, item_id, token);
	}
	if (match != LIVE_MATCH)
		return match == LIVE_STATEMENT ? QUEUE_DIRECT_STATEMENT : QUEUE_DIRECT_NONE;

	write_history(c, cur, result, result_null);
	out->key_null = LN(cur, LC_DEDUP_KEY);
	out->key = out->key_null ? (Datum) 0 : datumCopy(LV(cur, LC_DEDUP_KEY), false, -1);
	out->attempts = DatumGetInt32(LV(cur, LC_ATTEMPT));
	out->worker = LN(cur, LC_WORKER) ? NULL : TextDatumGetCString(LV(cur, LC_WORKER));
	out->cancel_requested = DatumGetInt64(LV(cur, LC_LEASE_TOKEN)) < 0;
	return QUEUE_DIRECT_DONE;
}

void
queue_completer_end(QueueCompleter *c)
{
	index_endscan(c->scan);
	index_close(c->pkey, NoLock);
	ExecDropSingleTupleTableSlot(c->hist);
	ExecDropSingleTupleTableSlot(c->locked);
	ExecDropSingleTupleTableSlot(c->slot);
	table_close(c->part, NoLock);
	table_close(c->done_parent, NoLock);
	table_close(c->live, NoLock);
	UnregisterSnapshot(c->snapshot);
	pfree(c);
	/* what follows in this transaction sees the completions */
	CommandCounterIncrement();
}

/*
 * queue_completer_wait
 *		Wait until no other transaction holds the item version at tid (or
 *		its latest version), holding nothing of it afterwards: the version
 *		is locked in a subtransaction that is rolled back at once.  For a
 *		caller that let its items go because this one was busy.
 */
void
queue_completer_wait(ItemPointer tid)
{
	QueueSubxact sx;

	queue_subxact_begin(&sx);
	PG_TRY();
	{
		Relation	rel = table_open(queue_item_live_oid(), RowShareLock);
		TupleTableSlot *slot = table_slot_create(rel, NULL);
		Snapshot	snapshot = queue_lookup_snapshot();
		ItemPointerData t = *tid;
		TM_FailureData tmfd;

		(void) table_tuple_lock(rel, &t, snapshot, slot, GetCurrentCommandId(false),
								LockTupleExclusive, LockWaitBlock,
								TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		ExecDropSingleTupleTableSlot(slot);
		UnregisterSnapshot(snapshot);
		table_close(rel, NoLock);
	}
	PG_CATCH();
	{
		ReThrowError(queue_subxact_catch(&sx));
	}
	PG_END_TRY();
	queue_subxact_end(&sx, false);
}

/* One completion (see queue_completer_one). */
QueueDirectResult
queue_complete_direct(Datum qname, int64 item_id, int64 token, Datum result,
					  bool result_null, QueueCompleted *out)
{
	QueueCompleter *c = queue_completer_begin(QUEUE_COMPLETER_WAIT);
	QueueDirectResult res;

	if (c == NULL)
		return QUEUE_DIRECT_STATEMENT;
	res = queue_completer_one(c, qname, item_id, token, result, result_null, out);
	queue_completer_end(c);
	return res;
}
