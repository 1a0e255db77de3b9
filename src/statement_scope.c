/*-------------------------------------------------------------------------
 *
 * statement_scope.c
 *		The setting the extension's own statements run in: a search path of
 *		pg_catalog alone, no JIT compilation, and a statement clock that
 *		does not lag behind the transaction.
 *
 * The hot-path C functions (enqueue, dequeue, complete, fail, ...) used to
 * pin both with SET clauses in their SQL declarations.  PostgreSQL applies
 * such clauses on every call through the GUC machinery, and undoing them
 * walks every GUC of the server: about 9,000 instructions per call, a
 * sixth of a direct complete.  Instead, every SPI connection of the
 * extension (queue_spi_connect) opens a scope here:
 *
 * - an override search path of pg_catalog alone, without pg_temp.  The
 *   kept plans are revalidated against the search path in force, so they
 *   are parsed under this path whatever the caller's is; every statement
 *   qualifies its names besides (queue.h).
 * - a planner hook that clears the JIT flags of whatever is planned inside
 *   a scope: the generic claim plan is costed for the whole backlog, and
 *   compiling it cost 20 ms a call at 10 million items.
 *
 * - the statement's start (statement_timestamp(), which leases run from)
 *   moved to now when it is older than the transaction's start: inside a
 *   procedure that commits, every transaction after the first starts later
 *   than the CALL, whose start statement_timestamp() keeps, and a lease
 *   taken there would run from the CALL (already over for a worker loop
 *   that has run for longer than a lease).
 *
 * An error unwinds the scopes of the (sub)transaction it aborts, like the
 * override search path itself (AtEOSubXact_Namespace).
 *
 * Besides, every call of a function of the extension runs in origin
 * replication mode (scope_fmgr_hook): the triggers that keep its own
 * bookkeeping (ordered groups, per-key caps) are origin triggers, which a
 * session with session_replication_role = replica would skip inside its
 * calls.
 *
 * src/statement_scope.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "jit/jit.h"
#include "optimizer/planner.h"
#include "utils/lsyscache.h"

#include "queue.h"

/* Scopes open, and the transaction nesting level each was opened at. */
#define SCOPE_MAX_DEPTH 64
static int	scope_depth = 0;
static int	scope_levels[SCOPE_MAX_DEPTH];

static planner_hook_type prev_planner_hook = NULL;
static fmgr_hook_type prev_fmgr_hook = NULL;

/*
 * Calls in progress that pass fmgr_security_definer (every SECURITY DEFINER
 * function or one with SET clauses, of any extension), and the depth of the
 * call of ours that switched replica mode off, 0 if none did.
 */
static int	hooked_depth = 0;
static int	replica_switch_depth = 0;

/*
 * queue_scope_push
 *		Open a scope: pg_catalog as the whole search path, no JIT.
 */
void
queue_scope_push(void)
{
	OverrideSearchPath path = {0};

	if (scope_depth >= SCOPE_MAX_DEPTH)
		ereport(ERROR,
				(errcode(ERRCODE_STATEMENT_TOO_COMPLEX),
				 errmsg("queue functions nested more than %d deep", SCOPE_MAX_DEPTH)));
	path.schemas = NIL;
	path.addCatalog = true;
	path.addTemp = false;
	PushOverrideSearchPath(&path);
	if (GetCurrentStatementStartTimestamp() < GetCurrentTransactionStartTimestamp())
		SetCurrentStatementStartTimestamp();
	scope_levels[scope_depth++] = GetCurrentTransactionNestLevel();
}

/*
 * queue_scope_pop
 *		Close the innermost scope.
 */
void
queue_scope_pop(void)
{
	Assert(scope_depth > 0);
	PopOverrideSearchPath();
	scope_depth--;
}

/*
 * Drop the scopes an aborted (sub)transaction leaves open; PostgreSQL
 * drops their override search paths itself.
 */
static void
scope_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		scope_depth = 0;
	/* every hooked call has ended by now; never leave the mode switched */
	if (replica_switch_depth > 0)
		SessionReplicationRole = SESSION_REPLICATION_ROLE_REPLICA;
	hooked_depth = 0;
	replica_switch_depth = 0;
}

/*
 * scope_fmgr_hook
 *		Run a call of the extension's functions made in replica mode
 *		(session_replication_role = replica: a replication or restore tool's
 *		role) in origin mode, and go back to replica when it returns or fails.
 *
 * Every function of the extension that a role may call is SECURITY DEFINER,
 * so each call passes fmgr_security_definer, which calls this hook at its
 * start, end and abort.  Only the outermost call of ours switches; the calls
 * it makes find origin mode already.  Setting the variable directly, not
 * through the GUC, skips the plan cache flush the setting's assign hook
 * does for rules: the extension's tables have none, and a view's SELECT
 * rule applies in every mode.  The cost outside replica mode is a compare.
 */
static void
scope_fmgr_hook(FmgrHookEventType event, FmgrInfo *flinfo, Datum *private)
{
	if (prev_fmgr_hook != NULL)
		(*prev_fmgr_hook) (event, flinfo, private);
	switch (event)
	{
		case FHET_START:
			hooked_depth++;
			if (replica_switch_depth == 0 &&
				SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
			{
				Oid			nsp = get_namespace_oid("queue", true);

				if (OidIsValid(nsp) && get_func_namespace(flinfo->fn_oid) == nsp)
				{
					replica_switch_depth = hooked_depth;
					SessionReplicationRole = SESSION_REPLICATION_ROLE_ORIGIN;
				}
			}
			break;
		case FHET_END:
		case FHET_ABORT:
			if (replica_switch_depth > 0 && replica_switch_depth == hooked_depth)
			{
				SessionReplicationRole = SESSION_REPLICATION_ROLE_REPLICA;
				replica_switch_depth = 0;
			}
			if (hooked_depth > 0)
				hooked_depth--;
			break;
	}
}

static void
scope_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			level;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	level = GetCurrentTransactionNestLevel();
	while (scope_depth > 0 && scope_levels[scope_depth - 1] >= level)
		scope_depth--;
}

/*
 * scope_planner
 *		Plan as usual; inside a scope, without JIT.
 */
static PlannedStmt *
scope_planner(Query *parse, const char *query_string, int cursorOptions,
			  ParamListInfo boundParams)
{
	PlannedStmt *result;

	if (prev_planner_hook != NULL)
		result = prev_planner_hook(parse, query_string, cursorOptions, boundParams);
	else
		result = standard_planner(parse, query_string, cursorOptions, boundParams);
	if (scope_depth > 0)
		result->jitFlags = PGJIT_NONE;
	return result;
}

/*
 * queue_scope_init
 *		From _PG_init.
 */
void
queue_scope_init(void)
{
	prev_planner_hook = planner_hook;
	planner_hook = scope_planner;
	prev_fmgr_hook = fmgr_hook;
	fmgr_hook = scope_fmgr_hook;
	RegisterXactCallback(scope_xact_callback, NULL);
	RegisterSubXactCallback(scope_subxact_callback, NULL);
}
