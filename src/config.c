/*-------------------------------------------------------------------------
 *
 * config.c
 *		Read one queue's settings and state for a hot-path call.
 *
 * Each call reads the queue's row in queue.queue_config through a kept
 * plan (one primary-key probe).  Reading afresh instead of caching keeps
 * pause, breaker and alter_queue effective at once in every backend, and
 * costs about as much as the cache invalidation machinery would.
 *
 * src/config.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "queue.h"

static SPIPlanPtr config_plan = NULL;

#define CONFIG_SQL \
	"SELECT lease_timeout, max_attempts, " \
	"       pg_catalog.date_part('epoch', backoff_base)::float8, backoff_factor, " \
	"       pg_catalog.date_part('epoch', backoff_max)::float8, backoff_jitter, " \
	"       item_ttl, dedup_window, max_in_flight, notify, audit, " \
	"       breaker_threshold IS NOT NULL, paused, breaker_state, " \
	"       breaker_opened_at + breaker_cooldown <= pg_catalog.now(), " \
	"       probe_expires_at <= pg_catalog.now(), probe_item_id, " \
	"       restrict_reader, restrict_producer, restrict_worker " \
	"  FROM queue.queue_config WHERE queue_name = $1"

static inline bool
get_bool(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return !isnull && DatumGetBool(d);
}

/*
 * queue_load_config
 *		Fill *cfg for queue_name, or fail with 42704 if there is no such
 *		queue.  Must run inside an SPI connection.
 */
void
queue_load_config(const char *queue_name, QueueConfig *cfg)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	SPIPlanPtr	plan;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;
	char	   *s;

	plan = queue_prepare_cached(&config_plan, CONFIG_SQL, 1, argtypes);
	values[0] = CStringGetTextDatum(queue_name);
	if (SPI_execute_plan(plan, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "queue: reading queue settings failed");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", queue_name),
				 errhint("Create it with queue.create_queue('%s').", queue_name)));

	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	memset(cfg, 0, sizeof(QueueConfig));
	cfg->queue_name = pstrdup(queue_name);
	cfg->lease_timeout = *DatumGetIntervalP(SPI_getbinval(tup, desc, 1, &isnull));
	cfg->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	cfg->backoff_base_s = DatumGetFloat8(SPI_getbinval(tup, desc, 3, &isnull));
	cfg->backoff_factor = DatumGetFloat8(SPI_getbinval(tup, desc, 4, &isnull));
	cfg->backoff_max_s = DatumGetFloat8(SPI_getbinval(tup, desc, 5, &isnull));
	cfg->backoff_jitter = DatumGetFloat8(SPI_getbinval(tup, desc, 6, &isnull));
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
	cfg->cooldown_over = get_bool(tup, desc, 15);
	cfg->probe_lost = get_bool(tup, desc, 16);
	d = SPI_getbinval(tup, desc, 17, &isnull);
	cfg->probe_item_id = isnull ? 0 : DatumGetInt64(d);
	cfg->restrict_reader = get_bool(tup, desc, 18);
	cfg->restrict_producer = get_bool(tup, desc, 19);
	cfg->restrict_worker = get_bool(tup, desc, 20);
}
