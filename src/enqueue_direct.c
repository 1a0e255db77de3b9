/*-------------------------------------------------------------------------
 *
 * enqueue_direct.c
 *		enqueue() of a plain item, and enqueue_batch() of plain items, done
 *		through the heap and the indexes without a statement.
 *
 * A plain item (no dedup key, no group, limit key or requires, below the
 * band of limited keys) is one INSERT whose executor start-up costs more
 * than the row.  Here the row is formed from the arguments and from
 * item_live's column defaults, read once per relcache entry: constants,
 * nextval() of a sequence and now() are what the table uses; any other
 * default, a CHECK constraint, a generated column or a trigger this file
 * does not know sends every enqueue back to the statement (enqueue.c),
 * as does a NOT NULL column the row would leave empty (the statement
 * then raises the error).  The INSERT triggers of item_live are flow
 * control's, whose WHEN clauses are false for a plain item.
 *
 * src/enqueue_direct.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "parser/parse_relation.h"
#include "rewrite/rewriteHandler.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "queue.h"

/* the columns enqueue sets (INSERT_SQL's column list, enqueue.c) */
typedef enum EnqCol
{
	EC_QUEUE,
	EC_PRIORITY,
	EC_VISIBLE_AT,
	EC_BASE_PRIORITY,
	EC_RUN_AT,
	EC_MAX_ATTEMPTS,
	EC_EXPIRES_AT,
	EC_CORRELATION_ID,
	EC_PAYLOAD,
	EC_ITEM_ID,					/* from its default: returned */
	NUM_ENQ_COLS
} EnqCol;

static const char *const enq_col_names[NUM_ENQ_COLS] = {
	"queue_name", "priority", "visible_at", "base_priority", "run_at",
	"max_attempts", "expires_at", "correlation_id", "payload", "item_id"
};

/* INSERT triggers of item_live: they fire only for items with a group or a
 * limit key, which are never written here */
static const char *const insert_triggers[] = {
	"item_live_flow_insert", "item_live_flow_inserted", "item_live_group_joined",
	"item_live_key_joined"
};

/* How a column not set by enqueue gets its value. */
typedef enum DefaultKind
{
	DEF_NULL,					/* no default */
	DEF_CONST,					/* a constant */
	DEF_NEXTVAL,				/* nextval() of a sequence */
	DEF_NOW						/* now(), the transaction's start */
} DefaultKind;

typedef struct ColumnDefault
{
	DefaultKind kind;
	bool		set_by_enqueue; /* one of enq_col_names but item_id */
	Datum		value;			/* DEF_CONST (in layout_cxt) */
	bool		isnull;
	Oid			seq;			/* DEF_NEXTVAL */
} ColumnDefault;

static Oid	layout_relid = InvalidOid;
static bool layout_valid = false;
static bool layout_usable = false;
static AttrNumber enq_attnum[NUM_ENQ_COLS];
static ColumnDefault *defaults = NULL;	/* per attribute */
static MemoryContext layout_cxt = NULL;

/* Relcache callback (called by queue.c's): item_live's layout and defaults are read again after a change. */
void
queue_enqueue_direct_relcache(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == layout_relid)
		layout_valid = false;
}

/* How the default expression expr is computed; false if not one we know. */
static bool
classify_default(Node *expr, Form_pg_attribute att, ColumnDefault *d)
{
	if (expr == NULL)
	{
		d->kind = DEF_NULL;
		return true;
	}
	if (IsA(expr, Const))
	{
		Const	   *c = (Const *) expr;

		d->kind = DEF_CONST;
		d->isnull = c->constisnull;
		d->value = c->constisnull ? (Datum) 0 :
			datumCopy(c->constvalue, att->attbyval, att->attlen);
		return c->consttype == att->atttypid;
	}
	if (IsA(expr, FuncExpr))
	{
		FuncExpr   *f = (FuncExpr *) expr;

		if (f->funcid == F_NOW && f->args == NIL && att->atttypid == TIMESTAMPTZOID)
		{
			d->kind = DEF_NOW;
			return true;
		}
		if (f->funcid == F_NEXTVAL && list_length(f->args) == 1 &&
			IsA(linitial(f->args), Const) && att->atttypid == INT8OID)
		{
			d->kind = DEF_NEXTVAL;
			d->seq = DatumGetObjectId(((Const *) linitial(f->args))->constvalue);
			return true;
		}
	}
	return false;
}

