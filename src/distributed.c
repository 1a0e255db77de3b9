/*-------------------------------------------------------------------------
 *
 * distributed.c
 *		What the hot path does differently on a Citus cluster.
 *
 * On a Citus cluster (see queue.distribute()) the tables holding items
 * are distributed by queue name, and a statement on them must name its
 * queue for Citus to send it to the one node holding that queue.  The
 * kept generic plans the hot path uses on a plain server have the queue
 * name as a parameter, which Citus cannot route ("could not create
 * distributed plan"), so under Citus queue_prepare_cached keeps plans
 * that are planned for each call with its values bound: Citus then routes
 * each statement to the queue's shard, executed locally when the call was
 * delegated to the node holding it.  Measured on loopback (README,
 * "Scale-out"), planning per call costs less than the round trip it sits
 * behind; on a plain server nothing changes.
 *
 * Citus also refuses volatile functions in an UPDATE of a distributed
 * table: the claim takes its lease token as a parameter there, drawn here
 * from this node's sequence (each node draws from its own range, see
 * queue._prepare_node()).
 *
 * And Citus 12.1 crashes the backend (a NULL pointer hashed) when it
 * delegates a call whose distribution argument is NULL, before the called
 * function can refuse it: SELECT queue.dequeue(NULL, 'w') took the whole
 * coordinator into crash recovery.  Under Citus a planner hook, installed
 * after Citus's and so run before it, raises the queue's own error for a
 * call of a queue function whose queue_name is NULL.
 *
 * src/distributed.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/planner.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "queue.h"

static SPIPlanPtr token_plan = NULL;
static planner_hook_type prev_planner_hook = NULL;

#define TOKEN_SQL \
	"SELECT pg_catalog.nextval('queue.lease_token_seq'::pg_catalog.regclass)"

/*
 * queue_citus_loaded
 *		Whether this server runs Citus; decided once per backend.
 *
 * Citus is a preloaded library, so what a backend finds at its first
 * statement holds for its life.  On a plain server this costs one lookup
 * per backend and changes nothing else.
 */
bool
queue_citus_loaded(void)
{
	static int	citus_loaded = -1;

	if (citus_loaded < 0)
		citus_loaded = GetConfigOption("citus.version", true, false) != NULL ? 1 : 0;
	return citus_loaded == 1;
}

/*
 * queue_claim_token
 *		A fresh lease token for one claim statement under Citus.
 *
 * Must be called inside an SPI connection.
 */
int64
queue_claim_token(void)
{
	bool		isnull;
	Datum		d;

	if (SPI_execute_plan(queue_prepare_cached(&token_plan, TOKEN_SQL, 0, NULL),
						 NULL, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "queue: drawing a lease token failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return DatumGetInt64(d);
}

/* Is node a call of a queue function with a NULL queue_name first? */
static bool
null_queue_name_call(Node *node, ParamListInfo params)
{
	FuncExpr   *func;
	Node	   *arg;
	HeapTuple	proctup;
	Oid		   *argtypes;
	char	  **argnames = NULL;
	char	   *argmodes;
	bool		result;

	if (node == NULL || !IsA(node, FuncExpr))
		return false;
	func = (FuncExpr *) node;
	if (func->args == NIL)
		return false;
	arg = strip_implicit_coercions(linitial(func->args));
	if (IsA(arg, Const))
	{
		if (!((Const *) arg)->constisnull)
			return false;
	}
	else if (IsA(arg, Param) && ((Param *) arg)->paramkind == PARAM_EXTERN &&
			 params != NULL && ((Param *) arg)->paramid > 0 &&
			 ((Param *) arg)->paramid <= params->numParams)
	{
		ParamExternData workspace;
		ParamExternData *prm;
		int			id = ((Param *) arg)->paramid;

		prm = params->paramFetch != NULL ?
			params->paramFetch(params, id, false, &workspace) :
			&params->params[id - 1];
		if (prm == NULL || !prm->isnull)
			return false;
	}
	else
		return false;

	if (get_func_namespace(func->funcid) != get_namespace_oid("queue", true))
		return false;
	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(func->funcid));
	if (!HeapTupleIsValid(proctup))
		return false;
	result = get_func_arg_info(proctup, &argtypes, &argnames, &argmodes) > 0 &&
		argnames != NULL && strcmp(argnames[0], "queue_name") == 0;
	ReleaseSysCache(proctup);
	return result;
}

/*
 * queue_planner
 *		Refuse, before Citus plans it, a top-level call of a queue function
 *		with a NULL queue name (see the file header).
 */
static PlannedStmt *
queue_planner(Query *parse, const char *query_string, int cursorOptions,
			  ParamListInfo boundParams)
{
	if (parse->commandType == CMD_SELECT)
	{
		ListCell   *lc;

		foreach(lc, parse->targetList)
		{
			if (null_queue_name_call((Node *) ((TargetEntry *) lfirst(lc))->expr, boundParams))
				queue_check_name((Datum) 0, true);
		}
		foreach(lc, parse->rtable)
		{
			RangeTblEntry *rte = (RangeTblEntry *) lfirst(lc);
			ListCell   *fc;

			if (rte->rtekind != RTE_FUNCTION)
				continue;
			foreach(fc, rte->functions)
			{
				if (null_queue_name_call(((RangeTblFunction *) lfirst(fc))->funcexpr, boundParams))
					queue_check_name((Datum) 0, true);
			}
		}
	}
	if (prev_planner_hook != NULL)
		return prev_planner_hook(parse, query_string, cursorOptions, boundParams);
	return standard_planner(parse, query_string, cursorOptions, boundParams);
}

/*
 * queue_distributed_init
 *		Under Citus, put queue_planner in front of Citus's planner.  Called
 *		by _PG_init; Citus must come first in shared_preload_libraries (it
 *		insists on it), so its hook is in place already.
 */
void
queue_distributed_init(void)
{
	if (!queue_citus_loaded())
		return;
	prev_planner_hook = planner_hook;
	planner_hook = queue_planner;
}
