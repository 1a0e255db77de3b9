/*-------------------------------------------------------------------------
 *
 * access.c
 *		Per-queue access (tenant isolation).
 *
 * The group roles queue_reader, queue_producer and queue_worker decide
 * which functions a role may call at all (EXECUTE grants).  On top of that
 * grant_queue() closes one access kind of one queue: while queue_grant has
 * a row of that kind for the queue, a caller who is not an admin needs such
 * a grant, directly or through role membership.  A producer or worker grant
 * includes reading the queue.  The queue_config row carries one flag per
 * kind, so an open queue costs no extra lookup.
 *
 * The caller is the outer user (GetOuterUserId), not the owner a SECURITY
 * DEFINER function runs as.
 *
 * src/access.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_check_access_sql);
PG_FUNCTION_INFO_V1(queue_can_read_sql);
PG_FUNCTION_INFO_V1(queue_may_access_sql);

static SPIPlanPtr grant_plan = NULL;

#define GRANT_SQL \
	"SELECT pg_catalog.pg_has_role($3, 'queue_admin', 'MEMBER') " \
	"    OR EXISTS (SELECT 1 FROM queue.queue_grant g " \
	"                WHERE g.queue_name OPERATOR(pg_catalog.=) $1 " \
	"                  AND g.access OPERATOR(pg_catalog.=) ANY ($2) " \
	"                  AND pg_catalog.pg_has_role($3, g.grantee, 'MEMBER'))"

static const char *
access_name(QueueAccess access)
{
	switch (access)
	{
		case QUEUE_ACCESS_READER:
			return "reader";
		case QUEUE_ACCESS_PRODUCER:
			return "producer";
		case QUEUE_ACCESS_WORKER:
			return "worker";
	}
	return "reader";
}

/*
 * Does the caller hold a grant that gives `access` on the queue?  Only asked
 * when that kind is closed on the queue.  Inside an SPI connection.
 */
static bool
caller_has_grant(const char *queue_name, QueueAccess access)
{
	Oid			argtypes[3] = {TEXTOID, TEXTARRAYOID, OIDOID};
	Datum		values[3];
	Datum		kinds[3];
	int			nkinds = 0;
	bool		isnull;
	Datum		result;

	kinds[nkinds++] = CStringGetTextDatum(access_name(access));
	if (access == QUEUE_ACCESS_READER)
	{
		kinds[nkinds++] = CStringGetTextDatum("producer");
		kinds[nkinds++] = CStringGetTextDatum("worker");
	}
	values[0] = CStringGetTextDatum(queue_name);
	values[1] = PointerGetDatum(construct_array(kinds, nkinds, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = ObjectIdGetDatum(GetOuterUserId());

	queue_spi_exec_one(queue_prepare_cached(&grant_plan, GRANT_SQL, 3, argtypes),
					   values, NULL, true, 1, SPI_OK_SELECT, "checking per-queue grants");
	result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return !isnull && DatumGetBool(result);
}

static inline bool
access_is_closed(const QueueConfig *cfg, QueueAccess access)
{
	switch (access)
	{
		case QUEUE_ACCESS_READER:
			return cfg->restrict_reader;
		case QUEUE_ACCESS_PRODUCER:
			return cfg->restrict_producer;
		case QUEUE_ACCESS_WORKER:
			return cfg->restrict_worker;
	}
	return false;
}

/*
 * queue_check_access
 *		Fail with 42501 unless the caller may use the queue for `access`.
 */
void
queue_check_access(const QueueConfig *cfg, QueueAccess access)
{
	if (!access_is_closed(cfg, access))
		return;
	if (caller_has_grant(cfg->queue_name, access))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for queue \"%s\"", cfg->queue_name),
			 errdetail("The queue admits only roles granted %s access to it.",
					   access_name(access)),
			 errhint("An admin can run queue.grant_queue('%s', <role>, '%s').",
					 cfg->queue_name, access_name(access))));
}

static QueueAccess
parse_access(text *t)
{
	char	   *s = text_to_cstring(t);

	if (strcmp(s, "reader") == 0)
		return QUEUE_ACCESS_READER;
	if (strcmp(s, "producer") == 0)
		return QUEUE_ACCESS_PRODUCER;
	if (strcmp(s, "worker") == 0)
		return QUEUE_ACCESS_WORKER;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid access \"%s\"", s),
			 errhint("Valid access kinds are 'producer', 'worker' and 'reader'.")));
	return QUEUE_ACCESS_READER;	/* keep compiler quiet */
}

