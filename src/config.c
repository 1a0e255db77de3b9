/*-------------------------------------------------------------------------
 *
 * config.c
 *		One queue's settings and state for a hot-path call, from a
 *		per-backend cache.
 *
 * Settings are read from queue.queue_config once and kept in a hash table
 * keyed by queue name.  Any change to queue_config, worker_registry's
 * gates or maintenance_window fires a statement trigger
 * (queue._invalidate_cache) that queues a relcache invalidation of
 * queue_config; every backend drops its cache when that message arrives.
 * Each call first accepts pending invalidation messages, so a pause, an
 * alter_queue or a tripped breaker committed by another session is seen
 * by the very next call, as if the row had been read afresh.
 *
 * Time-dependent state (has the breaker's cooldown passed, did the probe's
 * lease run out) is kept as timestamps and judged at each call.  A
 * worker's maintenance windows are kept as the answer for now and the
 * instant it may next change, so that any number of windows costs one
 * entry and one read per window boundary.
 *
 * The queue lock: every call that loads a queue's settings holds the
 * queue's lock in share mode until its transaction ends; drop_queue, and
 * whatever removes the rows of a queue that no longer exists, holds it in
 * exclusive mode.  So a queue is never dropped under a call that is adding
 * its rows (drop_queue waits for the call's transaction and then removes
 * them), and a call that waited for a drop finds the queue gone (42704).
 * The lock has a tag of its own (an advisory tag of a class the SQL
 * functions cannot name), so no role can take it outside the extension.
 *
 * src/config.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/sinval.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "access/xact.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_invalidate_cache);
PG_FUNCTION_INFO_V1(queue_lock_queue_sql);
PG_FUNCTION_INFO_V1(queue_try_lock_sweep_sql);
PG_FUNCTION_INFO_V1(queue_lock_breaker_sql);
PG_FUNCTION_INFO_V1(queue_try_lock_alert_sql);

/*
 * Class of the queue lock's advisory tag (field4): pg_advisory_lock and its
 * kin use 1 and 2 only, so SQL cannot take or wait for this lock.
 */
#define QUEUE_LOCKTAG_CLASS		0x5155

/* A cached queue: its settings and the timestamps of its breaker state. */
typedef struct ConfigEntry
{
	char		queue_name[NAMEDATALEN];	/* hash key */
	QueueConfig cfg;			/* settings; cfg.queue_name unused here */
	bool		has_cooldown_end;	/* breaker open: when may it probe? */
	TimestampTz cooldown_end;
	bool		has_probe_expiry;	/* probing: when does the probe's lease end? */
	TimestampTz probe_expires_at;
} ConfigEntry;

/*
 * A cached worker: the gates dequeue applies to it.  Of its maintenance
 * windows only the answer for now is kept, with the instant it may change
 * (the next start or end): any number of windows costs one entry, and the
 * row is read again once that instant has come.
 */
#define WORKER_KEYLEN 128
typedef struct WorkerEntry
{
	char		worker[WORKER_KEYLEN];	/* hash key */
	QueueWorkerGates gates;		/* draining, capacity, maintenance, last_seen */
	TimestampTz valid_from;		/* the time the row was read at */
	TimestampTz valid_until;	/* gates.in_maintenance may change from here */
} WorkerEntry;

static HTAB *config_cache = NULL;
static HTAB *worker_cache = NULL;
static SPIPlanPtr worker_plan = NULL;

/*
 * The worker's gates as of now(): inside a window, and when that answer
 * may next change (the earliest end of a window around now or start of a
 * later one; NULL when no window lies ahead).
 */
#define WORKER_SQL \
	"SELECT w.draining, w.capacity IS NOT NULL, w.last_seen, " \
	"       EXISTS (SELECT FROM queue.maintenance_window m " \
	"                WHERE m.worker" OP("=") "$1 AND m.starts_at" OP("<=") "pg_catalog.now() " \
	"                  AND m.ends_at" OP(">") "pg_catalog.now()), " \
	"       (SELECT pg_catalog.min(CASE WHEN m.starts_at" OP(">") "pg_catalog.now() " \
	"                                   THEN m.starts_at ELSE m.ends_at END) " \
	"          FROM queue.maintenance_window m " \
	"         WHERE m.worker" OP("=") "$1 AND m.ends_at" OP(">") "pg_catalog.now()), " \
	"       pg_catalog.now() " \
	"  FROM queue.worker_registry w WHERE w.worker" OP("=") "$1"
