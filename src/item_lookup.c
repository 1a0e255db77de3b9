/*-------------------------------------------------------------------------
 *
 * item_lookup.c
 *		Find an item of item_live by its primary key, and plan the hot
 *		path's statements so their shape never depends on statistics.
 *
 * complete, complete_batch and fail find one item by (queue_name,
 * item_id).  Left to the planner, that lookup is an index scan of the
 * primary key only while the statistics are right: statistics taken
 * while the queue was nearly empty (a drained queue in a table of many
 * pages) make the claim index look as good, and a scan of it reads every
 * entry of the queue (a complete went from 0.05 to 24 ms on a backlog of
 * 20,000).  So the item's TID is found here, through the primary key
 * itself, and the statement finds the row by TID (ctid = $n, a TID scan
 * whatever the statistics say).  The probe and the statement run on one
 * snapshot, so the version the probe found is the one the statement sees;
 * when it was changed after that snapshot, the statement follows its
 * update chain like any UPDATE or DELETE (a TID scan's TID qual is not
 * rechecked there), and its other quals (queue, item, lease token) are
 * rechecked on the latest version.
 *
 * On a Citus cluster the table here is the coordinator's shell, not the
 * shard; there the statements keep their plain lookup (distributed.c).
 *
 * src/item_lookup.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/xact.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "executor/tuptable.h"
#include "parser/parse_relation.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "queue.h"

/*
 * queue_lookup_snapshot
 *		A snapshot for item lookups and the statement that uses their
 *		TIDs, taken as SPI takes one for a statement that writes: after a
 *		command counter increment, so it sees what this transaction wrote
 *		so far.  Release it with UnregisterSnapshot.
 */
Snapshot
queue_lookup_snapshot(void)
{
	Snapshot	snapshot;

	CommandCounterIncrement();
	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	snapshot->curcid = GetCurrentCommandId(false);
	return snapshot;
}

/* OIDs of item_live and its claim index, until a relcache invalidation. */
static Oid	item_live_relid = InvalidOid;
static Oid	claim_index_relid = InvalidOid;

/* Relcache callback (called by queue.c's): the kept OIDs are looked up again. */
void
queue_item_lookup_relcache(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == item_live_relid || relid == claim_index_relid)
		item_live_relid = claim_index_relid = InvalidOid;
}

/* The OID of relation `name` of schema queue, kept in *cache. */
static Oid
kept_relid(const char *name, Oid *cache)
{
	if (!OidIsValid(*cache))
	{
		Oid			nsp = get_namespace_oid("queue", true);

		if (OidIsValid(nsp))
			*cache = get_relname_relid(name, nsp);
	}
	return *cache;
}

/*
 * queue_item_live_oid
 *		queue.item_live's OID (InvalidOid when it is missing), looked up by
 *		name once and then kept until the table's relcache entry is
 *		invalidated (dropped, altered).
 */
Oid
queue_item_live_oid(void)
{
	return kept_relid("item_live", &item_live_relid);
}

/* queue.item_live_claim_idx's OID, kept like queue_item_live_oid's. */
Oid
queue_claim_index_oid(void)
{
	return kept_relid("item_live_claim_idx", &claim_index_relid);
}

/* An open lookup: item_live, its primary key and a scan of it. */
struct QueueItemLookup
{
	Relation	heap;
	Relation	index;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	AttrNumber	token_attnum;
};

/*
 * queue_item_lookup_begin
 *		Open item_live and its primary key for lookups on snapshot; NULL
 *		when the table is missing.  End with queue_item_lookup_end.
 */
QueueItemLookup *
queue_item_lookup_begin(Snapshot snapshot)
{
	Oid			relid = queue_item_live_oid();
	QueueItemLookup *l;

	if (!OidIsValid(relid))
		return NULL;
	l = palloc(sizeof(QueueItemLookup));
	l->heap = table_open(relid, RowExclusiveLock);
	l->index = index_open(RelationGetPrimaryKeyIndex(l->heap), RowExclusiveLock);
	l->token_attnum = attnameAttNum(l->heap, "lease_token", false);
	l->slot = table_slot_create(l->heap, NULL);
	l->scan = index_beginscan(l->heap, l->index, snapshot, 2, 0);
	return l;
}

/*
 * queue_item_pkey_rescan
 *		Point scan, a scan of item_live's primary key, at (qname, item_id).
 */
void
queue_item_pkey_rescan(IndexScanDesc scan, Datum qname, int64 item_id)
{
	Relation	index = scan->indexRelation;
	ScanKeyData keys[2];

	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ, qname);
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[1], F_INT8EQ, Int64GetDatum(item_id));
	index_rescan(scan, keys, 2, NULL, 0);
}

/*
 * queue_item_lookup
 *		The TID of the version of item (qname, item_id) that the lookup's
 *		snapshot sees; false when there is none.  With lease_token > 0,
 *		only an item holding that lease (as abs(lease_token), like the
 *		statements' own check) is found.
 */
bool
queue_item_lookup(QueueItemLookup *l, Datum qname, int64 item_id, int64 lease_token,
				  ItemPointer tid)
{
	if (l == NULL)
		return false;
	queue_item_pkey_rescan(l->scan, qname, item_id);
	while (index_getnext_slot(l->scan, ForwardScanDirection, l->slot))
	{
		if (lease_token > 0)
		{
			bool		isnull;
			Datum		tok = slot_getattr(l->slot, l->token_attnum, &isnull);

			if (isnull || (DatumGetInt64(tok) != lease_token &&
						   DatumGetInt64(tok) != -lease_token))
				continue;
		}
		*tid = l->slot->tts_tid;
		return true;
	}
	return false;
}

void
queue_item_lookup_end(QueueItemLookup *l)
{
	if (l == NULL)
		return;
	index_endscan(l->scan);
	ExecDropSingleTupleTableSlot(l->slot);
	index_close(l->index, NoLock);
	table_close(l->heap, NoLock);
	pfree(l);
}

/* One lookup (see queue_item_lookup). */
bool
queue_item_tid(Snapshot snapshot, Datum qname, int64 item_id, int64 lease_token,
			   ItemPointer tid)
{
	QueueItemLookup *l = queue_item_lookup_begin(snapshot);
	bool		found = queue_item_lookup(l, qname, item_id, lease_token, tid);

	queue_item_lookup_end(l);
	return found;
}

/*
 * queue_fixed_plans
 *		Planner settings for a hot-path statement, until AtEOXact_GUC()
 *		with the level returned: no sequential scans, bitmap scans or
 *		sorts.  The hot path's statements are written so that one plan
 *		needs none of them (an ordered walk of the claim index, TID
 *		scans), and without them that plan is the only one without a
 *		penalty, whatever the statistics say: none, stale, or taken while
 *		the queue was nearly empty.  Where a statement has no alternative
 *		to a sort (the claim's result order), the penalty is the same for
 *		every plan and changes nothing.  The settings hold while the
 *		statement is planned (custom, generic, or again after an
 *		invalidation) and run.
 */
int
queue_fixed_plans(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

/*
 * queue_spi_exec_fixed
 *		Execute a kept plan on snapshot (from queue_lookup_snapshot), under
 *		queue_fixed_plans, and check its result code.
 */
void
queue_spi_exec_fixed(SPIPlanPtr plan, Datum *values, const char *nulls,
					 Snapshot snapshot, int expected, const char *what)
{
	int			level = queue_fixed_plans();
	int			rc;

	rc = SPI_execute_snapshot(plan, values, nulls, snapshot, InvalidSnapshot,
							  false, true, 0);
	AtEOXact_GUC(false, level);
	queue_spi_check(rc, expected, what);
}
