/*-------------------------------------------------------------------------
 *
 * queue.c
 *		Module entry point: GUCs and the SPI plan cache shared by the
 *		hot-path files.
 *
 * Plans are prepared on first use in a backend and kept for its lifetime
 * with SPI_keepplan; the plan cache revalidates them by itself after DDL on
 * the extension's tables.  Every statement takes its values as parameters.
 *
 * Every GUC of the extension is defined here, from the table queue_gucs;
 * the variables live with the code that reads them (notify.c, dequeue.c).
 *
 * src/queue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/bufmgr.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "queue.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(queue_caller);
PG_FUNCTION_INFO_V1(queue_worker_offline_after_seconds);
PG_FUNCTION_INFO_V1(queue_history_partition_width_seconds);

int			queue_max_payload_bytes = QUEUE_DEFAULT_MAX_PAYLOAD_BYTES;
int			queue_worker_offline_after = QUEUE_DEFAULT_WORKER_OFFLINE_AFTER;

/* Time span of one history partition (queue.history_partition_width). */
static int	queue_history_partition_width = QUEUE_DEFAULT_HISTORY_PARTITION_WIDTH;

/* Values of queue.notify_handoff (notify.c reads it). */
static const struct config_enum_entry notify_handoff_options[] = {
	{"auto", QUEUE_NOTIFY_HANDOFF_AUTO, false},
	{"always", QUEUE_NOTIFY_HANDOFF_ALWAYS, false},
	{"never", QUEUE_NOTIFY_HANDOFF_NEVER, false},
	{NULL, 0, false}
};

/* Values of queue.breaker_run_rule (schema/25_breaker.sql reads it). */
static const struct config_enum_entry breaker_run_rule_options[] = {
	{"off", 0, false},
	{"on", 1, false},
	{"false", 0, true},
	{"true", 1, true},
	{NULL, 0, false}
};

/* Whether the breaker also trips on a run of failures (queue.breaker_run_rule). */
static int	queue_breaker_run_rule = 0;

/* One setting of the extension: an integer, or an enum when options is set. */
typedef struct QueueGuc
{
	const char *name;			/* queue.<name> */
	const char *short_desc;
	const char *long_desc;		/* may be NULL */
	int		   *variable;		/* where the value lives */
	int			boot;			/* default */
	int			min;			/* integer limits */
	int			max;
	const struct config_enum_entry *options;	/* enum values, or NULL */
	GucContext	context;		/* who may set it */
	int			flags;			/* units */
} QueueGuc;

/* Every GUC of the extension, in one place; the README's table mirrors it. */
static const QueueGuc queue_gucs[] = {
	{"queue.max_payload_bytes",
		"Largest payload, in bytes of stored jsonb, that enqueue accepts.",
		NULL,
		&queue_max_payload_bytes, QUEUE_DEFAULT_MAX_PAYLOAD_BYTES, 1, MaxAllocSize,
		NULL, PGC_SUSET, 0},		/* a number of bytes, shown as one */
	{"queue.worker_offline_after",
		"Time without a sign of life after which a worker is offline.",
		"The sweeper then releases the worker's leases at once.",
		&queue_worker_offline_after, QUEUE_DEFAULT_WORKER_OFFLINE_AFTER, 1, INT_MAX,
		NULL, PGC_SUSET, GUC_UNIT_S},
	{"queue.claim_hint_threshold",
		"Index entries a claim may step over before dequeue skips the claim index's head.",
		"Past it, this session's next claims of the queue start where the last one "
		"found its rows, with a claim from the head every second; -1 never skips.",
		&queue_claim_hint_threshold, QUEUE_DEFAULT_CLAIM_HINT_THRESHOLD, -1, INT_MAX,
		NULL, PGC_USERSET, 0},
	{"queue.notify_handoff",
		"When enqueue notifications go through the notifier worker.",
		"auto: while the database's notifier runs or another transaction holds "
		"the notify lock; always: every time, starting a notifier if none runs; "
		"never: in the enqueuing transaction. "
		"Without queue in shared_preload_libraries it is always never.",
		&queue_notify_handoff, QUEUE_NOTIFY_HANDOFF_AUTO, 0, 0,
		notify_handoff_options, PGC_USERSET, 0},
	{"queue.breaker_run_rule",
		"Whether the circuit breaker also trips when its last breaker_min_samples outcomes all failed.",
		"off: only the failed fraction over breaker_threshold trips it; "
		"on: a run of failures trips it too, however many successes the window holds.",
		&queue_breaker_run_rule, 0, 0, 0,
		breaker_run_rule_options, PGC_SUSET, 0},
	{"queue.history_partition_width",
		"Time span of each partition of the history, the events and the failure log.",
		"maintain_history() creates partitions of this width ahead of time; "
		"a change applies to the partitions it creates next.",
		&queue_history_partition_width, QUEUE_DEFAULT_HISTORY_PARTITION_WIDTH, 60, INT_MAX,
		NULL, PGC_SUSET, GUC_UNIT_S},
};

