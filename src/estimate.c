/*-------------------------------------------------------------------------
 *
 * estimate.c
 *		Counting a key range of a btree index in constant time, for stats().
 *
 * stats() must stay cheap on a queue of ten million items, where counting
 * the claimable rows takes seconds.  The extension's indexes order each
 * queue's rows by a time (the claim index by priority and visible_at, the
 * history index by completed_at), so every state stats() reports is one
 * key range of an index.  This file counts such a range from the tree's
 * structure instead of its tuples:
 *
 *	1. descend to the range's first and last leaf pages (_bt_search), which
 *	   also yields the level-1 (parent) page and downlink of each;
 *	2. walk the level-1 pages between the two downlinks, which lists every
 *	   leaf page of the range (one level-1 page names hundreds of leaves);
 *	3. count the entries of the two end leaves exactly, and of the leaves
 *	   between: all of them up to 100, else an evenly spaced
 *	   sample of them times the number of leaves.
 *
 * A range of a few hundred thousand entries is so counted exactly, and ten
 * million entries cost a few hundred page reads.  The count is of index
 * entries, not of visible rows: entries of rows deleted but not yet
 * vacuumed (and not yet marked dead) and of uncommitted inserts count too,
 * so callers count small ranges with an ordinary MVCC scan and use this
 * above that.  The history is partitioned by time: its count is the sum
 * over the partitions' indexes.
 *
 * src/estimate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/nbtree.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_inherits.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_claim_range_estimate);
PG_FUNCTION_INFO_V1(queue_done_since_estimate);

#define ESTIMATE_MAX_LEAF_READS	100		/* middle leaves read, at most */
#define ESTIMATE_MAX_PARENTS	100000	/* level-1 pages walked, at most */

/* A search key on the first nkeys columns of the index. */
static BTScanInsert
range_key(Relation irel, Datum *values, int nkeys, bool nextkey)
{
	BTScanInsert key = _bt_mkscankey(irel, NULL);

	for (int i = 0; i < nkeys; i++)
	{
		key->scankeys[i].sk_argument = values[i];
		key->scankeys[i].sk_flags &= ~SK_ISNULL;
	}
	key->keysz = nkeys;
	key->anynullkeys = false;
	key->nextkey = nextkey;
	key->pivotsearch = false;
	key->scantid = NULL;
	return key;
}

/*
 * First offset on a leaf page whose entry is past the key: > key with
 * nextkey, >= key without.  maxoff + 1 when there is none.
 */