/*
 * queue._check_access(queue_name text, access text) returns void
 *
 * Validates the name, fails with 42704 for an unknown queue and with 42501
 * when the caller lacks `access`.  For the PL/pgSQL functions.
 */
Datum
queue_check_access_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	QueueAccess access;
	QueueConfig cfg;

	queue_check_not_null(PG_ARGISNULL(1), "access");
	access = parse_access(PG_GETARG_TEXT_PP(1));
	queue_spi_connect();
	queue_load_config(name, &cfg);
	queue_check_access(&cfg, access);
	queue_spi_finish();
	PG_RETURN_VOID();
}

/*
 * queue._may_access(queue_name text, access text) returns boolean
 *
 * Whether the caller has `access` to the queue: the answer
 * queue._check_access would give, without failing on 42501, and false for a
 * queue that does not exist (heartbeat goes over queues one of which may
 * have been dropped while it waited for that queue's lock).
 */
Datum
queue_may_access_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	QueueAccess access;
	QueueConfig cfg;
	bool		result;

	queue_check_not_null(PG_ARGISNULL(1), "access");
	access = parse_access(PG_GETARG_TEXT_PP(1));
	queue_spi_connect();
	result = queue_find_config(name, &cfg) &&
		(!access_is_closed(&cfg, access) || caller_has_grant(name, access));
	queue_spi_finish();
	PG_RETURN_BOOL(result);
}

/*
 * queue._can_read(queue_name text) returns boolean
 *
 * Whether the caller may see the queue's rows; used by the views and the
 * row-level security policies.  The rows of a queue that does not exist
 * (the queue_dropped event of a dropped queue, leftovers sweep has not yet
 * removed) are for admins only: a tenant must not read what another
 * tenant's dropped queue left.  The answer for the last queue asked is kept
 * for the rest of the query, since rows of one queue come in runs.
 */
/*
 * Last answer of _can_read within one command: views call it once per row.
 * The answer is for one caller and one command: a PL/pgSQL expression keeps
 * its function call state for the whole transaction, across SET ROLE and
 * grant_queue / revoke_queue (which advance the command counter).
 */
typedef struct CanReadMemo
{
	char		queue_name[NAMEDATALEN];
	Oid			caller;
	CommandId	command;
	bool		result;
} CanReadMemo;

Datum
queue_can_read_sql(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr flag_plan = NULL;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	bool		closed = true;	/* unknown queue: admins only */
	bool		result = true;
	bool		isnull;
	char	   *name;
	CanReadMemo *memo = (CanReadMemo *) fcinfo->flinfo->fn_extra;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(true);
	name = TextDatumGetCString(PG_GETARG_DATUM(0));
	if (memo != NULL && strncmp(memo->queue_name, name, NAMEDATALEN) == 0 &&
		memo->caller == GetOuterUserId() &&
		memo->command == GetCurrentCommandId(false))
		PG_RETURN_BOOL(memo->result);

	values[0] = PG_GETARG_DATUM(0);
	queue_spi_connect();
	queue_spi_exec(queue_prepare_cached(&flag_plan,
										"SELECT restrict_reader FROM queue.queue_config "
										" WHERE queue_name OPERATOR(pg_catalog.=) $1",
										1, argtypes),
				   values, NULL, true, 1, SPI_OK_SELECT, "reading queue settings");
	if (SPI_processed == 1)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		closed = !isnull && DatumGetBool(d);
	}
	if (closed)
		result = caller_has_grant(name, QUEUE_ACCESS_READER);
	queue_spi_finish();

	if (strlen(name) < NAMEDATALEN)
	{
		if (memo == NULL)
			memo = fcinfo->flinfo->fn_extra =
				MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(CanReadMemo));
		strlcpy(memo->queue_name, name, NAMEDATALEN);
		memo->caller = GetOuterUserId();
		memo->command = GetCurrentCommandId(false);
		memo->result = result;
	}
	PG_RETURN_BOOL(result);
}