void		_PG_init(void);

/*
 * Relcache callback of every per-backend cache: PostgreSQL has room for
 * ten such callbacks per backend, shared with other extensions (Citus
 * registers several), so the library takes one.
 */
static void
queue_relcache_callback(Datum arg, Oid relid)
{
	queue_config_relcache(arg, relid);
	queue_item_lookup_relcache(arg, relid);
	queue_index_entries_relcache(arg, relid);
	queue_claim_direct_relcache(arg, relid);
	queue_complete_direct_relcache(arg, relid);
	queue_enqueue_direct_relcache(arg, relid);
}

void
_PG_init(void)
{
	for (int i = 0; i < lengthof(queue_gucs); i++)
	{
		const QueueGuc *g = &queue_gucs[i];

		if (g->options)
			DefineCustomEnumVariable(g->name, g->short_desc, g->long_desc,
									 g->variable, g->boot, g->options,
									 g->context, g->flags, NULL, NULL, NULL);
		else
			DefineCustomIntVariable(g->name, g->short_desc, g->long_desc,
									g->variable, g->boot, g->min, g->max,
									g->context, g->flags, NULL, NULL, NULL);
	}
	MarkGUCPrefixReserved("queue");

	queue_notify_init();
	CacheRegisterRelcacheCallback(queue_relcache_callback, (Datum) 0);

	queue_scope_init();
	queue_flow_init();
	queue_distributed_init();
}

/*
 * queue_prepare_cached
 *		Return the plan kept in *slot, preparing and keeping it on first use.
 *
 * Must be called inside an SPI connection.
 */
SPIPlanPtr
queue_prepare_cached(SPIPlanPtr *slot, const char *sql, int nargs, Oid *argtypes)
{
	if (*slot == NULL)
	{
		/*
		 * NB: the generic plan on a plain server.  The statements are
		 * written so that it is the right one (index scans on the queue's
		 * own rows), and a custom plan per call would cost more than most of
		 * them run.  Under Citus a generic plan of a statement on a
		 * distributed table cannot be routed (its queue name is a
		 * parameter), so there each call plans with its values bound and
		 * Citus sends it to the one shard that holds the queue.
		 */
		SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes,
											  queue_citus_loaded() ?
											  CURSOR_OPT_CUSTOM_PLAN :
											  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "queue: preparing a statement failed: %s",
				 SPI_result_code_string(SPI_result));
		queue_spi_check(SPI_keepplan(plan), 0, "keeping a plan");
		*slot = plan;
	}
	return *slot;
}

/*
 * watch_item_live_growth
 *		Have every backend replan its statements on item_live once the
 *		table has grown fourfold since this backend last looked.
 *
 * The kept plans are generic, costed for the table as it was when they
 * were made.  A plan made on a nearly empty table (a fresh queue, or one
 * drained and analyzed) may filter a batch's ids instead of looking each
 * up, and stays so until an ANALYZE invalidates it: completing 100 items
 * on a 50,000-item queue then took 25 ms instead of 1.  Once a second the
 * table's size is checked (one lseek); past fourfold, a relcache
 * invalidation at commit makes every backend replan at the current size.
 */
static void
watch_item_live_growth(void)
{
	static TimestampTz next_check = 0;
	static BlockNumber seen_blocks = 0;
	TimestampTz now = GetCurrentTimestamp();
	Oid			relid;
	Relation	rel;
	BlockNumber nblocks;

	if (now < next_check || RecoveryInProgress())
		return;
	next_check = now + USECS_PER_SEC;

	relid = queue_item_live_oid();
	if (!OidIsValid(relid))
		return;
	rel = table_open(relid, AccessShareLock);
	nblocks = RelationGetNumberOfBlocks(rel);
	if (seen_blocks == 0 || nblocks < seen_blocks)
		seen_blocks = Max(nblocks, 1);
	else if (nblocks >= 4 * seen_blocks && nblocks >= 16)
	{
		CacheInvalidateRelcache(rel);
		seen_blocks = nblocks;
	}
	table_close(rel, AccessShareLock);
}