static Oid	anchor_relid = InvalidOid;	/* queue.queue_config */
static SPIPlanPtr config_plan = NULL;

#define CONFIG_SQL \
	"SELECT lease_timeout, max_attempts, " \
	"       pg_catalog.date_part('epoch', backoff_base)::pg_catalog.float8, backoff_factor, " \
	"       pg_catalog.date_part('epoch', backoff_max)::pg_catalog.float8, backoff_jitter, " \
	"       item_ttl, dedup_window, max_in_flight, notify, audit, " \
	"       breaker_threshold IS NOT NULL, paused, breaker_state, " \
	"       breaker_opened_at" OP("+") "breaker_cooldown, " \
	"       probe_expires_at, probe_item_id, " \
	"       restrict_reader, restrict_producer, restrict_worker, " \
	"       /* read through to_jsonb: 0.1.0's table has no flow columns */ " \
	"       (pg_catalog.to_jsonb(q)" OP("->>") "'flow_limits')::pg_catalog.bool, " \
	"       (pg_catalog.to_jsonb(q)" OP("->>") "'flow_rate')::pg_catalog.bool, " \
	"       backoff_base, backoff_max " \
	"  FROM queue.queue_config q WHERE queue_name" OP("=") "$1"

/*
 * Relcache callback: a message about queue_config (or a reset of all)
 * drops the cache.  The oid is looked up again on next use, since DROP and
 * CREATE EXTENSION give the table a new one.
 */
void
queue_config_relcache(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == anchor_relid)
	{
		if (config_cache != NULL)
		{
			hash_destroy(config_cache);
			config_cache = NULL;
		}
		if (worker_cache != NULL)
		{
			hash_destroy(worker_cache);
			worker_cache = NULL;
		}
		anchor_relid = InvalidOid;
	}
}

static Oid
anchor_oid(void)
{
	if (!OidIsValid(anchor_relid))
	{
		Oid			nsp = get_namespace_oid("queue", false);

		anchor_relid = get_relname_relid("queue_config", nsp);
		if (!OidIsValid(anchor_relid))
			elog(ERROR, "queue: table queue.queue_config is missing");
	}
	return anchor_relid;
}

/*
 * queue._invalidate_cache() returns trigger
 *
 * Statement trigger on the tables the caches mirror: tells every backend,
 * this one included, to drop its cached settings once this transaction
 * commits (this backend at its next command).
 */
Datum
queue_invalidate_cache(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "queue._invalidate_cache() must be called as a trigger");
	CacheInvalidateRelcacheByRelid(anchor_oid());
	return PointerGetDatum(NULL);
}

static inline bool
get_bool(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return !isnull && DatumGetBool(d);
}

