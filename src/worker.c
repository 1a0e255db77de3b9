/*-------------------------------------------------------------------------
 *
 * worker.c
 *		What the hot path writes about workers: signs of life, and the
 *		connection a lease is tracked by.
 *
 * Signs of life.  Every call a worker makes for one of its items
 * (extend_lease, checkpoint, complete, fail, release) counts as a sign of
 * life, like heartbeat and dequeue, so a bot that keeps extending a lease
 * is never offline.  Writing worker_registry.last_seen on every call would
 * turn each of them into two row writes; the row is written only when its
 * last_seen is more than SIGN_OF_LIFE_USECS old, a primary-key probe
 * otherwise.  The row is locked with SKIP LOCKED: when another session is
 * writing it, that session refreshes last_seen itself, and a report never
 * waits for (or deadlocks on) the worker row while it holds its item.
 * Under Citus worker_registry is a reference table: any UPDATE of it, even
 * one that changes no row, is a two-phase commit on every node, so there
 * the row is read first (the node's own copy) and written only when its
 * last_seen is queue_citus_seen_usecs() old, as dequeue refreshes it.
 *
 * Connections.  queue._session_key() names this backend's connection.
 * dequeue, extend_lease and checkpoint store it in item_live.lease_session;
 * heartbeat stores it in worker_registry.session.  When a worker's
 * heartbeat arrives on another connection than its previous one and that
 * one has gone away (queue._session_alive), leases last claimed or
 * extended on it may be claims whose reply was lost with it: heartbeat
 * stops renewing them (lease_session 0)
 * until the bot proves it knows one by extending or checkpointing it
 * (schema/60_fleet.sql, queue.heartbeat).  A bot that opens a connection
 * per call never claims on its heartbeat connection, so its leases stay
 * renewed.
 *
 * Under Citus a call delegated to the node holding its queue runs in a
 * connection the coordinator opened for the client's session, and a
 * heartbeat runs on the coordinator: the key is then Citus's global id of
 * the client's session on the coordinator (citus_backend_gpid(), the same
 * on every node serving that session), so the rule above holds for
 * delegated claims too.  A global id is its node and process id: a new
 * session that gets the process id of a closed one passes for it.
 *
 * src/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "utils/lsyscache.h"
#include "access/xact.h"
#include "storage/procarray.h"
#include "utils/backend_status.h"
#include "utils/timestamp.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_session_key_sql);
PG_FUNCTION_INFO_V1(queue_session_alive);

/* A Citus global session id is its node id times this plus a process id. */
#define CITUS_GPID_NODE_MULTIPLIER INT64CONST(10000000000)

/*
 * last_seen is rewritten by a sign of life at most this often (and at least
 * four times per queue.worker_offline_after).
 */
#define SIGN_OF_LIFE_USECS \
	Min(1 * USECS_PER_SEC, (int64) queue_worker_offline_after * USECS_PER_SEC / 4)

static SPIPlanPtr alive_plan = NULL;
static SPIPlanPtr stale_plan = NULL;

/* Under Citus: is the worker's last_seen older than $2? (a local read) */
#define STALE_SQL \
	"SELECT FROM queue.worker_registry x " \
	" WHERE x.worker" OP("=") "$1 " \
	"   AND x.last_seen" OP("<") "(pg_catalog.statement_timestamp()" OP("-") "$2)"

#define ALIVE_SQL \
	"UPDATE queue.worker_registry w " \
	"   SET last_seen = pg_catalog.statement_timestamp(), offline_handled_at = NULL " \
	"  FROM (SELECT x.worker FROM queue.worker_registry x " \
	"         WHERE x.worker" OP("=") "$1 " \
	"           AND x.last_seen" OP("<") "(pg_catalog.statement_timestamp()" OP("-") "$2) " \
	"           FOR UPDATE SKIP LOCKED) s " \
	" WHERE w.worker" OP("=") "s.worker"

/*
 * queue_session_key
 *		This backend's connection as a number no other connection of the
 *		cluster shares while it lives: its start time and process id; under
 *		Citus the global id of the client's session (see the header).
 */