static OffsetNumber
leaf_bound(Relation irel, BTScanInsert key, Page page)
{
	BTPageOpaque opaque = BTPageGetOpaque(page);
	OffsetNumber low = P_FIRSTDATAKEY(opaque);
	OffsetNumber high = PageGetMaxOffsetNumber(page) + 1;
	int32		cmpval = key->nextkey ? 0 : 1;

	while (low < high)
	{
		OffsetNumber mid = low + (high - low) / 2;

		if (_bt_compare(irel, key, page, mid) >= cmpval)
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/* Entries (heap TIDs) between two offsets of a leaf page, dead ones aside. */
static double
leaf_entries(Page page, OffsetNumber from, OffsetNumber to)
{
	double		n = 0;

	for (OffsetNumber off = from; off < to; off++)
	{
		ItemId		iid = PageGetItemId(page, off);
		IndexTuple	itup;

		if (ItemIdIsDead(iid))
			continue;
		itup = (IndexTuple) PageGetItem(page, iid);
		n += BTreeTupleIsPosting(itup) ? BTreeTupleGetNPosting(itup) : 1;
	}
	return n;
}

static double
whole_leaf_entries(Relation irel, BlockNumber blkno)
{
	Buffer		buf = _bt_getbuf(irel, blkno, BT_READ);
	Page		page = BufferGetPage(buf);
	BTPageOpaque opaque = BTPageGetOpaque(page);
	double		n = 0;

	if (P_ISLEAF(opaque) && !P_IGNORE(opaque))
		n = leaf_entries(page, P_FIRSTDATAKEY(opaque), PageGetMaxOffsetNumber(page) + 1);
	_bt_relbuf(irel, buf);
	return n;
}

/*
 * The leaf pages strictly between the two downlinks (lo_parent, lo_off)
 * and (hi_parent, hi_off) of level-1 pages, in key order.
 */
static BlockNumber *
middle_leaves(Relation irel, BTStack lo, BTStack hi, int *count)
{
	int			cap = 1024;
	int			n = 0;
	BlockNumber *leaves = palloc(cap * sizeof(BlockNumber));
	BlockNumber blkno = lo->bts_blkno;

	for (int walked = 0; walked < ESTIMATE_MAX_PARENTS && blkno != P_NONE; walked++)
	{
		Buffer		buf;
		Page		page;
		BTPageOpaque opaque;
		OffsetNumber from;
		OffsetNumber to;
		bool		last = (blkno == hi->bts_blkno);

		/* NB: between pages, never while a buffer is locked */
		CHECK_FOR_INTERRUPTS();
		buf = _bt_getbuf(irel, blkno, BT_READ);
		page = BufferGetPage(buf);
		opaque = BTPageGetOpaque(page);
		from = P_FIRSTDATAKEY(opaque);
		to = PageGetMaxOffsetNumber(page);
		if (blkno == lo->bts_blkno)
			from = lo->bts_offset + 1;
		if (last)
			to = hi->bts_offset - 1;
		if (!P_IGNORE(opaque))
		{
			for (OffsetNumber off = from; off <= to; off++)
			{
				IndexTuple	itup = (IndexTuple) PageGetItem(page, PageGetItemId(page, off));

				if (n == cap)
				{
					cap *= 2;
					leaves = repalloc(leaves, cap * sizeof(BlockNumber));
				}
				leaves[n++] = BTreeTupleGetDownLink(itup);
			}
		}
		blkno = P_RIGHTMOST(opaque) ? P_NONE : opaque->btpo_next;
		_bt_relbuf(irel, buf);
		if (last)
			break;
	}
	*count = n;
	return leaves;
}

/*
 * btree_range_entries
 *		Index entries from the key lo (inclusive or not) to hi (inclusive
 *		or not), both on the first nkeys columns.
 */
static double
btree_range_entries(Relation irel, Datum *lo, bool lo_incl, Datum *hi, bool hi_incl, int nkeys)
{
	BTScanInsert lokey = range_key(irel, lo, nkeys, !lo_incl);
	BTScanInsert hikey = range_key(irel, hi, nkeys, hi_incl);
	Buffer		lobuf;
	Buffer		hibuf;
	BTStack		lostack;
	BTStack		histack;
	double		n;

	lostack = _bt_search(irel, lokey, &lobuf, BT_READ, NULL);
	if (!BufferIsValid(lobuf))
		return 0;				/* empty index */

	/* first leaf: from the lower bound to its end, or to the upper bound */
	{
		Page		page = BufferGetPage(lobuf);
		OffsetNumber from = leaf_bound(irel, lokey, page);
		OffsetNumber to = leaf_bound(irel, hikey, page);
		BlockNumber lo_blkno = BufferGetBlockNumber(lobuf);
		bool		ends_here = to <= PageGetMaxOffsetNumber(page) ||
			P_RIGHTMOST(BTPageGetOpaque(page));

		n = from < to ? leaf_entries(page, from, to) : 0;
		_bt_relbuf(irel, lobuf);
		if (ends_here)
		{
			_bt_freestack(lostack);
			return n;
		}

		histack = _bt_search(irel, hikey, &hibuf, BT_READ, NULL);
		if (BufferGetBlockNumber(hibuf) == lo_blkno)
		{
			/* the upper bound lies at this page's end: all counted */
			_bt_relbuf(irel, hibuf);
			_bt_freestack(lostack);
			_bt_freestack(histack);
			return n;
		}
	}

	/* last leaf: from its start to the upper bound */
	{
		Page		page = BufferGetPage(hibuf);
		BTPageOpaque opaque = BTPageGetOpaque(page);

		n += leaf_entries(page, P_FIRSTDATAKEY(opaque), leaf_bound(irel, hikey, page));
		_bt_relbuf(irel, hibuf);
	}

	/* the leaves between, named by the level-1 pages */
	if (lostack != NULL && histack != NULL)
	{
		int			nleaves;
		BlockNumber *leaves = middle_leaves(irel, lostack, histack, &nleaves);

		if (nleaves <= ESTIMATE_MAX_LEAF_READS)
		{
			for (int i = 0; i < nleaves; i++)
			{
				CHECK_FOR_INTERRUPTS();
				n += whole_leaf_entries(irel, leaves[i]);
			}
		}
		else
		{
			double		sampled = 0;

			for (int i = 0; i < ESTIMATE_MAX_LEAF_READS; i++)
			{
				CHECK_FOR_INTERRUPTS();
				sampled += whole_leaf_entries(irel,
											  leaves[(int) ((i + 0.5) * nleaves / ESTIMATE_MAX_LEAF_READS)]);
			}
			n += sampled / ESTIMATE_MAX_LEAF_READS * nleaves;
		}
		pfree(leaves);
	}
	_bt_freestack(lostack);
	_bt_freestack(histack);
	return n;
}

/* Entries of a range of one of the extension's indexes, by name. */
static int64
count_index_range(const char *index_name, Datum *lo, bool lo_incl,
				  Datum *hi, bool hi_incl, int nkeys)
{
	Oid			relid = get_relname_relid(index_name, get_namespace_oid("queue", false));
	Relation	irel;
	double		n;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("index queue.%s does not exist", index_name)));
	irel = index_open(relid, AccessShareLock);
	n = btree_range_entries(irel, lo, lo_incl, hi, hi_incl, nkeys);
	index_close(irel, AccessShareLock);
	return (int64) (n + 0.5);
}