/* Read one queue's row into a new cache entry; false if there is no queue. */
static bool
load_entry(const char *queue_name, ConfigEntry *e)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;
	char	   *s;
	QueueConfig *cfg = &e->cfg;

	values[0] = CStringGetTextDatum(queue_name);
	queue_spi_exec(queue_prepare_cached(&config_plan, CONFIG_SQL, 1, argtypes),
				   values, NULL, false, 1, SPI_OK_SELECT, "reading queue settings");
	if (SPI_processed == 0)
		return false;

	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	memset(cfg, 0, sizeof(QueueConfig));
	cfg->lease_timeout = *DatumGetIntervalP(SPI_getbinval(tup, desc, 1, &isnull));
	cfg->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	cfg->backoff_base_s = DatumGetFloat8(SPI_getbinval(tup, desc, 3, &isnull));
	cfg->backoff_factor = DatumGetFloat8(SPI_getbinval(tup, desc, 4, &isnull));
	cfg->backoff_max_s = DatumGetFloat8(SPI_getbinval(tup, desc, 5, &isnull));
	cfg->backoff_jitter = DatumGetFloat8(SPI_getbinval(tup, desc, 6, &isnull));
	cfg->backoff_base = *DatumGetIntervalP(SPI_getbinval(tup, desc, 23, &isnull));
	cfg->backoff_max = *DatumGetIntervalP(SPI_getbinval(tup, desc, 24, &isnull));
	d = SPI_getbinval(tup, desc, 7, &isnull);
	cfg->has_item_ttl = !isnull;
	if (!isnull)
		cfg->item_ttl = *DatumGetIntervalP(d);
	d = SPI_getbinval(tup, desc, 8, &isnull);
	cfg->has_dedup_window = !isnull;
	if (!isnull)
		cfg->dedup_window = *DatumGetIntervalP(d);
	d = SPI_getbinval(tup, desc, 9, &isnull);
	cfg->max_in_flight = isnull ? 0 : DatumGetInt32(d);
	cfg->notify = get_bool(tup, desc, 10);
	s = SPI_getvalue(tup, desc, 11);
	cfg->audit = s ? s[0] : 'f';
	cfg->has_breaker = get_bool(tup, desc, 12);
	cfg->paused = get_bool(tup, desc, 13);
	s = SPI_getvalue(tup, desc, 14);
	cfg->breaker_state = s ? s[0] : 'c';
	d = SPI_getbinval(tup, desc, 15, &isnull);
	e->has_cooldown_end = !isnull;
	e->cooldown_end = isnull ? 0 : DatumGetTimestampTz(d);
	d = SPI_getbinval(tup, desc, 16, &isnull);
	e->has_probe_expiry = !isnull;
	e->probe_expires_at = isnull ? 0 : DatumGetTimestampTz(d);
	d = SPI_getbinval(tup, desc, 17, &isnull);
	cfg->probe_item_id = isnull ? 0 : DatumGetInt64(d);
	cfg->restrict_reader = get_bool(tup, desc, 18);
	cfg->restrict_producer = get_bool(tup, desc, 19);
	cfg->restrict_worker = get_bool(tup, desc, 20);
	cfg->flow_limits = get_bool(tup, desc, 21);
	cfg->flow_rate = get_bool(tup, desc, 22);
	return true;
}

/*
 * queue_lock_queue
 *		Take the queue lock of queue_name (see the file header) until the
 *		end of the transaction: shared for a call that uses the queue,
 *		exclusive to drop it or remove its leftovers.
 *
 * A transaction that had to wait for the lock and reads through a
 * transaction snapshot (REPEATABLE READ, SERIALIZABLE) cannot see what the
 * holder committed, so it fails with a serialization failure (40001), to be
 * retried, rather than add rows to a queue it cannot see was dropped.
 */
void
queue_lock_queue(const char *queue_name, bool exclusive)
{
	LOCKTAG		tag;
	LOCKMODE	mode = exclusive ? ExclusiveLock : ShareLock;
	uint64		h = hash_bytes_extended((const unsigned char *) queue_name,
										strlen(queue_name), 0);

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 QUEUE_LOCKTAG_CLASS);
	if (LockAcquire(&tag, mode, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return;
	(void) LockAcquire(&tag, mode, false, false);
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to a concurrent drop of queue \"%s\"",
						queue_name),
				 errhint("Retry the transaction.")));
}

/*
 * queue_lock_private
 *		Take (wait) or try (!wait) lock `slot` of queue_name exclusively
 *		until the end of the transaction: the sweep lock, the max_in_flight
 *		stripes, the breaker lock (queue.h).  Tags of the queue lock's kind, one class per
 *		slot, so no role can take or hold them from SQL (pg_advisory_lock is
 *		executable by PUBLIC and would let anyone stall a queue).  Returns
 *		whether the lock is held.
 */
bool
queue_lock_private(const char *queue_name, uint16 slot, bool wait)
{
	LOCKTAG		tag;
	uint64		h = hash_bytes_extended((const unsigned char *) queue_name,
										strlen(queue_name), 0);

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 QUEUE_LOCKTAG_CLASS + slot);
	return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * queue._try_lock_sweep(queue_name text) returns boolean
 *
 * Tries the queue's sweep lock (queue_lock_private) for the transaction;
 * false when another session is sweeping the queue.
 */
