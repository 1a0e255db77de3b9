/*-------------------------------------------------------------------------
 *
 * index_entries.c
 *		Index entries of the rows the hot path writes directly (claim,
 *		complete and enqueue without statements).
 *
 * The executor's way (ExecOpenIndices, ExecInsertIndexTuples) builds every
 * index's IndexInfo and the ExprState of every partial index's predicate
 * again for each statement, and opens every index even when the row
 * belongs in two of nine.  For a one-row write that is most of the cost.
 * Here both are built once per table and kept until the table's next
 * relcache invalidation (an index created, dropped or changed sends one);
 * a row's predicates are checked first and only the indexes it belongs
 * in are opened.  Tables whose indexes need more than that (expressions,
 * exclusion constraints, deferred uniqueness) are left to the statements:
 * queue_index_entries_usable() says so before anything is written.
 *
 * src/index_entries.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/sysattr.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "nodes/bitmapset.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "queue.h"

/* One table's indexes, prepared. */
typedef struct IndexSet
{
	Oid			relid;			/* hash key */
	bool		valid;			/* false once the table's relcache entry was invalidated */
	bool		usable;			/* the indexes need nothing this file lacks */
	int			nindexes;
	Oid		   *oids;
	IndexInfo **infos;
	ExprState **preds;			/* partial indexes' predicates, else NULL */
	MemoryContext cxt;			/* all of the above */
} IndexSet;

static HTAB *index_sets = NULL;

/*
 * Relcache callback: the table's set (all of them on a reset) is to be
 * built again.  Only marked here: a direct write may be using the set
 * while an index_open of its own takes invalidations; the old set stays
 * whole until the next write starts and replaces it.
 */
void
queue_index_entries_relcache(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	IndexSet   *set;

	if (index_sets == NULL)
		return;
	hash_seq_init(&status, index_sets);
	while ((set = (IndexSet *) hash_seq_search(&status)) != NULL)
		if (relid == InvalidOid || set->relid == relid)
			set->valid = false;
}

/* heap's prepared index set (heap open and locked). */
static IndexSet *
index_set(Relation heap)
{
	Oid			relid = RelationGetRelid(heap);
	IndexSet	built;
	IndexSet   *set;
	bool		found;
	List	   *oids;
	ListCell   *lc;
	int			i = 0;
	MemoryContext old;

	if (index_sets == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(IndexSet);
		ctl.hcxt = CacheMemoryContext;
		index_sets = hash_create("queue index sets", 16, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	set = (IndexSet *) hash_search(index_sets, &relid, HASH_FIND, &found);
	if (found && set->valid)
		return set;

	/* built aside, entered only when complete (an error leaves nothing) */
	built.relid = relid;
	built.valid = true;
	built.cxt = AllocSetContextCreate(CurrentMemoryContext, "queue index set",
									  ALLOCSET_SMALL_SIZES);
	built.usable = true;
	old = MemoryContextSwitchTo(built.cxt);
	oids = RelationGetIndexList(heap);
	built.nindexes = list_length(oids);
	built.oids = palloc(sizeof(Oid) * Max(built.nindexes, 1));
	built.infos = palloc(sizeof(IndexInfo *) * Max(built.nindexes, 1));
	built.preds = palloc0(sizeof(ExprState *) * Max(built.nindexes, 1));
	foreach(lc, oids)
	{
		Relation	irel = index_open(lfirst_oid(lc), AccessShareLock);
		IndexInfo  *info = BuildIndexInfo(irel);

		if (info->ii_Expressions != NIL || info->ii_ExclusionOps != NULL ||
			(irel->rd_index->indisunique && !irel->rd_index->indimmediate))
			built.usable = false;
		if (info->ii_Predicate != NIL)
			built.preds[i] = ExecInitQual(info->ii_Predicate, NULL);
		built.oids[i] = lfirst_oid(lc);
		built.infos[i] = info;
		index_close(irel, AccessShareLock);
		i++;
	}
	MemoryContextSwitchTo(old);
	MemoryContextSetParent(built.cxt, CacheMemoryContext);
	set = (IndexSet *) hash_search(index_sets, &relid, HASH_ENTER, &found);
	if (found)
		MemoryContextDelete(set->cxt);	/* the stale set, no longer in use */
	*set = built;
	return set;
}

/*
 * queue_index_entries_usable
 *		Whether heap's indexes can be written by queue_insert_index_entries.
 */
bool
queue_index_entries_usable(Relation heap)
{
	return index_set(heap)->usable;
}

/*
 * insert_entries
 *		Insert the index entries of the row versions in slots (each with
 *		its tts_tid set), just inserted into heap or, with `updated`
 *		(attribute numbers offset by FirstLowInvalidHeapAttributeNumber, as
 *		in updatedCols), the new versions of an update that was not HOT.
 *		What ExecInsertIndexTuples does for such rows; each index is opened
 *		once for all of them, and only if one of them belongs in it.
 */
static void
insert_entries(Relation heap, TupleTableSlot **slots, int nslots, Bitmapset *updated)
{
	IndexSet   *set = index_set(heap);
	ExprContext *econtext = CreateStandaloneExprContext();

	if (!set->usable)
		elog(ERROR, "queue: indexes of \"%s\" changed during a direct write",
			 RelationGetRelationName(heap));
	for (int i = 0; i < set->nindexes; i++)
	{
		IndexInfo  *info = set->infos[i];
		Relation	irel = NULL;
		bool		unchanged = false;
		IndexUniqueCheck check = UNIQUE_CHECK_NO;

		if (updated != NULL)
		{
			/* the hint of index_unchanged_by_update(): no key column set */
			unchanged = true;
			for (int k = 0; k < info->ii_NumIndexAttrs; k++)
				if (bms_is_member(info->ii_IndexAttrNumbers[k] - FirstLowInvalidHeapAttributeNumber,
								  updated))
					unchanged = false;
		}
		for (int s = 0; s < nslots; s++)
		{
			Datum		values[INDEX_MAX_KEYS];
			bool		isnull[INDEX_MAX_KEYS];

			econtext->ecxt_scantuple = slots[s];
			if (set->preds[i] != NULL && !ExecQual(set->preds[i], econtext))
			{
				ResetExprContext(econtext);
				continue;
			}
			if (irel == NULL)
			{
				irel = index_open(set->oids[i], RowExclusiveLock);
				if (!irel->rd_index->indisready)
					break;
				check = irel->rd_index->indisunique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO;
			}
			FormIndexDatum(info, slots[s], NULL, values, isnull);
			(void) index_insert(irel, values, isnull, &slots[s]->tts_tid, heap, check,
								unchanged, info);
			ResetExprContext(econtext);
		}
		if (irel != NULL)
			index_close(irel, NoLock);
	}
	FreeExprContext(econtext, true);
}

/*
 * queue_insert_index_entries
 *		The index entries of one row version (see insert_entries).
 */
void
queue_insert_index_entries(Relation heap, TupleTableSlot *slot, Bitmapset *updated)
{
	insert_entries(heap, &slot, 1, updated);
}

/*
 * queue_insert_index_entries_many
 *		The index entries of nslots rows just inserted (see insert_entries).
 */
void
queue_insert_index_entries_many(Relation heap, TupleTableSlot **slots, int nslots)
{
	insert_entries(heap, slots, nslots, NULL);
}