int64
queue_session_key(void)
{
	static Oid	gpid_fn = InvalidOid;

	if (queue_citus_loaded())
	{
		if (!OidIsValid(gpid_fn))
			gpid_fn = LookupFuncName(list_make2(makeString("pg_catalog"),
												makeString("citus_backend_gpid")),
									 0, NULL, true);
		/* NB: absent until CREATE EXTENSION citus in this database */
		if (OidIsValid(gpid_fn))
			return DatumGetInt64(OidFunctionCall0(gpid_fn));
	}
	return (int64) (MyStartTimestamp ^ ((uint64) MyProcPid << 48));
}

/*
 * queue_schema_current
 *		Whether the installed tables are 0.2.0's (item_live.lease_session
 *		exists).  Between installing this library and ALTER EXTENSION queue
 *		UPDATE the 0.1.0 tables are in place, and the hot path must still
 *		work on them.  One syscache probe.
 */
bool
queue_schema_current(void)
{
	Oid			rel = queue_item_live_oid();

	return OidIsValid(rel) && get_attnum(rel, "lease_session") != InvalidAttrNumber;
}

/*
 * queue._session_key() returns bigint
 *
 * The calling connection's key (see queue_session_key).
 */
Datum
queue_session_key_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(queue_session_key());
}

/*
 * queue._session_alive(session bigint) returns boolean
 *
 * Is the connection with this key (queue_session_key) still open?  Without
 * Citus: some backend of the cluster has that start time and process id.
 * Under Citus the key is a global session id: a session of this node is
 * alive while a backend has its process id; one of another node cannot be
 * seen from here and counts as alive.
 */
Datum
queue_session_alive(PG_FUNCTION_ARGS)
{
	int64		key = PG_GETARG_INT64(0);
	int64		mine = queue_session_key();
	int			n;

	if (key == mine)
		PG_RETURN_BOOL(true);
	if (queue_citus_loaded() && mine >= CITUS_GPID_NODE_MULTIPLIER)
	{
		if (key / CITUS_GPID_NODE_MULTIPLIER != mine / CITUS_GPID_NODE_MULTIPLIER)
			PG_RETURN_BOOL(true);
		PG_RETURN_BOOL(BackendPidGetProc((int) (key % CITUS_GPID_NODE_MULTIPLIER)) != NULL);
	}
	n = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= n; i++)
	{
		LocalPgBackendStatus *local = pgstat_fetch_stat_local_beentry(i);
		PgBackendStatus *be;

		if (local == NULL)
			continue;
		be = &local->backendStatus;
		if (be->st_procpid > 0 &&
			(int64) (be->st_proc_start_timestamp ^ ((uint64) be->st_procpid << 48)) == key)
			PG_RETURN_BOOL(true);
	}
	PG_RETURN_BOOL(false);
}

/*
 * queue_worker_alive
 *		A sign of life of `worker` (text): refresh its last_seen unless it
 *		was refreshed within SIGN_OF_LIFE_USECS.  Inside an SPI connection.
 *		When this backend's worker cache already knows so, nothing is read:
 *		a bot that completes item after item pays one statement a second
 *		for its signs of life, not one per item.
 */
void
queue_worker_alive(Datum worker)
{
	Oid			argtypes[2] = {TEXTOID, INTERVALOID};
	Datum		values[2];
	Interval	every;
	TimestampTz now = GetCurrentStatementStartTimestamp();

	memset(&every, 0, sizeof(every));
	every.time = SIGN_OF_LIFE_USECS;
	if (queue_worker_seen_since(worker, now - every.time))
		return;
	values[0] = worker;
	values[1] = IntervalPGetDatum(&every);
	if (queue_citus_loaded())
	{
		every.time = queue_citus_seen_usecs();
		queue_spi_exec(queue_prepare_cached(&stale_plan, STALE_SQL, 2, argtypes),
					   values, NULL, false, 1, SPI_OK_SELECT, "reading a sign of life");
		if (SPI_processed == 0)
			return;
	}
	queue_spi_exec(queue_prepare_cached(&alive_plan, ALIVE_SQL, 2, argtypes),
				   values, NULL, false, 0, SPI_OK_UPDATE, "recording a sign of life");

	/*
	 * Written now, or found written within SIGN_OF_LIFE_USECS, or being
	 * written by another session (its row locked): fresh enough either way.
	 */
	queue_worker_seen(worker, now);
}