Datum
queue_try_lock_sweep_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));

	PG_RETURN_BOOL(queue_lock_private(name, QUEUE_LOCK_SWEEP, false));
}

/*
 * queue._lock_breaker(queue_name text) returns void
 *
 * Waits for the queue's breaker lock (queue_lock_private) for the
 * transaction: failures of one queue judge the circuit breaker in turn.
 */
Datum
queue_lock_breaker_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));

	(void) queue_lock_private(name, QUEUE_LOCK_BREAKER, true);
	PG_RETURN_VOID();
}

/*
 * queue._try_lock_alert(queue_name text, kind text) returns boolean
 *
 * Tries, for the transaction, the lock under which an alert of this kind
 * is raised for the queue (queue._raise_alert): false while another
 * transaction is raising it, whose row is then the one open alert of that
 * kind.  One private lock per queue and kind: the tag hashes both names
 * (a queue name never holds the separator).
 */
Datum
queue_try_lock_alert_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	char	   *kind;

	queue_check_not_null(PG_ARGISNULL(1), "kind");
	kind = text_to_cstring(PG_GETARG_TEXT_PP(1));
	PG_RETURN_BOOL(queue_lock_private(psprintf("%s\x1f%s", name, kind), QUEUE_LOCK_ALERT, false));
}

/*
 * queue._lock_queue(queue_name text, exclusive boolean) returns void
 *
 * The queue lock for the PL/pgSQL functions: drop_queue and create_queue
 * take it exclusively, sweep's removal of leftovers too (exclusive true);
 * shared (false) is what every call that loads the queue's settings holds.
 * No argument may be NULL.
 */
Datum
queue_lock_queue_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));

	queue_check_not_null(PG_ARGISNULL(1), "exclusive");
	queue_lock_queue(name, PG_GETARG_BOOL(1));
	PG_RETURN_VOID();
}

/*
 * queue_load_config
 *		Fill *cfg for queue_name, or fail with 42704 if there is no such
 *		queue, holding the queue lock in share mode.  Must run inside an
 *		SPI connection.  *cfg is a copy: the cache may be dropped by any
 *		later statement.
 */
void
queue_load_config(const char *queue_name, QueueConfig *cfg)
{
	if (!queue_find_config(queue_name, cfg))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", queue_name),
				 errhint("Create it with queue.create_queue('%s').", queue_name)));
}

/*
 * queue_find_config
 *		queue_load_config for callers that go over several queues (heartbeat):
 *		false if there is no such queue, as when a drop_queue it waited for
 *		has committed.
 */
bool
queue_find_config(const char *queue_name, QueueConfig *cfg)
{
	ConfigEntry *e;
	bool		found;
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	/* NB: before the cache is trusted, so a drop we waited for is seen */
	queue_lock_queue(queue_name, false);

	/* see sessions' committed changes before trusting the cache */
	AcceptInvalidationMessages();
	(void) anchor_oid();

	if (config_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = NAMEDATALEN;
		ctl.entrysize = sizeof(ConfigEntry);
		config_cache = hash_create("queue settings cache", 16, &ctl,
								   HASH_ELEM | HASH_STRINGS);
	}

	e = (ConfigEntry *) hash_search(config_cache, queue_name, HASH_FIND, &found);
	if (!found)
	{
		ConfigEntry fresh;

		if (!load_entry(queue_name, &fresh))
			return false;
		/* NB: the SPI statement may have dropped the cache meanwhile */
		if (config_cache != NULL)
		{
			e = (ConfigEntry *) hash_search(config_cache, queue_name, HASH_ENTER, &found);
			memcpy(e, &fresh, sizeof(ConfigEntry));
			strlcpy(e->queue_name, queue_name, NAMEDATALEN);
		}
		else
			e = &fresh;
		*cfg = e->cfg;
		cfg->cooldown_over = e->has_cooldown_end && e->cooldown_end <= now;
		cfg->probe_lost = e->has_probe_expiry && e->probe_expires_at <= now;
		cfg->queue_name = pstrdup(queue_name);
		return true;
	}
	*cfg = e->cfg;
	cfg->cooldown_over = e->has_cooldown_end && e->cooldown_end <= now;
	cfg->probe_lost = e->has_probe_expiry && e->probe_expires_at <= now;
	cfg->queue_name = pstrdup(queue_name);
	return true;
}