static void
load_layout(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	MemoryContext old;

	if (layout_cxt == NULL)
		layout_cxt = AllocSetContextCreate(TopMemoryContext, "queue enqueue layout",
										   ALLOCSET_SMALL_SIZES);
	MemoryContextReset(layout_cxt);
	old = MemoryContextSwitchTo(layout_cxt);
	layout_usable = !rel->rd_rel->relrowsecurity && rel->rd_rules == NULL &&
		(desc->constr == NULL || desc->constr->num_check == 0) &&
		queue_triggers_known(rel, TRIGGER_TYPE_INSERT, insert_triggers,
							 lengthof(insert_triggers));
	for (int c = 0; c < NUM_ENQ_COLS; c++)
	{
		enq_attnum[c] = attnameAttNum(rel, enq_col_names[c], false);
		if (enq_attnum[c] <= 0)
			layout_usable = false;
	}
	defaults = palloc0(sizeof(ColumnDefault) * desc->natts);
	for (int a = 0; a < desc->natts && layout_usable; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (att->attisdropped)
			continue;
		for (int c = 0; c < EC_ITEM_ID; c++)
			defaults[a].set_by_enqueue |= (enq_attnum[c] == a + 1);
		if (att->attgenerated || att->attidentity ||
			!classify_default(build_column_default(rel, a + 1), att, &defaults[a]))
			layout_usable = false;
	}
	MemoryContextSwitchTo(old);
	layout_relid = RelationGetRelid(rel);
	layout_valid = true;
}

/*
 * open_item_live
 *		item_live opened for a direct enqueue, or NULL when the statement
 *		must insert (see the header): flow control's band, a read-only
 *		transaction (the statement raises the error), or a layout, trigger
 *		or index this file does not know.
 */
static Relation
open_item_live(int32 priority)
{
	Relation	rel;

	if (priority >= QUEUE_FLOW_BAND || XactReadOnly || !OidIsValid(queue_item_live_oid()))
		return NULL;
	rel = table_open(queue_item_live_oid(), RowExclusiveLock);
	if (!layout_valid)
		load_layout(rel);
	if (!layout_usable || !queue_index_entries_usable(rel))
	{
		table_close(rel, NoLock);
		return NULL;
	}
	return rel;
}

/*
 * fill_row
 *		Store in slot the row of one plain item: item_live's defaults, then
 *		the columns enqueue sets over them, then a fresh item id.  False
 *		when a NOT NULL column would stay empty (the statement then raises
 *		the error).
 */
static bool
fill_row(TupleTableSlot *slot, TimestampTz now, Datum qname, int32 priority,
		 TimestampTz run_at, int32 max_attempts, bool has_expires, TimestampTz expires_at,
		 Datum correlation_id, bool correlation_null, Datum payload)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;
	Datum	   *v = slot->tts_values;
	bool	   *n = slot->tts_isnull;

	ExecClearTuple(slot);
	for (int a = 0; a < desc->natts; a++)
	{
		ColumnDefault *d = &defaults[a];

		n[a] = false;
		switch (d->kind)
		{
			case DEF_NULL:
				v[a] = (Datum) 0;
				n[a] = true;
				break;
			case DEF_CONST:
				v[a] = d->value;
				n[a] = d->isnull;
				break;
			case DEF_NOW:
				v[a] = TimestampTzGetDatum(now);
				break;
			case DEF_NEXTVAL:
				/* computed below, only for the columns left to their default */
				v[a] = (Datum) 0;
				n[a] = true;
				break;
		}
	}
#define SET(c, val, isnull) (v[enq_attnum[c] - 1] = (val), n[enq_attnum[c] - 1] = (isnull))
	SET(EC_QUEUE, qname, false);
	SET(EC_PRIORITY, Int32GetDatum(priority), false);
	SET(EC_VISIBLE_AT, TimestampTzGetDatum(Max(run_at, now)), false);
	SET(EC_BASE_PRIORITY, Int32GetDatum(priority), false);
	SET(EC_RUN_AT, TimestampTzGetDatum(run_at), false);
	SET(EC_MAX_ATTEMPTS, Int32GetDatum(max_attempts), false);
	SET(EC_EXPIRES_AT, TimestampTzGetDatum(expires_at), !has_expires);
	SET(EC_CORRELATION_ID, correlation_id, correlation_null);
	SET(EC_PAYLOAD, payload, false);