/*
 * queue_spi_check
 *		Fail unless an SPI call returned the code its caller expects.
 *
 * The one place that turns an unexpected SPI result into an error; the
 * message names the operation and SPI's own name of the code.  Not a user
 * error: a failing statement raises its own error before SPI returns.
 */
void
queue_spi_check(int rc, int expected, const char *what)
{
	if (rc != expected)
		elog(ERROR, "queue: %s failed: %s", what, SPI_result_code_string(rc));
}

/*
 * queue_spi_exec
 *		Execute a kept plan and check its result code.
 */
void
queue_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls,
			   bool read_only, long count, int expected, const char *what)
{
	queue_spi_check(SPI_execute_plan(plan, values, nulls, read_only, count),
					expected, what);
}

/*
 * queue_spi_count_latest
 *		Execute a kept SELECT that returns one row, reading everything
 *		committed so far (and this transaction's own writes) even in a
 *		transaction that reads through a transaction snapshot (REPEATABLE
 *		READ, SERIALIZABLE).  The counts caps and rates are judged by
 *		(leases of a stripe, a key or a worker, claims in a rate window) are
 *		taken under the lock that serialises them, after the previous
 *		holder committed; an older snapshot would not see its claims.
 *		Under READ COMMITTED every statement has a new snapshot anyway.
 */
void
queue_spi_count_latest(SPIPlanPtr plan, Datum *values, const char *what)
{
	int			rc;

	if (IsolationUsesXactSnapshot())
		rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(), InvalidSnapshot,
								  false, false, 1);
	else
		rc = SPI_execute_plan(plan, values, NULL, false, 1);
	queue_spi_check(rc, SPI_OK_SELECT, what);
	if (SPI_processed != 1)
		elog(ERROR, "queue: %s failed: " UINT64_FORMAT " rows instead of one",
			 what, SPI_processed);
}

/*
 * queue_spi_exec_one
 *		Execute a kept plan that must return exactly one row.
 */
void
queue_spi_exec_one(SPIPlanPtr plan, Datum *values, const char *nulls,
				   bool read_only, long count, int expected, const char *what)
{
	queue_spi_exec(plan, values, nulls, read_only, count, expected, what);
	if (SPI_processed != 1)
		elog(ERROR, "queue: %s failed: " UINT64_FORMAT " rows instead of one",
			 what, SPI_processed);
}

void
queue_spi_connect(void)
{
	queue_spi_check(SPI_connect(), SPI_OK_CONNECT, "connecting to SPI");
	queue_scope_push();
	watch_item_live_growth();
}

void
queue_spi_finish(void)
{
	queue_scope_pop();
	queue_spi_check(SPI_finish(), SPI_OK_FINISH, "finishing SPI");
}

/*
 * Internal subtransactions, run as PL/pgSQL runs an exception block:
 * queue_subxact_begin starts one and notes where the caller was;
 * queue_subxact_end keeps (commits) or rolls back the subtransaction and
 * returns there; queue_subxact_catch, in the PG_CATCH block, rolls it back
 * and returns the error, flushed, for the caller to rethrow or swallow.
 */
void
queue_subxact_begin(QueueSubxact *sx)
{
	sx->cxt = CurrentMemoryContext;
	sx->owner = CurrentResourceOwner;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(sx->cxt);
}

void
queue_subxact_end(const QueueSubxact *sx, bool keep)
{
	if (keep)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(sx->cxt);
	CurrentResourceOwner = sx->owner;
}

ErrorData *
queue_subxact_catch(const QueueSubxact *sx)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(sx->cxt);
	edata = CopyErrorData();
	FlushErrorState();
	queue_subxact_end(sx, false);
	return edata;
}

/*
 * queue._caller() returns oid
 *
 * The role that called into the extension: the user in effect outside any
 * SECURITY DEFINER function (the login role, or the role set with SET
 * ROLE).  The access checks of the SQL-language functions use it.
 */
Datum
queue_caller(PG_FUNCTION_ARGS)
{
	PG_RETURN_OID(GetOuterUserId());
}

/*
 * queue._worker_offline_after() returns int
 *
 * Current value of queue.worker_offline_after in seconds; calling it loads
 * the module, so the GUC's units are understood even in a fresh backend.
 */
Datum
queue_worker_offline_after_seconds(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(queue_worker_offline_after);
}

/*
 * queue._history_partition_width() returns int
 *
 * Current value of queue.history_partition_width in seconds (loading the
 * module, like queue._worker_offline_after).
 */
Datum
queue_history_partition_width_seconds(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(queue_history_partition_width);
}