/*
 * The btree index of a partition on exactly (queue_name, time_column),
 * without a predicate; InvalidOid when it has none.
 */
static Oid
queue_time_index(Relation rel, const char *time_column)
{
	Oid			relid = RelationGetRelid(rel);
	AttrNumber	queue_att = get_attnum(relid, "queue_name");
	AttrNumber	time_att = get_attnum(relid, time_column);
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	irel = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index ind = irel->rd_index;

		if (irel->rd_rel->relam == BTREE_AM_OID && ind->indisvalid &&
			ind->indnkeyatts == 2 &&
			ind->indkey.values[0] == queue_att && ind->indkey.values[1] == time_att &&
			heap_attisnull(irel->rd_indextuple, Anum_pg_index_indpred, NULL))
			found = RelationGetRelid(irel);
		index_close(irel, AccessShareLock);
		if (OidIsValid(found))
			break;
	}
	list_free(indexes);
	return found;
}

/*
 * Entries of a range of (queue_name, time_column) over every partition of
 * one of the extension's partitioned history tables: the sum of each
 * partition's index on those columns.  A partition whose times all lie
 * outside the range costs one descent.
 */
static int64
count_partitions_range(const char *table_name, const char *time_column,
					   Datum *lo, bool lo_incl, Datum *hi, bool hi_incl)
{
	Oid			relid = get_relname_relid(table_name, get_namespace_oid("queue", false));
	List	   *parts;
	ListCell   *lc;
	double		n = 0;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("table queue.%s does not exist", table_name)));
	parts = find_inheritance_children(relid, AccessShareLock);
	foreach(lc, parts)
	{
		Relation	rel = table_open(lfirst_oid(lc), AccessShareLock);
		Oid			idx = queue_time_index(rel, time_column);

		CHECK_FOR_INTERRUPTS();
		if (OidIsValid(idx))
		{
			Relation	irel = index_open(idx, AccessShareLock);

			n += btree_range_entries(irel, lo, lo_incl, hi, hi_incl, 2);
			index_close(irel, AccessShareLock);
		}
		table_close(rel, AccessShareLock);
	}
	list_free(parts);
	return (int64) (n + 0.5);
}

/*
 * queue._claim_range_estimate(queue_name text, priority int,
 *		lo timestamptz, lo_inclusive bool, hi timestamptz, hi_inclusive bool)
 *		returns bigint
 *
 * Entries of the claim index for one queue and priority whose visible_at
 * lies between lo and hi.
 */
Datum
queue_claim_range_estimate(PG_FUNCTION_ARGS)
{
	Datum		lo[3];
	Datum		hi[3];

	lo[0] = hi[0] = PointerGetDatum(PG_DETOAST_DATUM(PG_GETARG_DATUM(0)));
	lo[1] = hi[1] = PG_GETARG_DATUM(1);
	lo[2] = PG_GETARG_DATUM(2);
	hi[2] = PG_GETARG_DATUM(4);
	PG_RETURN_INT64(count_index_range("item_live_claim_idx",
									  lo, PG_GETARG_BOOL(3), hi, PG_GETARG_BOOL(5), 3));
}

/*
 * queue._done_since_estimate(queue_name text, since timestamptz) returns bigint
 *
 * Entries of the history's (queue_name, completed_at) indexes, over its
 * partitions, for one queue completed after since.
 */
Datum
queue_done_since_estimate(PG_FUNCTION_ARGS)
{
	Datum		lo[2];
	Datum		hi[2];

	lo[0] = hi[0] = PointerGetDatum(PG_DETOAST_DATUM(PG_GETARG_DATUM(0)));
	lo[1] = PG_GETARG_DATUM(1);
	hi[1] = TimestampTzGetDatum(DT_NOEND);
	PG_RETURN_INT64(count_partitions_range("item_done", "completed_at",
										   lo, false, hi, true));
}