#undef SET
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (defaults[a].kind == DEF_NEXTVAL && !defaults[a].set_by_enqueue)
		{
			v[a] = Int64GetDatum(nextval_internal(defaults[a].seq, false));
			n[a] = false;
		}
		/* a NOT NULL column left empty: the statement raises the error */
		if (n[a] && att->attnotnull && !att->attisdropped)
			return false;
	}
	ExecStoreVirtualTuple(slot);
	return true;
}

/*
 * queue_enqueue_direct
 *		Insert a plain item (see the header); its id, or -1 when the
 *		statement must insert it (nothing was written).
 */
int64
queue_enqueue_direct(Datum qname, int32 priority, TimestampTz run_at, int32 max_attempts,
					 bool has_expires, TimestampTz expires_at, Datum correlation_id,
					 bool correlation_null, Datum payload)
{
	Relation	rel = open_item_live(priority);
	TupleTableSlot *slot;
	int64		item_id;

	if (rel == NULL)
		return -1;
	slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsVirtual);
	if (!fill_row(slot, GetCurrentTransactionStartTimestamp(), qname, priority, run_at,
				  max_attempts, has_expires, expires_at, correlation_id, correlation_null,
				  payload))
	{
		ExecDropSingleTupleTableSlot(slot);
		table_close(rel, NoLock);
		return -1;
	}
	item_id = DatumGetInt64(slot->tts_values[enq_attnum[EC_ITEM_ID] - 1]);

	table_tuple_insert(rel, slot, GetCurrentCommandId(true), 0, NULL);
	queue_insert_index_entries(rel, slot, NULL);
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	CommandCounterIncrement();
	return item_id;
}

/* Rows a batch hands to table_multi_insert at once (COPY's number). */
#define BATCH_SLOTS 1000

/*
 * queue_enqueue_direct_batch
 *		Insert n plain items with one set of arguments, as enqueue_batch's
 *		statement does without dedup keys or flow control: ids drawn in
 *		input order into ids[].  The rows go in with table_multi_insert, a
 *		thousand at a time, as COPY writes them.  False when the statement
 *		must insert them; nothing was written then.
 */
bool
queue_enqueue_direct_batch(Datum qname, int32 priority, TimestampTz run_at,
						   int32 max_attempts, bool has_expires, TimestampTz expires_at,
						   Datum *payloads, int n, int64 *ids)
{
	Relation	rel = open_item_live(priority);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	CommandId	cid = GetCurrentCommandId(true);
	TupleTableSlot **slots;
	MemoryContext rowcxt;
	int			nslots;

	if (rel == NULL)
		return false;
	nslots = Min(n, BATCH_SLOTS);
	slots = palloc(sizeof(TupleTableSlot *) * Max(nslots, 1));
	for (int i = 0; i < nslots; i++)
		slots[i] = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsVirtual);
	/* the first row tells whether a NOT NULL column stays empty */
	if (n > 0 && !fill_row(slots[0], now, qname, priority, run_at, max_attempts,
						   has_expires, expires_at, (Datum) 0, true, payloads[0]))
	{
		for (int i = 0; i < nslots; i++)
			ExecDropSingleTupleTableSlot(slots[i]);
		table_close(rel, NoLock);
		return false;
	}
	rowcxt = AllocSetContextCreate(CurrentMemoryContext, "queue enqueue batch rows",
								   ALLOCSET_DEFAULT_SIZES);
	for (int done = 0; done < n; done += nslots)
	{
		int			m = Min(nslots, n - done);
		MemoryContext old;

		CHECK_FOR_INTERRUPTS();
		for (int i = (done == 0 ? 1 : 0); i < m; i++)
		{
			if (!fill_row(slots[i], now, qname, priority, run_at, max_attempts,
						  has_expires, expires_at, (Datum) 0, true, payloads[done + i]))
				elog(ERROR, "queue: a row of an enqueue batch left a NOT NULL column empty");
		}
		for (int i = 0; i < m; i++)
			ids[done + i] = DatumGetInt64(slots[i]->tts_values[enq_attnum[EC_ITEM_ID] - 1]);
		old = MemoryContextSwitchTo(rowcxt);
		/* no BulkInsertState: its ring would push the new items' pages out */
		table_multi_insert(rel, slots, m, cid, 0, NULL);
		MemoryContextSwitchTo(old);
		queue_insert_index_entries_many(rel, slots, m);
		MemoryContextReset(rowcxt);
	}
	for (int i = 0; i < nslots; i++)
		ExecDropSingleTupleTableSlot(slots[i]);
	MemoryContextDelete(rowcxt);
	table_close(rel, NoLock);
	CommandCounterIncrement();
	return true;
}