/* Read a worker's row and its gates now; false if the worker is unknown. */
static bool
load_worker(Datum worker, WorkerEntry *e)
{
	Oid			argtypes[1] = {TEXTOID};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;

	queue_spi_exec(queue_prepare_cached(&worker_plan, WORKER_SQL, 1, argtypes),
				   &worker, NULL, false, 1, SPI_OK_SELECT, "reading worker");
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	e->gates.draining = get_bool(tup, desc, 1);
	e->gates.has_capacity = get_bool(tup, desc, 2);
	e->gates.last_seen = DatumGetTimestampTz(SPI_getbinval(tup, desc, 3, &isnull));
	e->gates.in_maintenance = get_bool(tup, desc, 4);
	d = SPI_getbinval(tup, desc, 5, &isnull);
	e->valid_until = isnull ? DT_NOEND : DatumGetTimestampTz(d);
	e->valid_from = DatumGetTimestampTz(SPI_getbinval(tup, desc, 6, &isnull));
	return true;
}

/*
 * queue_load_worker
 *		The gates of a worker for dequeue: false if the worker is unknown.
 *		Inside an SPI connection.  Called right after queue_load_config,
 *		which accepted pending invalidations.
 */
bool
queue_load_worker(Datum worker, QueueWorkerGates *gates)
{
	char	   *name = TextDatumGetCString(worker);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	WorkerEntry fresh;
	WorkerEntry *e = NULL;
	bool		found = false;
	bool		cacheable = strlen(name) < WORKER_KEYLEN;

	if (cacheable && worker_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = WORKER_KEYLEN;
		ctl.entrysize = sizeof(WorkerEntry);
		worker_cache = hash_create("queue worker cache", 64, &ctl,
								   HASH_ELEM | HASH_STRINGS);
	}
	if (cacheable)
		e = (WorkerEntry *) hash_search(worker_cache, name, HASH_FIND, &found);
	/* a window began or ended since the row was read: read it again */
	if (!found || now < e->valid_from || now >= e->valid_until)
	{
		if (!load_worker(worker, &fresh))
			return false;
		e = &fresh;
		/* NB: the SPI statement may have dropped the cache meanwhile */
		if (cacheable && worker_cache != NULL)
		{
			e = (WorkerEntry *) hash_search(worker_cache, name, HASH_ENTER, &found);
			memcpy(e, &fresh, sizeof(WorkerEntry));
			strlcpy(e->worker, name, WORKER_KEYLEN);
		}
	}
	*gates = e->gates;
	return true;
}

/*
 * queue_worker_seen_since
 *		Whether the cache knows the worker's last_seen to be at `since` or
 *		later.  The cache only ever lags behind the table (an update that
 *		moves last_seen back drops it, see queue._invalidate_cache), so a
 *		true answer needs no read.
 */
bool
queue_worker_seen_since(Datum worker, TimestampTz since)
{
	char	   *name;
	WorkerEntry *e;
	bool		found;

	if (worker_cache == NULL)
		return false;
	name = TextDatumGetCString(worker);
	if (strlen(name) >= WORKER_KEYLEN)
		return false;
	e = (WorkerEntry *) hash_search(worker_cache, name, HASH_FIND, &found);
	return found && e->gates.last_seen >= since;
}

/*
 * queue_worker_seen
 *		Record in the cache that last_seen was just written.
 */
void
queue_worker_seen(Datum worker, TimestampTz when)
{
	char	   *name = TextDatumGetCString(worker);
	WorkerEntry *e;
	bool		found;

	if (worker_cache == NULL || strlen(name) >= WORKER_KEYLEN)
		return;
	e = (WorkerEntry *) hash_search(worker_cache, name, HASH_FIND, &found);
	if (found)
		e->gates.last_seen = when;
}
